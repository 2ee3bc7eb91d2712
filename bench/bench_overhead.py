"""What relserve adds around the engine's work on a light DuckDB statement (issue 65): the main
e2e workload's statements (sql/bench_e2e/), a few rows each as at load 0.5, each statement's trace
(relserve/duckdb_ext/trace.py) averaged per statement kind, through a local connection and
through a server connection (``relserve serve``'s app on a loopback port, in a process of its own).

The engine is the tests' scripted double (tests/engine_doubles.py: answers at once, no model), so
every millisecond shown is relserve's own: parsing, DuckDB passes, planning, HTTP. ``--engine``
runs the same on the real engine (start it under ``flock "$ENGINE_LOCK"``; the other engineers'
engine jobs share the machine).

Before and after, side by side in one run (the same statements, alternating, medians):
* reading the SQL as issue 65 found it (three sqlglot parses a script: the option check, the
  routing and the call sites) against reading it once (``relserve/duckdb_ext/script.py``);
* checking an ``llm_extract`` answer with ``jsonschema.validate`` (the schema itself checked
  again for every row) against a validator made once per schema (``relserve/functions.py``);
* with ``--surfaces local,local+warm`` on the real engine: a call's shared prefix warmed before
  every relQuery (``local+warm``, as before 7 Dec) against only where the engine's prefix cache
  does not hold it already (``Engine.warm_prefix``);
* with ``--surfaces server-cold,server`` on the real engine: a server's jobs without a prefix
  warm-up (``server-cold``, as before 8 Dec) against with it (``relserve/server/jobs.py``).

    .venv/bin/python bench/bench_overhead.py                       # about a minute
    .venv/bin/python bench/bench_overhead.py --statements 20 --rows 30
    flock "$ENGINE_LOCK" .venv/bin/python bench/bench_overhead.py --engine
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]
OUT = ROOT / "bench" / "out"


@dataclass(frozen=True)
class Figures:
    """Means over one statement kind's runs, in ms."""

    surface: str
    statement: str
    runs: int
    wall_ms: float
    parse_ms: float
    passes: float
    passes_ms: float
    waves_ms: float
    other_ms: float
    engine_ms: float
    round_trip_ms: float
    first_pass_ms: float

    @property
    def beyond_engine_ms(self) -> float:
        return self.wall_ms - self.engine_ms


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--statements", type=int, default=8, help="statements of each kind, each over its own rows")
    ap.add_argument("--rows", type=int, default=12, help="rows each statement reads (the workload's mean is 33)")
    ap.add_argument("--engine", action="store_true", help="the real engine instead of the scripted double")
    ap.add_argument("--surfaces", default="local,server",
                    help="local, server, local+warm (the prefix warmed before every relQuery), server-cold (a "
                         "server whose jobs warm no prefix)")
    ap.add_argument("--out", type=Path, default=OUT / "overhead.json")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server surface's process
    ap.add_argument("--no-warm", action="store_true", help=argparse.SUPPRESS)  # ... with no prefix warm-up
    return ap.parse_args(argv)


def make_engine(real: bool):
    if real:
        from relserve.engine import Engine

        return Engine()
    from engine_doubles import ScriptedEngine

    def answer(prompt: str, rq) -> str:
        if rq.choices:
            return rq.choices[sum(prompt.encode()) % len(rq.choices)]
        if rq.json_schema is not None:
            return json.dumps({"rating": 1 + sum(prompt.encode()) % 5})
        return "fine: " + prompt[-20:]

    return ScriptedEngine(answer=answer)


@contextlib.contextmanager
def local_engine(real: bool) -> Iterator[dict]:
    engine = make_engine(real)
    try:
        yield {"engine": engine}
    finally:
        if real:
            engine.close()


@contextlib.contextmanager
def served(real: bool, warm: bool = True) -> Iterator[dict]:
    """A server (``create_app``) over the engine in a process of its own; yields ``server=URL``
    (``warm`` False: its jobs warm no prefix, as before 8 Dec)."""
    cmd = [sys.executable, __file__, "--serve"] + (["--engine"] if real else []) + ([] if warm else ["--no-warm"])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the server process did not start (it said {url!r})")
        yield {"server": url}
    finally:
        proc.stdin.close()  # the server process ends when its stdin does
        proc.wait(timeout=120)


