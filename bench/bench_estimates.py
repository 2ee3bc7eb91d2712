"""How well EXPLAIN's estimates hold (issue 47), on the end-to-end workloads' statements.

For each workload (sql/bench_e2e*/, the statements, sizes and arrivals of bench/bench_e2e.py):

1. alone: every statement of the load-1.0 stream back to back on an idle engine. Before each, its
   EXPLAIN (``relserve.duckdb.explain``: the statement's engine prompt tokens, and its seconds
   alone and behind the engine's queue now); then it runs and is timed. The engine's own prompt
   tokens of everything the statement sent (first passes and probes included) are added up by a
   wrapper around the engine, per statement.
2. load 1.0: the same stream at its arrival times, 8 sessions (threads, one DuckDB connection
   each) on one engine. Each statement's EXPLAIN is taken when it starts (the session's previous
   statement has ended), then it runs; the "now" estimate, which replays the engine's queue of
   that moment with the engine's policy, is compared with its run time from that moment.

The engine runs in this process (``relserve.duckdb.connect(engine=...)``), as a library user
runs it; the result cache is off, the label memory (examples, priors, answer fields) is cleared
before each phase, so each phase's first statement of a template runs its first pass.

    .venv/bin/python bench/bench_estimates.py --quick                 # a few minutes
    .venv/bin/python bench/bench_estimates.py   # the figures

Targets: token counts equal to the engine's for every statement (reported: exact, or why not);
the idle estimate within +-25% of the time alone for 80% of the statements, the under-load
estimate within +-40% at load 1.0 for 80%, with the distribution of the errors.
The main workload is the tuning set (nothing was fitted on it either; it is where the estimate
was looked at while it was built), the two others are the check sets.

Results: bench/out/estimates.json and bench/out/estimates.md (--quick: estimates_quick.*).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e.workload import (  # noqa: E402
    DATASETS,
    QUICK_SIZES,
    SIZES,
    WORKLOADS,
    at_load,
    build_workload,
    load_statements,
    one_at_a_time,
    table_rows,
    tables_sql,
)

from relserve.percentile import percentile  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


class Recording:
    """The engine, keeping each relQuery handle a session's statements submit (to add up the
    engine's own prompt tokens of one statement)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.handles: list[Any] = []

    def submit(self, rq: Any, *args: Any, **kwargs: Any) -> Any:
        handle = self._engine.submit(rq, *args, **kwargs)
        self.handles.append(handle)
        return handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def prompt_tokens(self, since: int) -> int:
        return sum(h.result().stats.prompt_tokens for h in self.handles[since:])


@dataclass
class Measured:
    workload: str
    phase: str
    key: str
    name: str
    rows: int
    #: EXPLAIN's figures: the statement's engine prompt tokens, whether exact, and its seconds
    tokens_estimated: int
    tokens_exact: bool
    idle_s: float | None
    now_s: float | None
    explain_s: float
    #: what happened
    tokens_engine: int
    run_s: float
    queued_requests: int = 0
    error: str | None = None

    @property
    def estimate_s(self) -> float | None:
        return self.idle_s if self.phase == "alone" else self.now_s

    @property
    def rel_error(self) -> float | None:
        est = self.estimate_s
        return None if est is None or self.run_s <= 0 else (est - self.run_s) / self.run_s


def forget_template_memory() -> None:
    """Everything remembered per template, the adaptive label method's choices included: the
    phase's first statement of a template runs its first pass again."""
    from relserve import answer_lengths
    from relserve.estimate import selectivity
    from relserve.labels.memory import forget_all

    for forget in (forget_all, answer_lengths.forget, selectivity.forget):
        forget()


def run_statement(con: Any, rec: Recording, sql: str, workload: str, phase: str, w: Any) -> Measured:
    t0 = time.perf_counter()
    ex = con.explain(sql)
    explain_s = time.perf_counter() - t0
    est = ex.estimate
    since = len(rec.handles)
    error = None
    t1 = time.perf_counter()
    try:
        rel = con.sql(sql)
        if rel is not None:
            rel.fetchall()
    except Exception as e:  # recorded, the stream goes on
        error = f"{type(e).__name__}: {e}"[:300]
    run_s = time.perf_counter() - t1
    engine_tokens = rec.prompt_tokens(since)
    sites = [p.estimate for s in ex.sites for p in s.plans if p.estimate is not None]
    return Measured(
        workload, phase, w.key, w.item.name, w.item.rows,
        tokens_estimated=est.prompt_tokens if est else -1, tokens_exact=bool(est and est.exact),
        idle_s=est.idle_s if est else None, now_s=est.now_s if est else None, explain_s=explain_s,
        tokens_engine=engine_tokens, run_s=run_s,
        queued_requests=max((e.queued_requests for e in sites), default=0), error=error,
    )


def connect(rec: Recording, datasets: Path, sql_dir: Path) -> Any:
    import relserve.duckdb

    con = relserve.duckdb.connect(config={"threads": 1}, engine=rec, cache=False, progress=False)
    con.execute(tables_sql(datasets, sql_dir))
    return con


def alone_phase(engine: Any, work: list, workload: str, datasets: Path, sql_dir: Path, log) -> list[Measured]:
    forget_template_memory()
    engine.reset_prefix_cache()  # an earlier workload's prompts: not this phase's to reuse
    rec = Recording(engine)
    con = connect(rec, datasets, sql_dir)
    out = []
    for w in one_at_a_time(work):
        m = run_statement(con, rec, w.sql, workload, "alone", w)
        out.append(m)
        log(f"alone {w.key} {w.item.name:18s} rows={w.item.rows:3d} est={m.idle_s or 0:6.2f}s run={m.run_s:6.2f}s "
            f"tokens {m.tokens_estimated}/{m.tokens_engine}{'' if m.tokens_exact else ' (estimated)'}")
    con.close()
    return out


