"""The faults a run injects on a seeded schedule, and the thread that injects them.

Faults of the whole server (its engine core killed, the server killed -9, the cache's disk full)
come in the middle of the run, spaced for the server to recover between them: the first part
of the run is the baseline (memory after warm-up, latency in minutes 10-20 of an hour) and the
last part the comparison, each with only the light faults. Light faults come all along: a
PostgreSQL backend terminated every minute and a half or so, and, chosen per request by the
clients themselves, disconnects mid-stream, cancels and statement timeouts.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field

import psutil

from soak.cache_check import ReplayCheck, answered, replay
from soak.clients.postgres_sessions import PostgresSession
from soak.clients.relqueries import AnswerMemory, CachedAnswer
from soak.disk import CacheDisk
from soak.postgres import Postgres
from soak.server import Outage, Supervisor
from soak.texts import Texts

ENGINE_KILL, SERVER_KILL, DISK_FULL, PG_TERMINATE = "engine_kill", "server_kill", "disk_full", "pg_terminate"
HEAVY = (ENGINE_KILL, SERVER_KILL, DISK_FULL)
#: rows answered this long before a kill are in the cache (its write follows the job's last row)
CACHE_WRITE_MARGIN_S = 10.0


@dataclass(frozen=True)
class Fault:
    #: seconds from the run's start
    at_s: float
    kind: str
    #: how long it lasts (a full disk), 0 for a single blow
    hold_s: float = 0.0
    #: seconds from the run's start after which it is no longer injected (the server still not
    #: answering after the fault before): the comparison window at the end stays free of kills
    latest_s: float = float("inf")


def schedule(seconds: float, seed: int) -> list[Fault]:
    """The run's faults, the same for the same length and seed."""
    rng = random.Random(seed)
    long_run = seconds >= 30 * 60
    # the middle of the run: minutes 20-35 of an hour. A short run (the suite's smoke) starts them
    # once the clients have run 30 s and packs them: each waits for the server to answer again
    # after the one before (35-45 s a kill), and the last must recover before the run ends
    start, end = (seconds / 3, seconds * 7 / 12) if long_run else (min(30.0, seconds * 0.2), seconds * 0.65)
    heavy = [ENGINE_KILL, SERVER_KILL, DISK_FULL] * (2 if long_run else 1)
    rng.shuffle(heavy)
    slot = (end - start) / len(heavy)
    hold = 60.0 if long_run else 30.0
    faults = [
        Fault(start + k * slot + rng.uniform(0, slot * 0.3), kind, hold if kind == DISK_FULL else 0.0, end + slot)
        for k, kind in enumerate(heavy)
    ]
    t = rng.uniform(30, 90)
    while t < seconds - 30:
        faults.append(Fault(t, PG_TERMINATE, latest_s=t + 60))
        t += rng.uniform(60, 120)
    return sorted(faults, key=lambda f: f.at_s)


@dataclass
class Injected:
    """What one fault did."""

    fault: Fault
    #: seconds from the run's start when it was injected (after the previous one recovered)
    at_s: float
    done: bool = False
    detail: str = ""
    outage: Outage | None = None
    #: the rows answered before it, sent again once the server answered again
    replay: ReplayCheck | None = None
    #: seconds from the run's start when its effect ended (disk freed, server answering)
    ended_s: float | None = None


