"""Engines that share the cores: one LLM-only pass in each of N processes at once, under an
OpenMP wait policy (the test suite runs the session's engine beside the other worker's own).

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/experiments/concurrent_engines.py --processes 2
    .venv/bin/python bench/experiments/concurrent_engines.py --processes 2      # libgomp's default: spin

Each process starts the test suite's engine (float32, 16 sequences, 1,024 batched tokens, 2.5 GB
of KV cache) and runs ``llm_filter`` through DuckDB over the 320 Amazon reviews of
tests/test_cascade_engine.py's recall test, then the same statement with a recall cascade, and
prints each one's seconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def one_process() -> None:
    os.environ["RELSERVE_HOME"] = tempfile.mkdtemp()
    import duckdb

    import relserve.duckdb

    # the recall test's own table and question (needs the test extra: make install-test)
    sys.path.insert(0, str(REPO / "tests"))
    from test_cascade_engine import CAR, car_table

    from relserve import Engine, PolicySettings
    from relserve.cascade import policy
    from relserve.labels.memory import LabelMemory, forget_all, use_memory

    # the test's cascade sizes
    policy.MIN_ROWS = 300
    for name, value in (("MIN_TRAIN", 100), ("MAX_TRAIN", 100), ("MIN_AUDIT", 150), ("MAX_AUDIT", 150)):
        setattr(policy, name, value)
    use_memory(LabelMemory())
    engine = Engine(policy="relserve", max_num_seqs=16, max_num_batched_tokens=1024, kv_cache_gb=2.5,
                    policy_settings=PolicySettings(), dtype="float32")
    try:
        con = duckdb.connect()
        relserve.duckdb.install(con, engine=engine, cache=False, progress=False)
        con.execute("CREATE TABLE reviews AS SELECT unnest($1) AS review", [car_table(320, 32)])
        for name, options in (("LLM-only", ""), ("cascade", ", llm_options(cascade_recall := 0.9, seed := 1)")):
            forget_all()
            t0 = time.perf_counter()
            relserve.duckdb.sql(con, f"SELECT llm_filter('{CAR}', review{options}) FROM reviews").fetchall()
            print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        one_process()
        return
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset: spin)')}, {args.processes} process(es) at once")
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for _ in range(args.processes)]
    for k, p in enumerate(procs):
        out, _ = p.communicate()
        print(f"process {k}: " + "; ".join(out.split("\n")[:2]))
    print(f"all: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
