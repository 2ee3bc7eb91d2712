"""Work a planner avoids (issue 64), on the real default engine, side by side in one run.

``--limit``: ``WHERE llm_filter(...) LIMIT 10`` over 2,000 movie reviews of which 25% are
positive, through DuckDB, polars (``limit=10``) and PostgreSQL's batch node. Each surface starts
with no label plan and no result cache (a new user's first statement). Printed per surface: the
rows the LLM answered (the plan's first pass included), seconds, and whether every returned row is
one the full statement keeps, checked by asking the same call about the returned rows alone
(with the plan the LIMIT kept, no cache: a row's answer is a function of the row and the plan).
``--full`` also runs the full statement through DuckDB: every row, and its time for the ratio.
The ``exists`` surface runs ``SELECT EXISTS (SELECT 1 FROM reviews WHERE llm_filter(...))`` (its
"rows" is 1 when it found one).

``--order``: a statement with two ``llm_filter``s over a table of reviews, one keeping about 60%
of the rows and one about 10%, the selective one written second. Run in the written order
(``order_filters=False``), as planned (cheapest first) and written in the best order; then a
statement whose two filters keep about the same share, planned and written. Every run starts
with no plan and no cache and must return the same rows. ``--order-surfaces duckdb,postgres`` runs
them through DuckDB (``order_filters``) and PostgreSQL's batch node (``relserve.order_quals``).

    .venv/bin/python bench/bench_limit.py --limit --order [--full] [--out bench/out/limit.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

POSITIVE = "Is this movie review positive? Review: {review}"
LIMIT = 10


@dataclass
class Measured:
    name: str
    seconds: float
    llm_rows: int
    rows: int
    #: every returned row is kept by the full statement (None: not checked)
    kept_by_full: bool | None = None
    notes: list[str] = field(default_factory=list)


def reviews(rows: int, share: float, seed: int = 11) -> pl.DataFrame:
    """``rows`` rotten_tomatoes reviews, ``share`` of them fresh, shuffled; columns id, review, fresh."""
    from prevalence_tasks import _sample

    from relserve.workloads import load_table

    rt = load_table("rotten_tomatoes").filter(pl.col("review_content").str.len_chars() > 20)
    picked = _sample(rt, pl.col("review_type") == "fresh", rows, share, seed=seed)
    return pl.DataFrame({"id": list(range(rows)), "review": picked["review_content"].to_list(),
                         "fresh": picked["_truth"].to_list()})


def fresh_start() -> None:
    from relserve.labels.memory import forget_all

    forget_all()


def llm_rows_of(con) -> int:
    from relserve.duckdb_ext.connections import session_of

    run = session_of(getattr(con, "con", con)).last_run
    return sum(r.llm_rows for s in run.sites for r in s.analyzed)


def reviews_connection(engine, table: pl.DataFrame):
    """A new DuckDB connection (no plan, no cache) with ``table``'s ids and reviews as ``reviews``."""
    import relserve.duckdb

    fresh_start()
    con = relserve.duckdb.connect(engine=engine, cache=False, progress=True)
    con.register("reviews_frame", table.to_arrow())
    con.execute("CREATE TABLE reviews AS SELECT id, review FROM reviews_frame")
    return con


def duckdb_limit(engine, table: pl.DataFrame) -> Measured:
    con = reviews_connection(engine, table)
    t0 = time.perf_counter()
    got = con.sql(f"SELECT id, review FROM reviews WHERE llm_filter('{POSITIVE}', review) LIMIT {LIMIT}").fetchall()
    seconds = time.perf_counter() - t0
    answered = llm_rows_of(con)
    stopped = [r.stopped for s in con_sites(con) for r in s.analyzed if r.stopped]
    ids = ", ".join(str(i) for i, _ in got)
    again = con.sql(f"SELECT count(*) FROM reviews WHERE id IN ({ids}) AND llm_filter('{POSITIVE}', review)").fetchall()[0][0]
    return Measured("duckdb", seconds, answered, len(got), again == len(got), stopped)


def duckdb_exists(engine, table: pl.DataFrame) -> Measured:
    """``SELECT EXISTS (... WHERE llm_filter(...))``: decided by the first row that passes."""
    con = reviews_connection(engine, table)
    t0 = time.perf_counter()
    (found,), = con.sql(f"SELECT EXISTS (SELECT 1 FROM reviews WHERE llm_filter('{POSITIVE}', review))").fetchall()
    seconds = time.perf_counter() - t0
    stopped = [r.stopped for s in con_sites(con) for r in s.analyzed if r.stopped]
    return Measured("duckdb EXISTS", seconds, llm_rows_of(con), int(found), None, stopped)