def load_phase(engine: Any, work: list, workload: str, datasets: Path, sql_dir: Path, log) -> list[Measured]:
    forget_template_memory()
    # the alone phase ran these very statements: without this the load phase's prompts come from
    # the prefix cache, which an estimate sees only for the requests running at that moment
    engine.reset_prefix_cache()
    sessions: dict[int, list] = {}
    for w in work:
        sessions.setdefault(w.item.session, []).append(w)
    out: list[Measured] = []
    lock = threading.Lock()
    recs = {s: Recording(engine) for s in sessions}
    conns = {s: connect(recs[s], datasets, sql_dir) for s in sessions}
    t0 = time.perf_counter() + 1.0

    def session(s: int) -> None:
        for w in sorted(sessions[s], key=lambda w: (w.arrival, w.item.seq)):
            delay = t0 + w.arrival - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            m = run_statement(conns[s], recs[s], w.sql, workload, "load 1.0", w)
            with lock:
                out.append(m)
            log(f"load  {w.key} {w.item.name:18s} rows={w.item.rows:3d} now={m.now_s or 0:6.2f}s run={m.run_s:6.2f}s "
                f"behind {m.queued_requests} requests")

    threads = [threading.Thread(target=session, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns.values():
        c.close()
    return out


def summary(rows: list[Measured], band: float) -> dict[str, Any]:
    errs = [m.rel_error for m in rows if m.rel_error is not None and m.error is None]
    within = sum(abs(e) <= band for e in errs)
    tokens = [m for m in rows if m.error is None]
    exact = [m for m in tokens if m.tokens_exact]
    return {
        "statements": len(rows),
        "failed": sum(m.error is not None for m in rows),
        "within": within,
        "share_within": within / len(errs) if errs else None,
        "band": band,
        "error_percentiles": {p: percentile(errs, p / 100) for p in (10, 25, 50, 75, 90)} if errs else {},
        "mean_abs_error": sum(abs(e) for e in errs) / len(errs) if errs else None,
        "token_counts_exact_claimed": len(exact),
        "token_counts_equal_when_exact": sum(m.tokens_estimated == m.tokens_engine for m in exact),
        "token_counts_equal_all": sum(m.tokens_estimated == m.tokens_engine for m in tokens),
        "token_error_when_estimated": [
            (m.tokens_estimated - m.tokens_engine) / m.tokens_engine for m in tokens if not m.tokens_exact and m.tokens_engine
        ],
    }


def markdown(results: dict[str, Any]) -> str:
    lines = ["| workload | phase | statements | within band | share | error p10 / p25 / p50 / p75 / p90 | tokens exact (claimed, equal) |",
             "|---|---|---|---|---|---|---|"]
    for wl, phases in results["summary"].items():
        for phase, s in phases.items():
            p = s["error_percentiles"]
            pct = " / ".join(f"{p[k]:+.0%}" for k in (10, 25, 50, 75, 90)) if p else "-"
            share = f"{s['share_within']:.0%}" if s["share_within"] is not None else "-"
            lines.append(f"| {wl} | {phase} | {s['statements']} | {s['within']} (+-{s['band']:.0%}) | {share} | {pct} | "
                         f"{s['token_counts_exact_claimed']}, {s['token_counts_equal_when_exact']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small statements, a short window")
    ap.add_argument("--workloads", default="main,other,third")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--datasets", type=Path, default=DATASETS)
    ap.add_argument("--phases", default="alone,load")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rate, window = (0.3, 30.0) if args.quick else (0.1, 240.0)
    sizes = QUICK_SIZES if args.quick else SIZES

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    from relserve import Engine

    engine = Engine()
    log(f"engine up: policy {engine.policy}, cost model {engine.cost_model.source}")
    measured: list[Measured] = []
    try:
        for wl in args.workloads.split(","):
            sql_dir = WORKLOADS[wl]
            statements = load_statements(sql_dir)
            items = build_workload(statements, sessions=args.sessions, rate=rate, horizon=window, seed=args.seed, sizes=sizes)
            work = at_load(items, statements, 1.0, window, args.seed, table_rows(sql_dir))
            log(f"{wl}: {len(work)} statements, {sum(w.item.rows for w in work)} rows")
            if "alone" in args.phases:
                measured += alone_phase(engine, work, wl, args.datasets, sql_dir, log)
            if "load" in args.phases:
                engine.wait_idle()
                measured += load_phase(engine, work, wl, args.datasets, sql_dir, log)
                engine.wait_idle()
    finally:
        engine.close()
    results: dict[str, Any] = {"measured": [asdict(m) | {"rel_error": m.rel_error} for m in measured], "summary": {}}
    for wl in args.workloads.split(","):
        phases = {}
        for phase, band in (("alone", 0.25), ("load 1.0", 0.40)):
            rows = [m for m in measured if m.workload == wl and m.phase == phase]
            if rows:
                phases[phase] = summary(rows, band)
        results["summary"][wl] = phases
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "estimates_quick" if args.quick else "estimates"
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    (args.out / f"{stem}.md").write_text(markdown(results) + "\n")
    print(markdown(results))


if __name__ == "__main__":
    main()
