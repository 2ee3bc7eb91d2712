"""What a run found, against the issue's targets: rows per client kind and what became of them,
the faults and the recoveries, the cache checks, each sampled figure's slope per hour, and p99
latency at the end against the baseline window."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from soak.cache_check import CacheFileCheck
from soak.causes import FINDINGS, cause_of
from soak.drift import Drift, windows
from soak.faults import HEAVY, Injected
from soak.ledger import Request
from soak.sampler import Sample
from soak.server import Outage

#: a server process's first minutes (its registry of finished jobs fills for 10 minutes) are
#: left out of the memory slope
WARM_UP_S = 600.0
#: the targets
RSS_SLOPE_LIMIT_MB_H = 50.0
P99_RATIO_LIMIT = 1.2
#: open files and threads "back at the baseline": within this many of the level before the fault
FD_SLACK, THREAD_SLACK = 8, 4
#: the window before a fault whose median is the open files' and threads' baseline
BASELINE_S = 600.0


@dataclass
class KindRows:
    kind: str
    requests: int = 0
    rows: int = 0
    answered: int = 0
    errored: int = 0
    lost: int = 0
    duplicated: int = 0
    #: requests the client faulted on purpose (disconnects, cancels, timeouts), by fault
    faulted: dict[str, int] = field(default_factory=dict)
    #: errored rows by cause
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class Slope:
    name: str
    unit: str
    per_hour: float | None
    #: samples the slope was fitted on
    samples: int
    first: float | None = None
    last: float | None = None


@dataclass
class FaultOutcome:
    kind: str
    at_s: float
    detail: str
    recovery_s: float | None = None
    replay_rows: int = 0
    replay_from_cache: int = 0
    replay_problems: list[str] = field(default_factory=list)
    #: the machine's load average when it was injected (other work on a shared machine)
    load_1min: float | None = None
    fds_before: float | None = None
    fds_after: float | None = None
    threads_before: float | None = None
    threads_after: float | None = None

    @property
    def back_to_baseline(self) -> bool | None:
        if None in (self.fds_before, self.fds_after, self.threads_before, self.threads_after):
            return None
        return self.fds_after <= self.fds_before + FD_SLACK and self.threads_after <= self.threads_before + THREAD_SLACK


@dataclass
class SoakReport:
    command: str
    machine: str
    minutes: float
    seed: int
    load: dict[str, float]
    kinds: list[KindRows]
    #: errors no cause matched (or the harness's own checks that failed), with an example each
    unexplained: list[str]
    #: requests that never ended (a client still waiting when the run stopped)
    hung: list[str]
    start_with_corrupt_cache: str
    outages: list[Outage]
    cache_files: list[CacheFileCheck]
    faults: list[FaultOutcome]
    slopes: list[Slope]
    latency: list[Drift]
    samples: list[Sample]
    targets: dict[str, bool] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return sum(k.lost for k in self.kinds)

    @property
    def duplicated(self) -> int:
        return sum(k.duplicated for k in self.kinds)


# ---------------------------------------------------------------------- building it


def rows_by_kind(requests: list[Request]) -> tuple[list[KindRows], list[str]]:
    kinds: dict[str, KindRows] = {}
    unexplained: dict[str, str] = {}
    for r in requests:
        k = kinds.setdefault(r.kind, KindRows(r.kind))
        k.requests += 1
        k.rows += r.rows
        if r.fault:
            k.faulted[r.fault] = k.faulted.get(r.fault, 0) + 1
        for got in r.outcomes:
            if not got:
                k.lost += 1
                continue
            k.duplicated += len(got) - 1
            if got[0].answered:
                k.answered += 1
                continue
            k.errored += 1
            cause = cause_of(got[0].detail)
            k.causes[cause] = k.causes.get(cause, 0) + 1
            if cause in FINDINGS:
                unexplained.setdefault(got[0].detail[:200], f"{r.kind} request {r.serial}: {got[0].detail[:300]!r}")
    return sorted(kinds.values(), key=lambda k: k.kind), list(unexplained.values())


def _fit(points: list[tuple[float, float, int]]) -> float | None:
    """Slope per hour of (t seconds, value, group): one line per group with a shared slope (a
    restarted server starts from its own level; what matters is how each grows)."""
    groups: dict[int, list[tuple[float, float]]] = {}
    for t, v, g in points:
        groups.setdefault(g, []).append((t, v))
    num = den = 0.0
    for pts in groups.values():
        if len(pts) < 2:
            continue
        mt = statistics.fmean(t for t, _ in pts)
        mv = statistics.fmean(v for _, v in pts)
        num += sum((t - mt) * (v - mv) for t, v in pts)
        den += sum((t - mt) ** 2 for t, _ in pts)
    return num / den * 3600.0 if den else None


def slopes(samples: list[Sample], warm_up_s: float) -> list[Slope]:
    """Each figure's slope per hour, on the samples of server processes past their warm-up."""
    warm = [s for s in samples if s.up and s.age_s is not None and s.age_s >= warm_up_s]
    figures = {
        "server RSS": ("MB", lambda s: s.server_rss_mb),
        "engine RSS": ("MB", lambda s: s.engine_rss_mb),
        "server open files": ("fds", lambda s: s.server_fds),
        "server threads": ("threads", lambda s: s.server_threads),
        "engine open files": ("fds", lambda s: s.engine_fds),
        "engine threads": ("threads", lambda s: s.engine_threads),
        "result cache on disk": ("MB", lambda s: s.cache_mb),
        "rows in flight": ("rows", lambda s: sum(s.rows_in_flight.values()) if s.rows_in_flight else None),
        "relQueries in flight": ("relQueries", lambda s: sum(s.relqueries_in_flight.values()) if s.relqueries_in_flight else None),
    }
    kinds = sorted({k for s in samples for k in s.latency})
    for kind in kinds:
        figures[f"p50 {kind}"] = ("s", lambda s, kind=kind: s.latency[kind][1] if kind in s.latency else None)
        figures[f"p99 {kind}"] = ("s", lambda s, kind=kind: s.latency[kind][2] if kind in s.latency else None)
    out = []
    for name, (unit, read) in figures.items():
        # the cache outlives the server's restarts: one line for it; the processes one each
        pts = [(s.t, v, 0 if name == "result cache on disk" else s.incarnation) for s in warm if (v := read(s)) is not None]
        out.append(Slope(name, unit, _fit(pts), len(pts), pts[0][1] if pts else None, pts[-1][1] if pts else None))
    return out