def con_sites(con):
    from relserve.duckdb_ext.connections import session_of

    return session_of(getattr(con, "con", con)).last_run.sites


def duckdb_full(engine, table: pl.DataFrame) -> Measured:
    import relserve.duckdb

    fresh_start()
    con = relserve.duckdb.connect(engine=engine, cache=False, progress=True)
    con.register("reviews_frame", table.to_arrow())
    t0 = time.perf_counter()
    got = con.sql(f"SELECT id FROM reviews_frame WHERE llm_filter('{POSITIVE}', review)").fetchall()
    return Measured("duckdb, no LIMIT", time.perf_counter() - t0, llm_rows_of(con), len(got))


def polars_limit(engine, table: pl.DataFrame) -> Measured:
    import relserve.polars

    fresh_start()
    relserve.polars.configure(engine=engine, progress=True)
    frame = table.select("id", "review").lazy()
    out: list[pl.DataFrame] = []
    t0 = time.perf_counter()
    (record,) = relserve.polars.explain(lambda: out.append(frame.llm.filter(POSITIVE, limit=LIMIT).collect()),
                                        analyze=True)
    seconds = time.perf_counter() - t0
    got = out[0]
    from relserve.functions import LLM_FILTER, make_call
    from relserve.planner.plan_and_run import run_call

    # the returned rows again, no cache: the same call with the plan the limited one kept
    again = run_call(make_call(LLM_FILTER, POSITIVE), [got["review"].to_list()], engine=engine, cache=False,
                     progress=False).values
    return Measured("polars", seconds, record.llm_rows, got.height, all(v is True for v in again),
                    [record.stopped] if record.stopped else [])


def postgres_reviews(db, table: pl.DataFrame) -> None:
    """The table as ``reviews`` in the database, and a session that asks the engine (no cache) and
    waits as long as a benchmark run takes."""
    db.execute("CREATE TABLE reviews (id int PRIMARY KEY, review text)")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO reviews VALUES (%s, %s)", list(zip(table["id"], table["review"])))
    db.execute("ANALYZE reviews")
    db.execute("SET relserve.cache = off")
    db.execute("SET relserve.timeout = 3600")


def postgres_limit(engine, table: pl.DataFrame) -> Measured:
    import psycopg
    from pg_setup import cluster_and_server
    from test_postgres import KEY

    from relserve.client import Client

    fresh_start()
    with cluster_and_server(engine) as (conninfo, url), psycopg.connect(conninfo, autocommit=True) as db:
        postgres_reviews(db, table)
        with Client(url, api_key=KEY) as c:
            before = {j.id for j in c.list()}
        call = f"llm_filter('{POSITIVE.replace('{review}', '{r}')}', review)"
        t0 = time.perf_counter()
        got = db.execute(f"SELECT id FROM reviews WHERE {call} LIMIT {LIMIT}").fetchall()
        seconds = time.perf_counter() - t0
        with Client(url, api_key=KEY) as c:
            sizes = [j.progress.total for j in c.list() if j.id not in before]
        ids = ", ".join(str(i) for (i,) in got)
        again = db.execute(f"SELECT count(*) FROM reviews WHERE id IN ({ids}) AND {call}").fetchone()[0]
        plan = "\n".join(r for (r,) in db.execute(f"EXPLAIN SELECT id FROM reviews WHERE {call} LIMIT {LIMIT}"))
    bound = [line.strip() for line in plan.splitlines() if "Row Bound" in line]
    return Measured("postgres", seconds, sum(sizes), len(got), again == len(got),
                    [f"relQueries of {sizes} rows", *bound])


# ---------------------------------------------------------------- two filters

COMMON = "Is this review positive? Review: {review}"
RARE = "Is this a review of a beer? Review: {review}"
SAME_A = "Is this review positive? Review: {review}"
SAME_B = "Does the reviewer like what they review? Review: {review}"
WARM_A = "Is this review long? Review: {review}"
WARM_B = "Is this review funny? Review: {review}"


def mixed_reviews(rows: int, seed: int = 5) -> pl.DataFrame:
    """Reviews of films (90%, about 65% of them positive) and of beers (10%), shuffled."""
    from relserve.workloads import load_table

    beers = round(rows * 0.10)
    films = reviews(rows - beers, 0.65, seed=seed)["review"]
    beer = (load_table("beer_reviews").filter(pl.col("review_text").str.len_chars().is_between(40, 400))
            .sample(beers, seed=seed)["review_text"])
    both = pl.DataFrame({"review": pl.concat([films, beer])}).sample(fraction=1.0, seed=seed, shuffle=True)
    return both.with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))


