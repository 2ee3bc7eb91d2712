"""One soak run, from a fresh cache disk to the report: the server on a corrupt cache file, the
PostgreSQL cluster, the probe rows the cache must keep, every client kind, the sampler and the
faults, then the verdict."""

from __future__ import annotations

import os
import platform
import shlex
import sys
import time
from pathlib import Path

from relserve import paths
from relserve.planner.cache import ResultCache
from soak.cache_check import CACHE_FILE, CacheFileCheck, answered, check_file
from soak.clients.base import ClientContext, ClientLoop
from soak.clients.cells import CellsClient
from soak.clients.chat import ChatClient
from soak.clients.duckdb_sessions import DuckDBSession
from soak.clients.postgres_sessions import PostgresSession
from soak.clients.relqueries import AnswerMemory, CachedAnswer, GreedyClient, RelQueryClient
from soak.config import SoakConfig, write_tenants_file
from soak.disk import CacheDisk
from soak.faults import Injector, schedule
from soak.ledger import Ledger
from soak.postgres import start_postgres
from soak.render import save_requests
from soak.report import WARM_UP_S, SoakReport, fault_outcomes, judge, latency_windows, rows_by_kind, slopes
from soak.sampler import Sampler
from soak.server import ServerProcess, Supervisor, free_port
from soak.texts import REPEATED, Texts

PROBE_ROWS = 16


def _machine() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _prepare_home(home: Path) -> None:
    """The server's home on the cache disk: the model shared with the machine's (a link), and
    a result cache file whose header a crash has torn."""
    (home / "models").symlink_to(paths.models_dir(), target_is_directory=True)
    cache = ResultCache(home / CACHE_FILE)
    cache.put_many("soak-model", {}, [(f"prompt {i}", f"answer {i}") for i in range(100)])
    cache.close()
    for suffix in ("-wal", "-shm"):
        (home / (CACHE_FILE + suffix)).unlink(missing_ok=True)
    with open(home / CACHE_FILE, "r+b") as f:
        f.write(b"torn by a crash " * 8)


def _corrupt_file_outcome(home: Path) -> str:
    moved = sorted(p.name for p in home.iterdir() if p.name.startswith(CACHE_FILE) and "corrupt" in p.name)
    return f"ok: the server started; the corrupt file was kept aside as {', '.join(moved) or '(nothing)'}"


def _probe(url: str, texts: Texts) -> list[CachedAnswer]:
    """Rows answered before any fault: every check after a kill sends them again."""
    return answered(url, [f"{r} (probe)" for r in texts.reviews[REPEATED : REPEATED + PROBE_ROWS]])


def run(config: SoakConfig, namespace_problem: str | None) -> SoakReport:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    disk = CacheDisk(config.cache_disk_mb).open(namespace_problem)
    pg = supervisor = None
    clients: list[ClientLoop] = []
    cache_files = []
    try:
        _prepare_home(disk.path)
        server = ServerProcess(disk.path, free_port(), write_tenants_file(config.out_dir), config.out_dir / "server.log")
        supervisor = Supervisor(server, on_exit=lambda outage: cache_files.append(check_file(disk.path, outage.cause)))
        print(f"starting relserve serve on {server.url} (its cache on {'a tmpfs' if disk.tmpfs else 'a folder'}: "
              f"{disk.why_not or f'{config.cache_disk_mb} MB'})", flush=True)
        try:
            supervisor.start()
            corrupt = _corrupt_file_outcome(disk.path)
        except RuntimeError as e:
            raise RuntimeError(f"the server did not start on a corrupt cache file: {e}") from None
        print(corrupt, flush=True)
        pg = start_postgres(server.url)
        texts = Texts()
        ledger = Ledger()
        ctx = ClientContext(config, server.url, ledger, texts)
        memory = AnswerMemory()
        pinned = _probe(server.url, texts)
        sessions = [PostgresSession(ctx, k, pg) for k in range(config.load.postgres_sessions)]
        clients = _clients(ctx, sessions, memory)
        started = time.monotonic()
        for c in clients:
            c.start()
        sampler = Sampler(supervisor, ledger, disk.path, config.sample_s, started)
        sampler.start()
        faults = schedule(config.seconds, config.seed) if config.faults else []
        injector = Injector(faults, supervisor, disk, pg, sessions, memory, pinned, texts, started)
        injector.start()
        print(f"{len(clients)} clients for {config.minutes:g} minutes; faults at "
              f"{', '.join(f'{f.at_s / 60:.1f} min {f.kind}' for f in faults if f.kind != 'pg_terminate')}", flush=True)
        while (left := started + config.seconds - time.monotonic()) > 0:
            time.sleep(min(60.0, left))
            done = sum(r.ended is not None for r in ledger.requests())
            print(f"  {(time.monotonic() - started) / 60:.1f} min: {done} requests ended, "
                  f"server incarnation {supervisor.incarnation}", flush=True)
        injector.stop.set()
        ctx.stop.set()
        injector.join(config.recovery_limit_s * 10)
        for c in clients:
            c.join(config.request_timeout_s + 30)
        hung = [f"{c.name}: {c.current.kind} request {c.current.serial} ({c.current.rows} rows)"
                for c in clients if c.is_alive() and c.current is not None]
        sampler.stop.set()
        sampler.join(30)
        save_requests(ledger.requests(), started, config.out_dir / "requests.jsonl")
        return _report(config, ledger, started, hung, corrupt, supervisor, cache_files, injector, sampler)
    finally:
        for c in clients:
            c.ctx.stop.set()
        if supervisor is not None:
            supervisor.finish()
        if pg is not None:
            pg.stop()
        disk.close()


def _clients(ctx: ClientContext, sessions: list[PostgresSession], memory: AnswerMemory) -> list[ClientLoop]:
    """Every client kind, as many of each as the load says."""
    load = ctx.config.load
    return [
        *(DuckDBSession(ctx, k) for k in range(load.duckdb_sessions)),
        *sessions,
        *(ChatClient(ctx, k) for k in range(load.chat_threads)),
        *(CellsClient(ctx, k) for k in range(load.cell_sheets)),
        *(RelQueryClient(ctx, k, memory) for k in range(load.relquery_threads)),
        *(GreedyClient(ctx, k) for k in range(load.greedy_threads)),
    ]


def _report(config: SoakConfig, ledger: Ledger, started: float, hung: list[str], corrupt: str, supervisor: Supervisor,
            cache_files: list[CacheFileCheck], injector: Injector, sampler: Sampler) -> SoakReport:
    requests = ledger.requests()
    kinds, unexplained = rows_by_kind(requests)
    report = SoakReport(
        command=" ".join([".venv/bin/python", *(shlex.quote(a) for a in sys.argv)]),
        machine=_machine(),
        minutes=config.minutes,
        seed=config.seed,
        load={k: float(v) for k, v in vars(config.load).items()},
        kinds=kinds,
        unexplained=unexplained,
        hung=hung,
        start_with_corrupt_cache=corrupt,
        outages=supervisor.outages,
        cache_files=cache_files,
        faults=fault_outcomes(injector.injected, sampler.samples),
        slopes=slopes(sampler.samples, min(WARM_UP_S, config.seconds / 6)),
        latency=latency_windows(requests, started, config.seconds),
        samples=sampler.samples,
    )
    report.targets = judge(report, config.recovery_limit_s)
    return report