def latency_windows(requests: list[Request], started: float, seconds: float) -> list[Drift]:
    """Per client kind, the latencies of minutes 10-20 of an hour (a sixth to a third of any run)
    and of the last 10 minutes (the last sixth), on fully answered requests no client faulted."""
    return windows([(r.kind, r.ended - started, r.latency_s) for r in requests
                    if r.ended is not None and r.fault is None and r.fully_answered], seconds)


def _median(samples: list[Sample], a: float, b: float, read) -> float | None:
    """The median of a figure over the samples in [a, b) taken while the server answered."""
    xs = [v for s in samples if a <= s.t < b and s.up and (v := read(s)) is not None]
    return statistics.median(xs) if xs else None


def fault_outcomes(injected: list[Injected], samples: list[Sample]) -> list[FaultOutcome]:
    """Each fault, with the server's open files and threads in the ten minutes before it and in the
    two minutes from one minute after its effect ended (the load settled again)."""
    out = []
    for inj in injected:
        f = FaultOutcome(inj.fault.kind, inj.at_s, inj.detail.strip())
        if inj.outage is not None:
            f.recovery_s = inj.outage.seconds
        if inj.replay is not None:
            f.replay_rows, f.replay_from_cache = inj.replay.rows, inj.replay.from_cache
            f.replay_problems = inj.replay.problems[:5]
        end = inj.ended_s if inj.ended_s is not None else inj.at_s
        near = [x for x in samples if abs(x.t - inj.at_s) <= 10]
        f.load_1min = near[0].load_1min if near else None
        # the baseline is the level the server held over the ten minutes before: the minute before
        # alone can fall inside the restart after an earlier fault (a half-started server's 9 files)
        f.fds_before = _median(samples, inj.at_s - BASELINE_S, inj.at_s, lambda s: s.server_fds)
        f.threads_before = _median(samples, inj.at_s - BASELINE_S, inj.at_s, lambda s: s.server_threads)
        f.fds_after = _median(samples, end + 60, end + 180, lambda s: s.server_fds)
        f.threads_after = _median(samples, end + 60, end + 180, lambda s: s.server_threads)
        out.append(f)
    return out


def judge(report: SoakReport, recovery_limit_s: float) -> dict[str, bool]:
    kills = [f for f in report.faults if f.kind in HEAVY and f.kind != "disk_full"]
    rss = next(s for s in report.slopes if s.name == "server RSS")
    checked = [f for f in report.faults if f.back_to_baseline is not None]
    lat = [w for w in report.latency if w.ratio is not None]
    return {
        "0 rows lost or duplicated": report.lost == 0 and report.duplicated == 0 and not report.hung,
        "every error names its cause": not report.unexplained,
        f"answers again within {recovery_limit_s:.0f} s of every kill": bool(kills) and all(
            f.recovery_s is not None and f.recovery_s <= recovery_limit_s for f in kills),
        f"server RSS grows < {RSS_SLOPE_LIMIT_MB_H:.0f} MB/hour after warm-up": rss.per_hour is not None
        and rss.per_hour < RSS_SLOPE_LIMIT_MB_H,
        "open files and threads back to baseline after each fault": bool(checked) and all(f.back_to_baseline for f in checked),
        f"p99 per client kind at the end within {P99_RATIO_LIMIT}x of the baseline window": bool(lat) and all(
            w.ratio <= P99_RATIO_LIMIT for w in lat),
        "no client kind's tail drifted (last window's requests past the baseline's p95)": bool(lat) and not any(
            w.drifted(len(report.latency)) for w in report.latency),
        "the result cache clean after every kill, answering the same rows": bool(kills)
        and all(c.clean for c in report.cache_files)
        and all(f.replay_rows > 0 and not f.replay_problems and f.replay_from_cache == f.replay_rows for f in kills),
        "the server starts on a corrupt cache file": report.start_with_corrupt_cache.startswith("ok"),
        "the result cache answers again once its full disk is freed": _refilled(report.faults),
    }


def _refilled(faults: list[FaultOutcome]) -> bool:
    """Every full disk was freed and the cache then answered the rows sent after it (a run
    without a tmpfs has no full disk to judge)."""
    full = [f for f in faults if f.kind == "disk_full"]
    injected = [f for f in full if not f.detail.startswith("not injected")]
    if full and not injected:
        return True
    return bool(injected) and all(
        f.replay_rows > 0 and not f.replay_problems and f.replay_from_cache == f.replay_rows for f in injected)