@dataclass
class Injector:
    """Injects ``faults`` at their times (``start()``), each once the server answers again after
    the one before."""

    faults: list[Fault]
    supervisor: Supervisor
    disk: CacheDisk
    postgres: Postgres | None
    sessions: list[PostgresSession]
    memory: AnswerMemory
    #: rows answered before the first fault that the cache must keep (the probe)
    pinned: list[CachedAnswer]
    texts: Texts
    started: float
    recovery_wait_s: float = 600.0
    injected: list[Injected] = field(default_factory=list)
    #: (start, end) of the full-disk windows, time.monotonic(): no cache write then
    full_windows: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        for fault in self.faults:
            if self.stop.wait(max(0.0, self.started + fault.at_s - time.monotonic())):
                return
            if fault.kind == DISK_FULL and not self.disk.tmpfs:
                self.injected.append(Injected(fault, self._now(), detail=f"not injected: {self.disk.why_not}"))
                continue
            self._wait_up(until_s=fault.latest_s)
            if self.stop.is_set():
                return
            if self.supervisor.up_since is None:
                self.injected.append(Injected(fault, self._now(), detail="not injected: the server was still starting"))
                continue
            done = Injected(fault, self._now())
            self.injected.append(done)
            try:
                {ENGINE_KILL: self._kill_engine, SERVER_KILL: self._kill_server, DISK_FULL: self._fill_disk,
                 PG_TERMINATE: self._terminate_backend}[fault.kind](done)
            except Exception as e:  # the run goes on; the report names what failed
                done.detail += f" failed: {type(e).__name__}: {e}"

    def _now(self) -> float:
        return time.monotonic() - self.started

    def _wait_up(self, outage: Outage | None = None, until_s: float = float("inf")) -> None:
        """Until the server answers (``outage``: until that outage has ended), at most
        ``recovery_wait_s`` and not past ``until_s`` (from the run's start), or until the run stops."""
        end = min(time.monotonic() + self.recovery_wait_s, self.started + until_s)

        def down() -> bool:
            return self.supervisor.up_since is None if outage is None else outage.up_at is None

        while down() and time.monotonic() < end and not self.stop.is_set():
            time.sleep(0.2)

    # ------------------------------------------------------------------ the faults

    def _kill_engine(self, done: Injected) -> None:
        me, children = self.supervisor.server.processes()
        core = [p for p in children if "EngineCore" in _name(p)] or children
        if not core:
            done.detail = "no engine process to kill"
            return
        done.outage = self.supervisor.expect_exit("engine core killed")
        for p in core:
            p.send_signal(signal.SIGKILL)
        done.detail = f"killed {', '.join(f'{_name(p)} ({p.pid})' for p in core)}"
        self._after_kill(done)

    def _kill_server(self, done: Injected) -> None:
        done.outage = self.supervisor.expect_exit("server killed -9")
        done.detail = f"kill -9 of relserve serve ({self.supervisor.server.pid})"
        self.supervisor.server.kill()
        self._after_kill(done)

    def _after_kill(self, done: Injected) -> None:
        kill_at = time.monotonic()
        rows = self.pinned + [r for r in self.memory.ended_before(kill_at - CACHE_WRITE_MARGIN_S)
                              if not self._during_full_disk(r.ended)]
        self._wait_up(done.outage)
        if done.outage is not None and done.outage.up_at is not None:
            done.ended_s = done.outage.up_at - self.started
            done.replay = replay(self.supervisor.server.url, rows, done.fault.kind)
        done.done = True

    def _during_full_disk(self, t: float) -> bool:
        return any(a - CACHE_WRITE_MARGIN_S <= t <= b + CACHE_WRITE_MARGIN_S for a, b in self.full_windows)

    def _fill_disk(self, done: Injected) -> None:
        start = time.monotonic()
        taken = self.disk.fill()
        try:
            done.detail = f"took the last {taken / (1 << 20):.1f} MB of the cache's disk for {done.fault.hold_s:.0f} s"
            self.stop.wait(done.fault.hold_s)
        finally:
            self.disk.unfill()
            self.full_windows.append((start, time.monotonic()))
            done.ended_s = self._now()
        # the cache takes answers again: fresh rows, answered once, come back from it
        fresh = [f"{r} (after the full disk {done.at_s:.0f})" for r in self.texts.reviews[-8:]]
        first = answered(self.supervisor.server.url, fresh)
        time.sleep(CACHE_WRITE_MARGIN_S / 2)
        done.replay = replay(self.supervisor.server.url, first, "the disk freed")
        done.done = True

    def _terminate_backend(self, done: Injected) -> None:
        if self.postgres is None or not self.sessions:
            done.detail = "no PostgreSQL session"
            return
        end = time.monotonic() + 30
        while time.monotonic() < end and not self.stop.is_set():
            busy = [s for s in self.sessions if s.busy.is_set() and s.backend_pid is not None]
            if busy:
                victim = busy[0]
                with self.postgres.connect() as admin:
                    ok = admin.execute("SELECT pg_terminate_backend(%s)", [victim.backend_pid]).fetchone()[0]
                done.detail = f"pg_terminate_backend({victim.backend_pid}) of {victim.name} during a statement: {ok}"
                done.done = bool(ok)
                done.ended_s = self._now()
                return
            time.sleep(0.05)
        done.detail = "no session was running a statement within 30 s"


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return "?"
