"""A question about what kind of thing a row is, on the real default engine: "Is this a review of
a beer?" (and "Is this review about a beer?") over 600 reviews, 90% of films and 10% of beers
(``bench_limit.mixed_reviews``), two seeds, each statement with no label plan and no cache.
Prints the rows kept, the true rows, F1 and the plan's layout (docs/quality.md, "Concepts").

    .venv/bin/python bench/experiments/kind_question.py
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUESTIONS = ("Is this a review of a beer? Review: {review}", "Is this review about a beer? Review: {review}")


def main() -> None:
    from relserve import Engine, paths

    # a home of its own (the usual one's models and calibrations): no plan from another run
    usual = paths.home()
    own = Path(tempfile.mkdtemp(prefix="relserve-kind-question-"))
    for shared in ("models", "calibrations"):
        (own / shared).symlink_to(usual / shared)
    os.environ["RELSERVE_HOME"] = str(own)

    from bench_limit import mixed_reviews

    import relserve.duckdb
    from relserve.labels.memory import forget_all
    from relserve.workloads import load_table

    beers = set(load_table("beer_reviews")["review_text"].to_list())
    engine = Engine()
    try:
        for seed in (5, 6):
            table = mixed_reviews(600, seed=seed)
            truth = [r in beers for r in table["review"].to_list()]
            for q in QUESTIONS:
                forget_all()
                con = relserve.duckdb.connect(engine=engine, cache=False, progress=False)
                con.register("frame", table.to_arrow())
                con.execute("CREATE TABLE reviews AS SELECT * FROM frame")
                t0 = time.perf_counter()
                got = [bool(v) for (v,) in con.sql(f"SELECT llm_filter('{q}', review) FROM reviews ORDER BY id").fetchall()]
                seconds = time.perf_counter() - t0
                tp, kept, true = sum(a and b for a, b in zip(got, truth)), sum(got), sum(truth)
                f1 = 2 * tp / (kept + true) if kept + true else 0.0
                plan = str(relserve.duckdb.explain(con, f"SELECT llm_filter('{q}', review) FROM reviews"))
                layout = next((m.group(1) for m in map(re.compile(r"layout '([^']*)'").search, plan.splitlines()) if m), "-")
                print(f"seed {seed}  {q.split('?')[0]!r:34} kept {kept:3}  true {true}  both {tp:3}  F1 {f1:.2f}  "
                      f"{seconds:5.1f} s  layout {layout}", flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
