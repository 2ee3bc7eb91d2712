"""Planner benchmark: GGR ordering, prefix-cache hits and end-to-end time, cached DuckDB queries.

One run, side by side, on rotten_tomatoes, amazon_reviews and beer_ratings (../shared/datasets):

1. solver  -- planner time for 10,000 rows (GGR with functional dependencies and early stop,
              field reordering on), and the prefix hit rate the predictor expects for all
              10,000 rows in original vs planned order (engine tokens, engine KV capacity);
2. engine  -- the same llm_map over the first --rows rows, unplanned (every row as written, in
              table order: vLLM's prefix caching alone) vs planned (dedup, GGR rows+fields,
              pinned prefix; with --rows-only also without field reordering), with the
              engine's prefix cache reset before each; hit rate as the engine counts it
              (cached / prompt tokens of the relQuery) and wall time;
3. cached  -- a 100,000-row llm_map in DuckDB whose answers are all in the result cache:
              relserve.duckdb.sql in this process (memory + SQLite) and in a fresh process
              (SQLite only); the engine must not be called.

    python bench/bench_planner.py                 # all three (starts the engine; about 5 minutes:
                                                  # docs/benchmarks.md)
    python bench/bench_planner.py --no-engine     # 1 and 3 only (tokens from the model's tokenizer)

Results print as tables and go to bench/out/planner.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT.parent / "shared" / "datasets"

#: The llm_map of each table: its fields in the table's own column order (GGR's "original").
QUERIES = {
    "rotten_tomatoes": (
        "Did the critic like the movie? Answer in one word.\n"
        "Review: {review_content}\nTop critic: {top_critic}\nCritic: {critic}\nPublisher: {publisher}\n"
        "Movie: {movie_info}\nRating: {movie_rating}\nGenres: {genres}\nDirector: {director}"
    ),
    "amazon_reviews": (
        "Is this product review helpful to other shoppers? Answer in one word.\n"
        "Product: {name}\nCategory: {category}\nReview title: {title}\nReview: {text}\nRating: {rating}"
    ),
    "beer_ratings": (
        "Would this reviewer recommend the beer? Answer in one word.\n"
        "Reviewer: {review/profileName}\nOverall: {review/overall}\nTaste: {review/taste}\n"
        "Palate: {review/palate}\nAppearance: {review/appearance}\nBeer: {beer/name}\nStyle: {beer/style}"
    ),
}


def load(name: str, rows: int):
    import polars as pl

    df = pl.read_parquet(DATASETS / f"{name}.parquet").head(rows)
    return df.with_columns(pl.all().fill_null(""))


def columns_for(template: str, df) -> list[list]:
    from relserve.template import Template

    return [df[c].to_list() for c in Template.parse(template).columns]


# -- 1. solver -----------------------------------------------------------------------------------


def bench_solver(engine, solver_rows: int) -> list[dict]:
    from relserve.functions import make_call
    from relserve.planner import explain_plan, ggr, plan_call, token_source
    from relserve.prompt_rendering import field_lengths
    from relserve.template import format_value

    out = []
    for name, template in QUERIES.items():
        df = load(name, solver_rows)
        call = make_call("llm_map", template, reorder_fields=True, max_tokens=4)
        cols = columns_for(template, df)
        table = list(zip(*cols))
        text_cols = [[format_value(v) for v in c] for c in cols]
        t0 = time.perf_counter()
        ggr(text_cols, field_lengths(call, table))
        ggr_s = time.perf_counter() - t0
        plan = plan_call(call, cols, model_id="bench")
        rows_only = plan_call(make_call("llm_map", template, max_tokens=4), cols, model_id="bench")
        ex = explain_plan(plan, token_source(engine), engine=engine)
        out.append(
            {
                "table": name,
                "rows": len(df),
                "ggr_s": ggr_s,
                "ggr_s_per_10k": ggr_s * 10_000 / len(df),
                "planner_s": plan.planner_s,
                "planner_rows_only_s": rows_only.planner_s,
                "predicted_hit_original": ex.hit_rate_original,
                "predicted_hit_planned": ex.hit_rate_planned,
                "prompt_tokens_original": ex.prompt_tokens_original,
                "prompt_tokens_planned": ex.prompt_tokens_planned,
                "kv_capacity_blocks": ex.cache_capacity_blocks,
                "token_source": ex.token_source,
            }
        )
        print(
            f"  {name:16} {len(df):>6} rows  GGR {ggr_s:6.3f} s  planner {plan.planner_s:6.3f} s "
            f"(rows only {rows_only.planner_s:5.3f} s)  predicted hit {ex.hit_rate_original:6.1%} -> {ex.hit_rate_planned:6.1%}",
            flush=True,
        )
    return out


# -- 2. engine -----------------------------------------------------------------------------------


def bench_engine(engine, rows: int, max_tokens: int, rows_only: bool) -> list[dict]:
    from relserve import RelQuery
    from relserve.functions import make_call
    from relserve.planner import run_call
    from relserve.prompt_rendering import render

    out = []
    for name, template in QUERIES.items():
        df = load(name, rows)
        cols = columns_for(template, df)
        call = make_call("llm_map", template, reorder_fields=True, max_tokens=max_tokens)
        plain = make_call("llm_map", template, max_tokens=max_tokens)
        prompts = [render(plain, values) for values in zip(*cols)]

        engine.reset_prefix_cache()
        t0 = time.perf_counter()
        base = engine.run(RelQuery.from_prompts(prompts, max_tokens=max_tokens, temperature=0.0))
        base_s = time.perf_counter() - t0

        engine.reset_prefix_cache()
        t0 = time.perf_counter()
        planned = run_call(call, cols, engine=engine, cache=None, progress=False)
        planned_s = time.perf_counter() - t0
        stats = planned.engine_stats
        extra = {}
        if rows_only:
            # planning without field reordering: dedup, sorted rows, pinned prefix
            engine.reset_prefix_cache()
            t0 = time.perf_counter()
            sorted_run = run_call(plain, cols, engine=engine, cache=None, progress=False)
            extra = {
                "hit_rows_only": sorted_run.engine_stats.prefix_hit_rate,
                "seconds_rows_only": time.perf_counter() - t0,
            }
        row = {
            "table": name,
            "rows": len(prompts),
            "distinct_prompts": planned.plan.distinct_prompts,
            "hit_original": base.stats.prefix_hit_rate,
            "hit_planned": stats.prefix_hit_rate,
            "prompt_tokens_original": base.stats.prompt_tokens,
            "prompt_tokens_planned": stats.prompt_tokens,
            "seconds_original": base_s,
            "seconds_planned": planned_s,
            "speedup": base_s / planned_s,
            "planner_s": planned.plan.planner_s,
            "errors_original": base.stats.num_errors,
            "errors_planned": sum(e is not None for e in planned.errors),
            **extra,
        }
        out.append(row)
        print(
            f"  {name:16} {row['rows']:>5} rows  hit {row['hit_original']:6.1%} -> {row['hit_planned']:6.1%}  "
            f"time {base_s:6.1f} s -> {planned_s:6.1f} s  ({row['speedup']:.2f}x)"
            + (f"  rows only: hit {extra['hit_rows_only']:6.1%}, {extra['seconds_rows_only']:6.1f} s" if extra else ""),
            flush=True,
        )
    return out


# -- 3. fully cached DuckDB query -------------------------------------------------------------------

_CACHED_QUERY = "SELECT id, llm_map('Summarize this beer review in one word: {review}', review) AS answer FROM reviews"


def _cached_table_sql(n: int) -> str:
    # 100,000 distinct reviews built from beer_ratings rows (28,479) and a row number
    return (
        f"CREATE TABLE reviews AS SELECT row_number() OVER () AS id, "
        f"\"beer/name\" || ', ' || \"beer/style\" || ', overall ' || \"review/overall\" || ' #' || (row_number() OVER ()) AS review "
        f"FROM read_parquet('{DATASETS / 'beer_ratings.parquet'}'), range({(n + 28_478) // 28_479}) LIMIT {n}"
    )


def _engine_started() -> bool:
    from relserve.backend import running_default_engine

    return running_default_engine() is not None


def _timed_cached_query(n: int, cache_path: str) -> dict:
    """Run in a fresh process: nothing in memory, answers come from SQLite."""
    import duckdb

    import relserve.duckdb
    from relserve.planner import ResultCache

    con = duckdb.connect()
    # as a user installs it: no engine given, so one would start on the first row to run
    relserve.duckdb.install(con, cache=ResultCache(cache_path))
    con.execute(_cached_table_sql(n))
    t0 = time.perf_counter()
    table = relserve.duckdb.sql(con, _CACHED_QUERY).to_arrow_table()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rows": table.num_rows, "nulls": table.column("answer").null_count, "engine_started": _engine_started()}


def bench_cached(model_id: str, n: int, cache_path: Path) -> dict:
    import duckdb

    import relserve.duckdb
    from relserve.functions import make_call
    from relserve.planner import ResultCache
    from relserve.prompt_rendering import Renderer

    con = duckdb.connect()
    con.execute(_cached_table_sql(n))
    reviews = [r[0] for r in con.execute("SELECT review FROM reviews").fetchall()]
    call = make_call("llm_map", "Summarize this beer review in one word: {review}")
    render = Renderer(call)
    # the answers' origin does not matter to the cached path: store one per prompt
    t0 = time.perf_counter()
    cache = ResultCache(cache_path)
    cache.put_many(model_id, call.sampling_settings(), [(render((r,)), "answer") for r in reviews])
    fill_s = time.perf_counter() - t0

    # no engine given: the process's default engine would start for the first row that has to run
    relserve.duckdb.install(con, cache=cache)
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        table = relserve.duckdb.sql(con, _CACHED_QUERY).to_arrow_table()
        runs.append(time.perf_counter() - t0)
    assert table.num_rows == n and table.column("answer").null_count == 0 and not _engine_started()

    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_planner as b; "
        f"print(json.dumps(b._timed_cached_query({n:d}, {str(cache_path)!r})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ.copy())
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    result = {
        "rows": n,
        "fill_cache_s": fill_s,
        "same_process_s": runs,
        "fresh_process_s": fresh["seconds"],
        "fresh_process_engine_started": fresh["engine_started"],
        "fresh_process_nulls": fresh["nulls"],
    }
    print(
        f"  {n:,} rows: same process {min(runs):.3f} s (runs {', '.join(f'{r:.3f}' for r in runs)}), "
        f"fresh process {fresh['seconds']:.3f} s, engine started: {fresh['engine_started']}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=300, help="rows per table sent to the engine (default 300)")
    parser.add_argument("--solver-rows", type=int, default=10_000)
    parser.add_argument("--cached-rows", type=int, default=100_000)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--kv-cache-gb", type=float, default=0.25, help="engine KV cache (default 0.25 GB)")
    parser.add_argument("--no-engine", action="store_true", help="skip the engine runs")
    parser.add_argument("--rows-only", action="store_true", help="also run the plan without field reordering")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "planner.json")
    args = parser.parse_args()

    # a private result cache file: earlier runs must not answer this one
    cache_path = Path(tempfile.mkdtemp(prefix="relserve-bench-")) / "results.sqlite"

    engine = None
    settings = {}
    if not args.no_engine:
        from relserve import Engine

        t0 = time.perf_counter()
        engine = Engine(kv_cache_gb=args.kv_cache_gb)
        settings = {
            "model": engine.model_id,
            "policy": engine.policy,
            "block_size": engine.block_size,
            "kv_capacity_tokens": engine.kv_capacity_tokens,
            "kv_cache_gb": args.kv_cache_gb,
            "max_num_seqs": engine.settings.max_num_seqs,
            "max_num_batched_tokens": engine.settings.max_num_batched_tokens,
            "start_s": time.perf_counter() - t0,
        }
        print(f"engine: {settings}", flush=True)

    report: dict = {"engine": settings, "args": {k: str(v) for k, v in vars(args).items()}}
    print(f"\n1. solver ({args.solver_rows:,} rows per table)", flush=True)
    report["solver"] = bench_solver(engine, args.solver_rows)
    if engine is not None:
        print(f"\n2. engine: llm_map over the first {args.rows} rows, unplanned vs planned", flush=True)
        report["engine_runs"] = bench_engine(engine, args.rows, args.max_tokens, args.rows_only)
    model_id = engine.model_id if engine is not None else "SmolLM2-135M-Instruct"
    print("\n3. fully cached llm_map in DuckDB", flush=True)
    report["cached"] = bench_cached(model_id, args.cached_rows, cache_path)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwritten {args.out}")
    if engine is not None:
        engine.close()


if __name__ == "__main__":
    main()
