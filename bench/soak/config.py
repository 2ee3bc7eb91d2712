"""What one soak run is: its length, seed, load and where it writes (typed, built once by the
command line and handed to every part)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: the two tenants: one within its limits (every client kind), one sent past them
STEADY, GREEDY = "steady", "greedy"
STEADY_KEY, GREEDY_KEY = "soak-steady-key", "soak-greedy-key"
#: the greedy tenant's limits, small enough that its own requests pass them (413 and 429)
GREEDY_ROWS_IN_FLIGHT = 24
GREEDY_ROWS_PER_REQUEST = 32


@dataclass(frozen=True)
class Load:
    """Client threads per kind (closed loops: each waits for its answer, then thinks). The
    default keeps a 2-core machine busy but not saturated (about 3 rows/s offered; a 20-minute
    run with 5 s of thought offered 5 rows/s and queued up to 120 rows at times on a shared
    machine)."""

    duckdb_sessions: int = 2
    postgres_sessions: int = 2
    chat_threads: int = 4
    cell_sheets: int = 1
    relquery_threads: int = 1
    greedy_threads: int = 1
    #: seconds a client waits between two requests (drawn from 0.5x to 1.5x)
    think_s: float = 8.0

    @classmethod
    def light(cls) -> Load:
        """The smoke test's load: every kind, fewer threads (the suite shares 2 cores)."""
        return cls(duckdb_sessions=1, postgres_sessions=1, chat_threads=2)


@dataclass(frozen=True)
class SoakConfig:
    minutes: float
    seed: int
    out_dir: Path
    load: Load
    #: inject the scheduled faults (off: the load alone, to size it)
    faults: bool = True
    #: seconds between two samples of the server's processes and queues
    sample_s: float = 10.0
    #: the result cache's disk (a tmpfs), small so that filling it is quick
    cache_disk_mb: int = 64
    #: the longest the server may take to answer again after a kill (the issue's target)
    recovery_limit_s: float = 60.0
    #: seconds a client request may take before the harness calls it hung
    request_timeout_s: float = 300.0

    @property
    def seconds(self) -> float:
        return self.minutes * 60.0


def write_tenants_file(folder: Path) -> Path:
    """The server's tenants: ``steady`` (also the metrics reader) and ``greedy`` with small limits."""
    path = folder / "tenants.toml"
    path.write_text(
        f'[tenants.{STEADY}]\nkey = "{STEADY_KEY}"\nadmin = true\n\n'
        f'[tenants.{GREEDY}]\nkey = "{GREEDY_KEY}"\nmax_rows_in_flight = {GREEDY_ROWS_IN_FLIGHT}\n'
        f"max_rows_per_request = {GREEDY_ROWS_PER_REQUEST}\n"
    )
    return path
