"""Every ``sample_s`` seconds: the server's and its engine's memory, the server's open files and
threads, the result cache's size on disk, the queues (``/metrics``), and each client kind's
latency over the last minute."""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from relserve.percentile import percentile
from soak.config import STEADY_KEY
from soak.ledger import Ledger
from soak.server import Supervisor

MB = 1 << 20
#: the latency figures of a sample cover the requests ended in this many seconds before it
LATENCY_WINDOW_S = 60.0
_GAUGE = re.compile(r'^(relserve_(?:relqueries|rows)_in_flight)\{tenant="([^"]+)"\} ([0-9.e+-]+)$', re.M)


@dataclass
class Sample:
    #: seconds since the run started
    t: float
    up: bool
    incarnation: int
    #: the machine's load average over the last minute (the machine is shared)
    load_1min: float
    #: seconds since the current server process first answered (None: down)
    age_s: float | None
    server_rss_mb: float | None = None
    engine_rss_mb: float | None = None
    engine_processes: int = 0
    server_fds: int | None = None
    server_threads: int | None = None
    engine_fds: int | None = None
    engine_threads: int | None = None
    cache_mb: float = 0.0
    disk_free_mb: float | None = None
    #: relQueries and engine rows not finished, per tenant (from /metrics)
    relqueries_in_flight: dict[str, float] = field(default_factory=dict)
    rows_in_flight: dict[str, float] = field(default_factory=dict)
    #: per client kind: (requests, p50 s, p99 s) of the fully answered requests of the last minute
    latency: dict[str, tuple[int, float, float]] = field(default_factory=dict)


def _sum(procs: list[psutil.Process], read) -> int | None:
    total = 0
    for p in procs:
        try:
            total += read(p)
        except psutil.Error:
            pass
    return total


class Sampler(threading.Thread):
    def __init__(self, supervisor: Supervisor, ledger: Ledger, home: Path, every_s: float, started: float) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.supervisor = supervisor
        self.ledger = ledger
        self.home = home
        self.every_s = every_s
        self.started = started
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s - (time.monotonic() - self.started) % self.every_s):
            self.samples.append(self.take())

    def take(self) -> Sample:
        now = time.monotonic()
        sup = self.supervisor
        up_since = sup.up_since
        s = Sample(now - self.started, up_since is not None, sup.incarnation, os.getloadavg()[0],
                   None if up_since is None else now - up_since)
        me, engine = sup.server.processes()
        if me is not None:
            try:
                s.server_rss_mb = me.memory_info().rss / MB
                s.server_fds = me.num_fds()
                s.server_threads = me.num_threads()
            except psutil.Error:
                pass
            s.engine_processes = len(engine)
            s.engine_rss_mb = _sum(engine, lambda p: p.memory_info().rss) / MB
            s.engine_fds = _sum(engine, lambda p: p.num_fds())
            s.engine_threads = _sum(engine, lambda p: p.num_threads())
        s.cache_mb = sum(f.stat().st_size for f in self.home.glob("results.sqlite*") if f.is_file()) / MB
        try:
            s.disk_free_mb = psutil.disk_usage(str(self.home)).free / MB
        except OSError:
            pass
        if s.up:
            self._queues(s)
        self._latency(s, now)
        return s

    def _queues(self, s: Sample) -> None:
        try:
            r = httpx.get(self.supervisor.server.url + "/metrics", headers={"Authorization": f"Bearer {STEADY_KEY}"}, timeout=5)
        except httpx.HTTPError:
            return
        for name, tenant, value in _GAUGE.findall(r.text):
            target = s.relqueries_in_flight if name.startswith("relserve_relqueries") else s.rows_in_flight
            target[tenant] = float(value)

    def _latency(self, s: Sample, now: float) -> None:
        by_kind: dict[str, list[float]] = {}
        for r in self.ledger.finished_between(now - LATENCY_WINDOW_S, now):
            if r.fault is None and r.fully_answered:
                by_kind.setdefault(r.kind, []).append(r.latency_s)
        for kind, xs in sorted(by_kind.items()):
            s.latency[kind] = (len(xs), percentile(xs, 0.5), percentile(xs, 0.99))
