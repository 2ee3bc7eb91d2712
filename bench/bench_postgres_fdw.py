"""Backend memory and rows/s of a relserve_fdw scan over a large source, against the same rows
through llm_map_query (which holds the whole result in the backend), on a throwaway PostgreSQL 15
cluster and an in-process relserve server with the default engine.

Every source row renders the same prompt (``Say {t}``), so the engine answers one prompt per window
and the result cache the rest: the figures are the database side's cost (reading the source,
sending windows, keeping the answers), not the model's.

    .venv/bin/python bench/bench_postgres_fdw.py                      # 10k, 100k and 1M rows
    .venv/bin/python bench/bench_postgres_fdw.py --rows 10000 100000

Peak memory is the backend's VmHWM (/proc/<pid>/status) after the statement, in a fresh backend
per run; the machine must let this user read the postgres user's /proc entries (root does).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def measure(conninfo: str, sql: str) -> tuple[int, float, int]:
    """(rows returned, seconds, backend peak KiB) of one statement in a fresh backend."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as db:
        pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]
        db.execute("SELECT count(*) FROM llm_map_query('Say {t}', 'SELECT ''warm'' AS t')")  # loads relserve
        t0 = time.monotonic()
        (n,) = db.execute(sql).fetchone()
        seconds = time.monotonic() - t0
        return n, seconds, peak_kib(pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--query-form-max", type=int, default=10_000,
                    help="largest source also run through llm_map_query (one request: the server takes at most 10,000 rows)")
    args = ap.parse_args()

    import psycopg
    from pg_setup import cluster_and_server

    with cluster_and_server() as (conninfo, url):
        with psycopg.connect(conninfo, autocommit=True) as db:
            db.execute(f"CREATE SERVER relserve FOREIGN DATA WRAPPER relserve_fdw OPTIONS (url '{url}')")
            db.execute("CREATE USER MAPPING FOR postgres SERVER relserve")
        rows = []
        for n in args.rows:
            with psycopg.connect(conninfo, autocommit=True) as db:
                db.execute(f"CREATE FOREIGN TABLE IF NOT EXISTS said_{n} (n int, t text, answer text) SERVER relserve OPTIONS ("
                           f"source 'SELECT g AS n, ''same'' AS t FROM generate_series(1, {n}) g', "
                           "template 'Say {t}', kind 'map', max_tokens '1')")
            got, s, kib = measure(conninfo, f"SELECT count(answer) FROM said_{n}")
            rows.append(("foreign table", n, got, s, kib))
            print(f"foreign table  {n:>9,} rows: {got:>9,} answers in {s:7.1f} s ({got / s:8.0f} rows/s), backend peak {kib / 1024:7.1f} MiB", flush=True)
            if n <= args.query_form_max:
                got, s, kib = measure(conninfo, "SELECT count(answer) FROM llm_map_query('Say {t}', "
                                      f"'SELECT g AS n, ''same'' AS t FROM generate_series(1, {n}) g', '{{\"max_tokens\": 1}}')")
                rows.append(("llm_map_query", n, got, s, kib))
                print(f"llm_map_query  {n:>9,} rows: {got:>9,} answers in {s:7.1f} s ({got / s:8.0f} rows/s), backend peak {kib / 1024:7.1f} MiB", flush=True)
    print("\n| form | source rows | answers | seconds | rows/s | backend peak (MiB) |\n|---|---|---|---|---|---|")
    for form, n, got, s, kib in rows:
        print(f"| {form} | {n:,} | {got:,} | {s:.1f} | {got / s:.0f} | {kib / 1024:.1f} |")

if __name__ == "__main__":
    main()