def two_filters(engine, table: pl.DataFrame, first: str, second: str, *, order: bool, name: str) -> tuple[Measured, list]:
    import relserve.duckdb

    fresh_start()
    con = relserve.duckdb.connect(engine=engine, cache=False, progress=True, order_filters=order)
    con.register("frame", table.to_arrow())
    con.execute("CREATE TABLE reviews AS SELECT * FROM frame")
    sql = f"SELECT id FROM reviews WHERE llm_filter('{first}', review) AND llm_filter('{second}', review) ORDER BY id"
    t0 = time.perf_counter()
    got = [i for (i,) in con.sql(sql).fetchall()]
    seconds = time.perf_counter() - t0
    from relserve.duckdb_ext.connections import session_of

    run = session_of(getattr(con, "con", con)).last_run
    per_site = [sum(r.llm_rows for r in s.analyzed) for s in run.sites]
    return Measured(name, seconds, sum(per_site), len(got), None,
                    [*run.filter_orders, f"LLM rows per filter as written: {per_site}"]), got


def postgres_two_filters(db, url: str, first: str, second: str, *, order: bool, name: str) -> tuple[Measured, list]:
    """The same statement through PostgreSQL's batch node (``relserve.order_quals`` on or off), the
    calls' label plans forgotten first, no cache; the LLM rows are the rows of its relQueries."""
    from test_postgres import KEY

    from relserve.client import Client

    for template in (first, second):
        db.execute("SELECT relserve.forget_label_plans(%s, true)", [template])
    db.execute(f"SET relserve.order_quals = {'on' if order else 'off'}")
    sql = f"SELECT id FROM reviews WHERE llm_filter('{first}', review) AND llm_filter('{second}', review) ORDER BY id"
    with Client(url, api_key=KEY) as c:
        before = {j.id for j in c.list()}
    t0 = time.perf_counter()
    got = [i for (i,) in db.execute(sql).fetchall()]
    seconds = time.perf_counter() - t0
    with Client(url, api_key=KEY) as c:
        sizes = [j.progress.total for j in sorted(c.list(), key=lambda j: j.created) if j.id not in before]
    return Measured(name, seconds, sum(sizes), len(got), None, [f"relQueries of {sizes} rows"]), got


