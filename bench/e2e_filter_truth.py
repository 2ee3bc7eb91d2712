"""How right were the main e2e workload's ``llm_filter`` answers? Each contender's kept rows
against the labels the tables carry: ``complaints`` ("Is this product review negative?") against
amazon_reviews' rating (1-2 stars: yes), ``filter_reviews`` ("Does this critic recommend the
movie?") against rotten_tomatoes' review_type (fresh: yes).

    .venv/bin/python bench/e2e_filter_truth.py RAW_DIR   # the "raw runs in ..." folder bench_e2e.py printed

The statements and their row ranges are rebuilt from the workload's seed, as bench_e2e.py draws
them (default sizing: 8 sessions, 0.1 statements/s, 240 s windows, seed 16).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e.workload import DATASETS, at_load, build_workload, load_statements, table_rows  # noqa: E402

TRUTH_SQL = {
    "complaints": "SELECT row_number() OVER () AS id, rating <= 2 AS yes FROM (SELECT * FROM read_parquet('{ds}/amazon_reviews.parquet') "
                  "WHERE text IS NOT NULL AND name IS NOT NULL LIMIT 3000)",
    "filter_reviews": "SELECT row_number() OVER () AS id, review_type = 'fresh' AS yes FROM (SELECT * FROM read_parquet('{ds}/rotten_tomatoes.parquet') "
                      "WHERE review_content IS NOT NULL AND movie_info IS NOT NULL LIMIT 3000)",
}


def main() -> None:
    import duckdb

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, help="the raw runs folder of a bench_e2e.py run of the main workload")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--rate", type=float, default=0.1)
    ap.add_argument("--window", type=float, default=240.0)
    ap.add_argument("--seed", type=int, default=16)
    a = ap.parse_args()
    statements = load_statements()
    con = duckdb.connect()
    truth = {name: dict(con.execute(sql.format(ds=DATASETS)).fetchall()) for name, sql in TRUTH_SQL.items()}
    print("| contender | load | statement | rows | truly yes | kept | kept and truly yes | accuracy |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(a.raw.glob("*.json")):
        loads = json.loads(path.read_text())["loads"]
        top = max(float(x) for x in loads)
        items = build_workload(statements, sessions=a.sessions, rate=a.rate, horizon=a.window * top, seed=a.seed)
        for load, result in sorted(loads.items()):
            scheduled = {s.key: s for s in at_load(items, statements, float(load), a.window, a.seed, table_rows())}
            for name, yes_of in truth.items():
                n = yes = kept = right = correct = 0
                for key, answer in result["answers"].items():
                    s = scheduled[key]
                    if s.item.name != name:
                        continue
                    ids = range(s.offset + 1, s.offset + s.item.rows + 1)
                    kept_ids = {row[0] for row in answer["rows"]}
                    n += len(ids)
                    yes += sum(bool(yes_of[i]) for i in ids)
                    kept += len(kept_ids)
                    right += sum(bool(yes_of[i]) for i in kept_ids)
                    correct += sum((i in kept_ids) == bool(yes_of[i]) for i in ids)
                if n:
                    print(f"| {path.stem} | {load} | {name} | {n} | {yes} | {kept} | {right} | {correct / n:.1%} |")


if __name__ == "__main__":
    main()