def serve(real: bool, warm: bool = True) -> None:
    """``--serve``: the server over the engine, its URL on stdout, until stdin closes."""
    from relserve.planner.planned_rows import PlannedRows
    from relserve.server import ServerThread, create_app

    engine = make_engine(real)
    cold = contextlib.nullcontext() if warm else mock.patch.object(PlannedRows, "shared_prefix", lambda self: "")
    try:
        with cold, ServerThread(create_app(engine, cache=False)) as srv:
            print(srv.url, flush=True)
            sys.stdin.read()
    finally:
        if real:
            engine.close()


def run_kind(con, session, statement, offsets: list[int], rows: int) -> list[dict]:
    traces = []
    for offset in offsets:
        session.last_run = None
        t0 = time.perf_counter()
        rel = con.sql(statement.sql(offset, rows))
        if rel is not None:
            rel.fetchall()
        wall = time.perf_counter() - t0
        if session.last_run is not None:
            traces.append(session.last_run.trace.to_dict() | {"wall_s": wall})
    return traces


def figures(surface: str, name: str, traces: list[dict]) -> Figures:
    def mean(f) -> float:
        return statistics.fmean(f(t) for t in traces) * 1000 if traces else float("nan")

    return Figures(surface, name, len(traces), mean(lambda t: t["wall_s"]), mean(lambda t: t["parse_s"]),
                   statistics.fmean(len(t["passes"]) for t in traces) if traces else float("nan"),
                   mean(lambda t: t["passes_s"]), mean(lambda t: t["stages_s"]), mean(lambda t: t["other_s"]),
                   mean(lambda t: t["engine_s"]), mean(lambda t: t["round_trip_s"]), mean(lambda t: t["first_pass_s"]))


def reading_before_after(statements, rows: int, repeat: int = 50) -> list[tuple[str, float, float]]:
    """Per statement kind: ms to read its SQL as before (three parses) and now (one)."""
    import sqlglot

    from relserve.duckdb_ext.script import read_script
    from relserve.duckdb_ext.statement import split_statements

    out = []
    for st in statements:
        sql = st.sql(100, rows)
        read_script(sql)  # sqlglot's own first-use work, out of both figures

        def old(sql: str = sql) -> None:
            for _ in range(3):  # option names, routing, call sites: each split and parsed the script
                for text in split_statements(sql):
                    sqlglot.parse_one(text, dialect="duckdb")
                    sqlglot.Dialect.get_or_raise("duckdb").tokenize(text)

        # the median of alternating runs: the machine is shared, a slow moment hits both alike
        before, now = [], []
        for _ in range(repeat):
            for f, into in ((old, before), (lambda sql=sql: read_script(sql), now)):
                t0 = time.perf_counter()
                f()
                into.append((time.perf_counter() - t0) * 1000)
        out.append((st.name, statistics.median(before), statistics.median(now)))
    return out


def extract_check_before_after(statements, repeat: int = 200) -> list[tuple[str, float, float]]:
    """Per llm_extract statement kind: ms to check one answer against its schema as before
    (``jsonschema.validate``: the schema itself checked again each row) and now (a validator
    made once per schema)."""
    import jsonschema

    from relserve.duckdb_ext.script import read_script
    from relserve.duckdb_ext.statement import statement_of
    from relserve.functions import make_call

    out = []
    for st in statements:
        sites = statement_of(read_script(st.sql(0, 1)).statements[0]).sites
        for site in sites:
            if site.function.kind != "extract":
                continue
            schema = json.loads(site.node.expressions[1].this)
            call = make_call(site.function, site.node.expressions[0].this, json_schema=schema)
            answer = json.dumps({"rating": 4})
            t0 = time.perf_counter()
            for _ in range(repeat):
                jsonschema.validate(json.loads(answer), call.json_schema)
            before = (time.perf_counter() - t0) / repeat * 1000
            t0 = time.perf_counter()
            for _ in range(repeat):
                call.convert(answer)
            out.append((st.name, before, (time.perf_counter() - t0) / repeat * 1000))
    return out