def postgres_order(engine, table: pl.DataFrame, repeat: int = 1) -> tuple[list[Measured], dict[str, list]]:
    """The two-filter runs of ``--order`` through PostgreSQL: one cluster and server for all of
    them; with ``repeat`` > 1 the five runs go round that many times and each contender's time is
    its median (its LLM rows and rows are the last round's, and must not change between rounds)."""
    import psycopg
    from pg_setup import cluster_and_server

    with cluster_and_server(engine) as (conninfo, url), psycopg.connect(conninfo, autocommit=True) as db:
        postgres_reviews(db, table)
        postgres_two_filters(db, url, WARM_A, WARM_B, order=True, name="warm-up")
        runs = [("written (selective 2nd)", COMMON, RARE, False), ("planned", COMMON, RARE, True),
                ("written best (selective 1st)", RARE, COMMON, False), ("equal shares, written", SAME_A, SAME_B, False),
                ("equal shares, planned", SAME_A, SAME_B, True)]
        times: dict[str, list[float]] = {name: [] for name, *_ in runs}
        last: dict[str, Measured] = {}
        rows: dict[str, list] = {}
        for _ in range(repeat):
            for name, first, second, order in runs:
                m, got = postgres_two_filters(db, url, first, second, order=order, name=name)
                times[name].append(m.seconds)
                if name in last and (m.llm_rows, got) != (last[name].llm_rows, rows[name]):
                    m.notes.append(f"a round before answered {last[name].llm_rows} LLM rows and {len(rows[name])} rows")
                last[name], rows[name] = m, got
    for name, m in last.items():
        m.seconds = statistics.median(times[name])
        if repeat > 1:
            m.notes.append("seconds per round: " + ", ".join(f"{t:.1f}" for t in times[name]))
    return list(last.values()), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", action="store_true", help="LIMIT 10 through DuckDB, polars and PostgreSQL")
    ap.add_argument("--full", action="store_true", help="with --limit: the full statement too (every row)")
    ap.add_argument("--surfaces", default="duckdb,polars,postgres,exists")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--order", action="store_true", help="two llm filters: written, planned and best order")
    ap.add_argument("--order-rows", type=int, default=600)
    ap.add_argument("--order-surfaces", default="duckdb", help="with --order: duckdb, postgres or both")
    ap.add_argument("--repeat", type=int, default=1, help="with --order through postgres: rounds (median time)")
    ap.add_argument("--out", default="bench/out/limit.json")
    args = ap.parse_args()

    import os
    import tempfile

    from relserve import Engine, paths

    # a home of its own (the models and calibrations of the usual one): no label plan or cached
    # answer from another run
    usual = paths.home()
    own = Path(tempfile.mkdtemp(prefix="relserve-bench-limit-"))
    for shared in ("models", "calibrations"):
        (own / shared).symlink_to(usual / shared)
    os.environ["RELSERVE_HOME"] = str(own)

    engine = Engine()
    results: dict[str, object] = {"engine": {"model": engine.model_id}}
    try:
        if args.limit:
            table = reviews(args.rows, 0.25)
            runs = {"duckdb": duckdb_limit, "polars": polars_limit, "postgres": postgres_limit, "exists": duckdb_exists}
            measured = [runs[s](engine, table) for s in args.surfaces.split(",")]
            if args.full:
                measured.append(duckdb_full(engine, table))
            results["limit"] = [asdict(m) for m in measured]
            print(f"\nLIMIT {LIMIT} over {args.rows:,} reviews, {table['fresh'].sum():,} of them positive")
            for m in measured:
                print(f"  {m.name:18} {m.llm_rows:6,} LLM rows ({m.llm_rows / args.rows:6.1%})  {m.seconds:7.1f} s  "
                      f"{m.rows} rows, kept by the full statement: {m.kept_by_full}")
                for note in m.notes:
                    print(f"      {note}")
            if args.full:
                full = measured[-1]
                for m in measured[:-1]:
                    print(f"  {m.name}: {full.seconds / m.seconds:.1f}x faster than the full statement")
        if args.order:
            table = mixed_reviews(args.order_rows)
            for surface in args.order_surfaces.split(","):
                if surface == "duckdb":
                    # the engine's first statements pay its warm-up: not the first contender's time
                    two_filters(engine, table.head(64), WARM_A, WARM_B, order=True, name="warm-up")
                    written, rows_w = two_filters(engine, table, COMMON, RARE, order=False, name="written (selective 2nd)")
                    planned, rows_p = two_filters(engine, table, COMMON, RARE, order=True, name="planned")
                    best, rows_b = two_filters(engine, table, RARE, COMMON, order=False, name="written best (selective 1st)")
                    same_w, rows_sw = two_filters(engine, table, SAME_A, SAME_B, order=False, name="equal shares, written")
                    same_p, rows_sp = two_filters(engine, table, SAME_A, SAME_B, order=True, name="equal shares, planned")
                    order = [written, planned, best, same_w, same_p]
                else:
                    order, got = postgres_order(engine, table, args.repeat)
                    written, planned, best, same_w, same_p = order
                    rows_w, rows_p, rows_b, rows_sw, rows_sp = got.values()
                key = "order" if surface == "duckdb" else f"order_{surface}"
                results[key] = [asdict(m) for m in order]
                results[f"{key}_same_rows"] = rows_w == rows_p == rows_b and rows_sw == rows_sp
                print(f"\nTwo llm filters over {args.order_rows:,} reviews ({surface})")
                for m in order:
                    print(f"  {m.name:30} {m.seconds:7.1f} s  {m.llm_rows:6,} LLM rows  {m.rows} rows")
                    for note in m.notes:
                        print(f"      {note}")
                print(f"  planned vs written: {written.seconds / planned.seconds:.2f}x faster "
                      f"({written.llm_rows / planned.llm_rows:.2f}x fewer LLM rows); "
                      f"planned vs best: {planned.seconds / best.seconds:.2f}x the time")
                print(f"  equal shares: planned takes {same_p.seconds / same_w.seconds:.2f}x the written order's time "
                      f"({same_p.llm_rows / same_w.llm_rows:.2f}x its LLM rows)")
                differ = len(set(rows_w) ^ set(rows_p)) + len(set(rows_w) ^ set(rows_b)) + len(set(rows_sw) ^ set(rows_sp))
                print(f"  same rows in every order: {results[f'{key}_same_rows']} ({differ} rows differ across the "
                      f"three pairs)")
    finally:
        engine.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
