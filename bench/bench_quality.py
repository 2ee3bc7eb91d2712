"""Answer-quality benchmark: are llm_filter / llm_classify / llm_extract answers right?

Labelled tasks over the tables in ../shared/datasets plus the project's demo table, each run
through DuckDB as a user writes them (``relserve.duckdb.sql``), per model and per label method
(``generate``: constrained decoding; ``score``: whole-label log-probabilities; ``calibrate``:
scores with the model's content-free prior divided out, the default), side by side in one run:

  demo       llm_filter    datasets/demo_reviews.csv, column ``happy`` (24 rows, 12 yes)
  rt_filter  llm_filter    rotten_tomatoes: "is this review positive?" vs review_type (balanced)
  rt_classify llm_classify rotten_tomatoes: ['fresh', 'rotten'] vs review_type (balanced)
  amazon_stars llm_classify amazon_reviews: ['1'..'5'] vs rating (balanced over ratings)
  beer_extract llm_extract beer_ratings: {"overall": int} out of 20 from the aspect scores vs
             review/overall, right when within 2 points (extract has no label method: run once)

Per (model, task, method): accuracy, macro-F1, the answers' label distribution, rows/s (wall
time of the statement including the calibration probes, cold prefix cache, empty result cache).

    python bench/bench_quality.py                          # smollm2, 200 rows per task
    python bench/bench_quality.py --rows 100 --models smollm2,/path/to/model

Results print as a table and go to bench/out/quality.json. No labelled SMS or news table is
reachable here (see README, "Answer quality"), so the issue's spam and four-topic tasks are not run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "datasets" / "demo_reviews.csv"
METHODS = ("generate", "score", "calibrate", "generate+examples", "calibrate+examples")
#: labelled rows per class shown as few-shot examples in the "+examples" runs (never evaluated)
SHOTS_PER_CLASS = 1
SEED = 12


def balanced(df, column: str, rows: int, classes: list):
    """``rows`` rows, as many of each class as possible (seeded, then shuffled), and apart from
    them ``SHOTS_PER_CLASS`` rows of each class for the few-shot examples."""
    import polars as pl

    per = rows // len(classes)
    picked = [df.filter(pl.col(column) == c).sample(per + SHOTS_PER_CLASS, seed=SEED, shuffle=True) for c in classes]
    rows_ = pl.concat([p.head(per) for p in picked]).sample(fraction=1.0, seed=SEED, shuffle=True)
    shots = pl.concat([p.tail(SHOTS_PER_CLASS) for p in picked])
    return rows_, shots


def tasks(rows: int) -> list[dict]:
    import polars as pl

    from relserve.workloads import load_table

    demo = pl.read_csv(DEMO)
    rt = load_table("rotten_tomatoes").filter(pl.col("review_content").is_not_null())
    rt, rt_shots = balanced(rt, "review_type", rows, ["fresh", "rotten"])
    rt = rt.select(pl.col("review_content").alias("review"), pl.col("review_type").alias("truth"))
    rt_shots = rt_shots.select(pl.col("review_content").alias("review"), pl.col("review_type").alias("truth"))
    am = load_table("amazon_reviews").filter(pl.col("text").str.len_chars() > 0)
    am = am.with_columns(pl.col("rating").cast(pl.Int64).cast(pl.Utf8).alias("truth"))
    am, am_shots = balanced(am, "truth", rows, ["1", "2", "3", "4", "5"])
    am, am_shots = am.select("title", "text", "truth"), am_shots.select("title", "text", "truth")
    shots = lambda df, answer: [{**{k: v for k, v in r.items() if k != "truth"}, "answer": answer(r["truth"])} for r in df.to_dicts()]  # noqa: E731
    # the demo table's examples: written for this benchmark, not rows of the table
    demo_shots = [
        dict(product="toaster", review="Toasts evenly and looks great on the counter.", answer=True),
        dict(product="toaster", review="Burnt every slice and the lever broke.", answer=False),
    ]
    beer = load_table("beer_ratings")
    beer = beer.sample(rows, seed=SEED).select(
        pl.col("review/taste").alias("taste"),
        pl.col("review/palate").alias("palate"),
        pl.col("review/appearance").alias("appearance"),
        pl.col("review/overall").str.split("/").list.first().alias("truth"),
    )
    return [
        dict(
            name="demo", table=demo.rename({"happy": "truth"}), labels=["yes", "no"],
            sql="SELECT truth, llm_filter('Is this customer happy with their {product}? Review: {review}', "
            "product, review, llm_options($opts)) AS answer FROM t",
            answer=lambda v: "yes" if v else "no" if v is not None else None,
            examples=demo_shots,
        ),
        dict(
            name="rt_filter", table=rt, labels=["fresh", "rotten"],
            sql="SELECT truth, llm_filter('Is this movie review positive? Review: {review}', review, "
            "llm_options($opts)) AS answer FROM t",
            answer=lambda v: "fresh" if v else "rotten" if v is not None else None,
            examples=shots(rt_shots, lambda t: t == "fresh"),
        ),
        dict(
            name="rt_classify", table=rt, labels=["fresh", "rotten"],
            sql="SELECT truth, llm_classify('Is this movie review fresh (positive) or rotten (negative)? "
            "Review: {review}', ['fresh', 'rotten'], review, llm_options($opts)) AS answer FROM t",
            answer=lambda v: v,
            examples=shots(rt_shots, str),
        ),
        dict(
            name="amazon_stars", table=am, labels=["1", "2", "3", "4", "5"],
            sql="SELECT truth, llm_classify('How many stars (1 to 5) did this reviewer give the product? "
            "Title: {title}. Review: {text}', ['1', '2', '3', '4', '5'], title, text, "
            "llm_options($opts)) AS answer FROM t",
            answer=lambda v: v,
            examples=shots(am_shots, str),
        ),
        dict(
            name="beer_extract", table=beer, labels=None, methods=("-",),
            sql="SELECT truth, llm_extract('A beer got these scores: taste {taste}, palate {palate}, appearance "
            "{appearance}. What overall score out of 20 did the reviewer most likely give?', "
            "'{\"type\": \"object\", \"properties\": {\"overall\": {\"type\": \"integer\", \"minimum\": 0, "
            "\"maximum\": 20}}, \"required\": [\"overall\"]}', taste, palate, appearance) AS answer FROM t",
            answer=lambda v: str(json.loads(v)["overall"]) if v is not None else None,
            # an overall score within 2 points of the reviewer's counts as right
            right=lambda a, t: a is not None and abs(int(a) - int(t)) <= 2,
        ),
    ]


def sql_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{k}': {sql_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


def options_sql(method: str, examples: list[dict] | None) -> str:
    """The ``llm_options(...)`` arguments of a method such as "calibrate+examples"."""
    base, _, extra = method.partition("+")
    opts = [f"method := '{base}'"]
    if extra == "examples":
        opts.append(f"examples := {sql_literal(examples)}")
    return ", ".join(opts)


def macro_f1(pairs: list[tuple[str | None, str]], labels: list[str]) -> float:
    f1s = []
    for c in labels:
        tp = sum(a == c and t == c for a, t in pairs)
        fp = sum(a == c and t != c for a, t in pairs)
        fn = sum(a != c and t == c for a, t in pairs)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1s) / len(f1s)


def run_one(engine, task: dict, method: str) -> dict:
    import duckdb

    import relserve.duckdb
    from relserve.planner.cache import ResultCache

    con = duckdb.connect()
    with tempfile.TemporaryDirectory() as tmp:
        # an empty result cache: every row runs on the engine
        relserve.duckdb.install(con, engine=engine, cache=ResultCache(Path(tmp) / "r.sqlite"), progress=False)
        con.register("t_arrow", task["table"].to_arrow())
        con.execute("CREATE TABLE t AS SELECT * FROM t_arrow")
        sql = task["sql"].replace("$opts", options_sql(method, task.get("examples")))
        engine.reset_prefix_cache()
        t0 = time.monotonic()
        out = relserve.duckdb.sql(con, sql).fetchall()
        seconds = time.monotonic() - t0
    pairs = [(task["answer"](v), str(t)) for t, v in out]
    right = task.get("right", lambda a, t: a == t)
    n = len(pairs)
    dist = Counter(a if a is not None else "NULL" for a, _ in pairs)
    res = dict(
        task=task["name"], method=method, rows=n,
        accuracy=sum(right(a, t) for a, t in pairs) / n,
        answers=dict(dist.most_common()),
        top_share=dist.most_common(1)[0][1] / n,
        rows_per_s=n / seconds, seconds=seconds,
    )
    if task["labels"]:
        res["macro_f1"] = macro_f1(pairs, task["labels"])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200, help="rows per task (the demo table always has 24)")
    ap.add_argument("--models", default="smollm2", help="comma-separated model names or folders")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: all)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "quality.json"))
    a = ap.parse_args()

    from relserve import Engine

    all_tasks = tasks(a.rows)
    if a.tasks:
        all_tasks = [t for t in all_tasks if t["name"] in a.tasks.split(",")]
    results = []
    for model in a.models.split(","):
        t0 = time.monotonic()
        with Engine(model=model, max_num_seqs=64, kv_cache_gb=2.0) as engine:
            start = time.monotonic() - t0
            # one throw-away statement: the first scoring batch pays vLLM's warm-up, not a method
            run_one(engine, {**all_tasks[0], "table": all_tasks[0]["table"].head(4)}, "score")
            for task in all_tasks:
                for method in task.get("methods", a.methods.split(",")):
                    r = dict(model=model, engine_start_s=start, **run_one(engine, task, method))
                    results.append(r)
                    print(
                        f"{model:10s} {r['task']:13s} {r['method']:9s} acc {r['accuracy']:6.1%} "
                        f"F1 {r.get('macro_f1', float('nan')):5.3f} top {r['top_share']:5.1%} "
                        f"{r['rows_per_s']:6.1f} rows/s  {r['answers']}",
                        flush=True,
                    )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(argv=sys.argv[1:], rows=a.rows, results=results), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
