"""When are a label call's answers guesses? The guess check of the methods that decide each row
from its own scores (every ``llm_classify`` of three labels or more; relserve/labels/
guesses.py) against the answers' accuracy, on classify tasks built from ../shared/datasets.

For each task, default settings, one cold statement: the share of the answers' entropy the rows
explain (the check: below 0.1 the answers are guesses), the same share over the model's own
uncorrected answers (above 0.6 no label mean is subtracted: relserve/labels/means.py),
accuracy against the majority label's share and a uniform guess, and whether it warned. The
tuning tasks chose the thresholds; the check tasks were run once after (docs/quality.md, "When
the answers are guesses").

    .venv/bin/python bench/bench_label_guesses.py [--rows 60] [--group tuning|check|all]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

FAMILIES = ["lager", "pale ale", "stout", "wheat beer"]
DEPARTMENTS = ["arts and crafts", "office", "health and household", "automotive"]
STARS = ["1", "2", "3", "4", "5"]


def tasks(rows: int) -> list[tuple]:
    """(name, group, template, labels, table with a ``truth`` column)."""
    import bench_quality as bq
    import polars as pl

    from relserve.workloads import load_table

    def rows_of(df, n, classes, skew=None):
        bq.SKEW = skew
        try:
            return bq.balanced(df, "truth", n, classes)[0]
        finally:
            bq.SKEW = None

    beer = load_table("beer_reviews").filter(pl.col("review_text").str.len_chars() > 0)
    beer = beer.with_columns(pl.col("style").map_elements(bq.beer_family, return_dtype=pl.Utf8).alias("truth"))
    beer = beer.filter(pl.col("truth").is_not_null())
    am = load_table("amazon_reviews").filter(pl.col("text").str.len_chars() > 0)
    dep = am.with_columns(pl.col("category").map_elements(bq.department, return_dtype=pl.Utf8).alias("truth"))
    dep = dep.filter(pl.col("truth").is_not_null())
    stars = am.with_columns(pl.col("rating").cast(pl.Int64).cast(pl.Utf8).alias("truth"))
    kind = "Which kind of beer is this review about? Review: {review_text}"
    named = "Which kind of beer is this? Beer: {beer_name}"
    sells = "Which department of a store sells this product? Product: {name}"
    return [
        ("beer_family", "tuning", kind, FAMILIES, rows_of(beer, rows, FAMILIES)),
        ("beer_family_skew", "tuning", kind, FAMILIES, rows_of(beer, rows, FAMILIES, 0.7)),
        ("beer_family_12", "tuning", kind, FAMILIES, rows_of(beer, 12, FAMILIES)),
        ("beer_from_name", "tuning", named, FAMILIES, rows_of(beer, rows, FAMILIES)),
        ("beer_from_name_skew", "tuning", named, FAMILIES, rows_of(beer, rows, FAMILIES, 0.7)),
        ("beer_from_name_10", "tuning", named, FAMILIES, rows_of(beer, 10, FAMILIES)),
        ("beer_from_region", "tuning", "Which kind of beer is brewed here? Region: {region}", FAMILIES,
         rows_of(beer, rows, FAMILIES)),
        ("beer_from_brewery_5", "tuning", "Which kind of beer does this brewery make? {brewery}", FAMILIES,
         rows_of(beer, 5, FAMILIES)),
        ("stars_from_name", "tuning", "How many stars did customers give this product? Product: {name}", STARS,
         rows_of(stars, rows, STARS)),
        ("am_department", "check", sells, DEPARTMENTS, rows_of(dep, rows, DEPARTMENTS)),
        ("am_department_skew", "check", sells, DEPARTMENTS, rows_of(dep, rows, DEPARTMENTS, 0.7)),
        ("am_department_6", "check", sells, DEPARTMENTS, rows_of(dep, 6, DEPARTMENTS)),
        ("am_department_title", "check",
         "Which department of a store sells this product? Review title: {title}. Product: {name}", DEPARTMENTS,
         rows_of(dep, rows, DEPARTMENTS)),
        ("stars_from_text", "check", "How many stars did this reviewer give? Review: {text}", STARS,
         rows_of(stars, rows, STARS)),
        ("department_from_rating", "check",
         "Which department of a store sells the product of this rating? Rating: {rating}", DEPARTMENTS,
         rows_of(dep, rows, DEPARTMENTS)),
        ("department_from_date", "check", "Which department of a store sold this? Sold at: {timestamp}", DEPARTMENTS,
         rows_of(dep, 12, DEPARTMENTS)),
    ]


class OwnScores:
    """Records the model's own (uncorrected) label scores of every row the label methods decide."""

    def __init__(self) -> None:
        from relserve.labels.batch import BatchRun
        from relserve.labels.prior import PriorRun

        self.scores: list[dict[str, float]] = []
        for cls in (BatchRun, PriorRun):
            self._wrap(cls)

    def _wrap(self, cls) -> None:
        decide, seen = cls.decide, self.scores

        def recorded(run, rows):
            seen.extend(dict(r.label_logprobs) for r in rows)
            return decide(run, rows)

        cls.decide = recorded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=60, help="rows per task (the tasks named _N have N)")
    ap.add_argument("--group", choices=["tuning", "check", "all"], default="all")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from relserve.functions import make_call
    from relserve.labels.information import explained_share
    from relserve.labels.memory import forget_all
    from relserve.planner.plan_and_run import run_call

    own = OwnScores()
    results = []
    print(f"{'task':22s} {'group':6s} {'method':9s} {'rows':>4s} {'explained':>9s} {'own':>6s} {'right':>6s} "
          f"{'majority':>8s} {'uniform':>7s} warned")
    for name, group, template, labels, table in tasks(args.rows):
        if args.group != "all" and group != args.group:
            continue
        forget_all()
        own.scores.clear()
        call = make_call("llm_classify", template, labels=labels)
        columns = [[str(v) for v in table[c].to_list()] for c in call.template.columns]
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = run_call(call, columns, progress=False, cache=False)
        truth = table["truth"].to_list()
        spread = outcome.labels
        res = dict(
            task=name, group=group, rows=len(truth), method=getattr(spread, "method", None),
            scored=getattr(spread, "rows", 0), explained=getattr(spread, "explained", math.nan),
            own_explained=explained_share(own.scores) if own.scores else math.nan,
            accuracy=sum(str(v) == t for v, t in zip(outcome.values, truth)) / len(truth),
            majority=max(Counter(truth).values()) / len(truth), uniform=1 / len(labels),
            warned=outcome.warning is not None,
        )
        results.append(res)
        print(f"{name:22s} {group:6s} {res['method'] or '-':9s} {res['rows']:4d} {res['explained']:9.3f} "
              f"{res['own_explained']:6.3f} {res['accuracy']:6.2f} {res['majority']:8.2f} {res['uniform']:7.2f} "
              f"{res['warned']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