def main() -> None:
    args = parse_args()
    if not args.engine:  # label plans of its own (the real engine needs the home with its model)
        os.environ.setdefault("RELSERVE_HOME", tempfile.mkdtemp(prefix="relserve-overhead-"))
    if args.serve:
        serve(args.engine, warm=not args.no_warm)
        return
    from e2e.workload import DATASETS, load_statements, tables_sql

    import relserve.duckdb
    from relserve.duckdb_ext.connections import session_of

    statements = load_statements()
    surfaces = [s.strip() for s in args.surfaces.split(",") if s.strip()]
    results: list[Figures] = []
    for surface in surfaces:
        # one engine at a time: the server's in a process of its own (as ``relserve serve`` runs,
        # so HTTP does not share this process's GIL with DuckDB), the local one in this process
        always_warm = (mock.patch("relserve.engine.engine.holds_whole_prompt", lambda *_: False)
                       if surface == "local+warm" else contextlib.nullcontext())
        server = surface in ("server", "server-cold")
        with (served(args.engine, warm=surface == "server") if server else local_engine(args.engine)) as where, always_warm:
            con = relserve.duckdb.connect(config={"threads": 1}, cache=False, progress=False, **where)
            con.execute(tables_sql(DATASETS))
            session = session_of(con.con)
            for k, st in enumerate(statements):
                # each statement over rows of its own; the first of a kind makes its label plan
                offsets = [(k * 997 + i * (args.rows + 7)) % (3000 - args.rows) for i in range(args.statements + 1)]
                run_kind(con, session, st, offsets[:1], args.rows)  # warm: plan made, sqlglot warm
                results.append(figures(surface, st.name, run_kind(con, session, st, offsets[1:], args.rows)))
            con.close()

    reading = reading_before_after(statements, args.rows)
    checks = extract_check_before_after(statements)
    print(f"engine: {'real' if args.engine else 'scripted double (answers at once)'}; {args.statements} statements "
          f"of each kind, {args.rows} rows each, after one warm-up statement of the kind; ms, mean per statement"
          + ("" if args.engine else "; the double reports an engine time for label first passes only"))
    print()
    print("| surface | statement | wall | engine | beyond the engine | parse | DuckDB passes (n) | waves | other | round trips | label first pass |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for f in results:
        print(f"| {f.surface} | {f.statement} | {f.wall_ms:.1f} | {f.engine_ms:.1f} | {f.beyond_engine_ms:.1f} | {f.parse_ms:.2f} "
              f"| {f.passes_ms:.1f} ({f.passes:.1f}) | {f.waves_ms:.1f} | {f.other_ms:.1f} | {f.round_trip_ms:.1f} | {f.first_pass_ms:.1f} |")
    print()
    print("Reading the SQL (sqlglot), ms per statement:")
    print()
    print("| statement | before: 3 parses | now: 1 parse | saved |")
    print("|---|---|---|---|")
    for name, before, now in reading:
        print(f"| {name} | {before:.2f} | {now:.2f} | {before - now:.2f} ({before / now:.1f}x) |")
    print()
    print("Checking an llm_extract answer against its schema, ms per row:")
    print()
    print("| statement | before: jsonschema.validate | now: validator made once | saved |")
    print("|---|---|---|---|")
    for name, before, now in checks:
        print(f"| {name} | {before:.3f} | {now:.3f} | {before - now:.3f} ({before / now:.0f}x) |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "engine": "real" if args.engine else "scripted",
                                    "statements": args.statements, "rows": args.rows,
                                    "figures": [asdict(f) | {"beyond_engine_ms": f.beyond_engine_ms} for f in results],
                                    "reading": [{"statement": n, "before_ms": b, "now_ms": w} for n, b, w in reading],
                                    "extract_check": [{"statement": n, "before_ms": b, "now_ms": w} for n, b, w in checks]}, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
