"""The query everyone writes first, `SELECT id, llm_map(...) FROM t`, in PostgreSQL: with the
extension's batching (one relQuery per call site and window), against the same call one request
per row (relserve.batch_calls = off) and against the `llm_map_query` form, side by side in one
run on a throwaway PostgreSQL 15 cluster and an in-process server with the default engine. Then
8 sessions at once, each over its own slice of the rows.

    .venv/bin/python bench/bench_postgres_batch.py                     # 300 and 3000 rows
    .venv/bin/python bench/bench_postgres_batch.py --rows 300 --per-row-max 300

Rows are SMS-like texts generated here (seeded, distinct), max_tokens 16, result cache off.
Targets (issue 24): batched within 1.2x of the *_query form; at least 10x faster than per row on 300 rows.
"""

from __future__ import annotations

import argparse
import random
import threading
import time

TEMPLATE = "Summarize this SMS in five words: {text}"
WORDS = ("meet", "tomorrow", "call", "me", "free", "prize", "winner", "lunch", "at", "noon", "late", "sorry",
         "bus", "home", "claim", "now", "txt", "stop", "love", "you", "ok", "see", "soon", "work")


def texts(n: int) -> list[str]:
    rnd = random.Random(7)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(6, 14))) + f" #{i}" for i in range(n)]


def timed(conninfo: str, setup: list[str], sql: str) -> tuple[float, int]:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as db:
        for s in setup:
            db.execute(s)
        db.execute("SELECT llm_map('Say {x}', 'warm')")  # loads relserve in this backend
        t0 = time.monotonic()
        rows = db.execute(sql).fetchall()
        return time.monotonic() - t0, len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[300, 3000])
    ap.add_argument("--per-row-max", type=int, default=300, help="largest table also run one request per row")
    ap.add_argument("--sessions", type=int, default=8)
    args = ap.parse_args()

    import psycopg
    from pg_setup import cluster_and_server

    common = ["SET relserve.max_tokens = 16", "SET relserve.cache = off", "SET relserve.timeout = 3600"]
    results = []
    with cluster_and_server() as (conninfo, _url):
        with psycopg.connect(conninfo, autocommit=True) as db:
            for n in args.rows:
                db.execute(f"CREATE TABLE sms_{n} (id int PRIMARY KEY, text text)")
                with db.cursor() as cur:
                    cur.executemany(f"INSERT INTO sms_{n} VALUES (%s, %s)", list(enumerate(texts(n))))
        for n in args.rows:
            scalar = f"SELECT id, llm_map('{TEMPLATE}', text) FROM sms_{n}"
            query = f"SELECT * FROM llm_map_query('{TEMPLATE}', 'SELECT id, text FROM sms_{n}')"
            forms = [("scalar, batched", common, scalar), ("llm_map_query", common, query)]
            if n <= args.per_row_max:
                forms.append(("scalar, one request per row", common + ["SET relserve.batch_calls = off"], scalar))
            for name, setup, sql in forms:
                s, got = timed(conninfo, setup, sql)
                results.append((n, name, s, got))
                print(f"{n:>5} rows  {name:<28} {s:8.1f} s  ({got} rows)", flush=True)
        # sessions at once, each over its slice of the first table
        n = args.rows[0]
        step = n // args.sessions
        for name, extra, form in (("scalar, batched", [], "scalar"), ("llm_map_query", [], "query")):
            times: list[float] = []

            # the loop's values bound now: the threads run within this iteration, but say so
            def run(k: int, form: str = form, extra: list = extra, times: list = times) -> None:
                lo, hi = k * step, (k + 1) * step
                sql = (f"SELECT id, llm_map('{TEMPLATE}', text) FROM sms_{n} WHERE id >= {lo} AND id < {hi}" if form == "scalar"
                       else f"SELECT * FROM llm_map_query('{TEMPLATE}', 'SELECT id, text FROM sms_{n} WHERE id >= {lo} AND id < {hi}')")
                times.append(timed(conninfo, common + extra, sql)[0])

            t0 = time.monotonic()
            threads = [threading.Thread(target=run, args=(k,)) for k in range(args.sessions)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - t0
            results.append((n, f"{args.sessions} sessions, {name}", wall, step * args.sessions))
            print(f"{args.sessions} sessions x {step} rows, {name:<18} wall {wall:6.1f} s, mean statement {sum(times) / len(times):6.1f} s", flush=True)
    print("\n| rows | form | seconds |\n|---|---|---|")
    for n, name, s, _ in results:
        print(f"| {n} | {name} | {s:.1f} |")
    by = {(n, name): s for n, name, s, _ in results}
    for n in args.rows:
        b, q, p = by.get((n, "scalar, batched")), by.get((n, "llm_map_query")), by.get((n, "scalar, one request per row"))
        line = f"{n} rows: batched / query form = {b / q:.2f}x (target <= 1.2x)"
        if p:
            line += f"; per row / batched = {p / b:.1f}x (target >= 10x)"
        print(line)


if __name__ == "__main__":
    main()
