"""A semantic join where each left row has one true partner in four (issue 43): Amazon product
names against the four store departments they come from, as a user writes it in DuckDB:

    SELECT p.name, d.department FROM products p JOIN departments d
      ON llm_filter('Is this product a {department} product? Product: {name}', d.department, p.name)

The true pairs are the products' own departments (``category`` in ../shared/datasets'
amazon_reviews). ``--task beers`` is the check task, kept apart from the choice of any
default: 40 beer names against four styles (``beer/style`` in beer_ratings), as
``ON llm_filter('Is this beer a {style}? Beer: {name}', s.style, b.name)``. Per label method
(``--configs``; ``default`` is the call without one): pairs kept, of them true, precision, recall, F1, kept/true and pairs/s, side by side in one run, each
cold (the label methods' memory forgotten first). The products task chose how a join's layouts are
ranked (relserve/labels/adaptive.py, ``_information``); the beers task checks it.

    .venv/bin/python bench/bench_label_join.py --products 40 [--task beers]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TEMPLATE = "Is this product a {department} product? Product: {name}"
DEPARTMENTS = ["arts and crafts", "office", "health and household", "automotive"]
SEED = 43


def products(n: int) -> list[tuple[str, str]]:
    """``n`` distinct product names, as many from each department (seeded), with their department."""
    import polars as pl
    from bench_quality import department

    from relserve.workloads import load_table

    am = load_table("amazon_reviews").with_columns(
        pl.col("category").map_elements(department, return_dtype=pl.Utf8).alias("department"))
    am = am.filter(pl.col("department").is_not_null()).unique("name", keep="first", maintain_order=True)
    each = n // len(DEPARTMENTS)
    picked = pl.concat([am.filter(pl.col("department") == d).sample(each, seed=SEED, shuffle=True) for d in DEPARTMENTS])
    picked = picked.sample(fraction=1.0, seed=SEED, shuffle=True)
    return [(r["name"], r["department"]) for r in picked.select("name", "department").to_dicts()]


#: the check task: beer names against four of their styles (the word the question uses)
BEER_TEMPLATE = "Is this beer a {department}? Beer: {name}"
BEER_STYLES = {"India Pale Ale (IPA)": "IPA", "Stout": "stout", "German Hefeweizen": "wheat beer", "Pale Lager": "lager"}


def beers(n: int) -> list[tuple[str, str]]:
    """``n`` distinct beer names, as many of each style in ``BEER_STYLES`` (seeded), with the style's word."""
    import polars as pl

    from relserve.workloads import load_table

    b = load_table("beer_ratings").unique("beer/name", keep="first", maintain_order=True)
    each = n // len(BEER_STYLES)
    picked = pl.concat([b.filter(pl.col("beer/style") == s).sample(each, seed=SEED, shuffle=True) for s in BEER_STYLES])
    picked = picked.sample(fraction=1.0, seed=SEED, shuffle=True)
    return [(r["beer/name"], BEER_STYLES[r["beer/style"]]) for r in picked.to_dicts()]


def run(con, config: str, template: str = TEMPLATE) -> tuple[set[tuple[str, str]], float]:
    import relserve.duckdb
    from relserve.labels.memory import forget_all

    opts = "" if config == "default" else f", llm_options(method := '{config}')"
    sql = (f"SELECT p.name, d.department FROM products p JOIN departments d "
           f"ON llm_filter('{template}', d.department, p.name{opts})")
    forget_all()
    start = time.perf_counter()
    got = relserve.duckdb.sql(con, sql).fetchall()
    return {(n, d) for n, d in got}, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--products", type=int, default=40)
    ap.add_argument("--configs", default="default,bootstrap")
    ap.add_argument("--task", choices=("products", "beers"), default="products",
                    help="products x departments (tuning), or beers x styles (check)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "label_join.json"))
    a = ap.parse_args()

    import tempfile
    import warnings

    import duckdb

    import relserve.duckdb
    from relserve import Engine
    from relserve.planner.cache import ResultCache

    rows = products(a.products) if a.task == "products" else beers(a.products)
    template = TEMPLATE if a.task == "products" else BEER_TEMPLATE
    departments = DEPARTMENTS if a.task == "products" else list(BEER_STYLES.values())
    truth = set(rows)
    engine = Engine()
    con = duckdb.connect()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=engine, cache=ResultCache(Path(tmp) / "c.sqlite"), progress=False)
        con.execute("CREATE TABLE products (name VARCHAR, truth VARCHAR)")
        con.executemany("INSERT INTO products VALUES (?, ?)", rows)
        con.execute("CREATE TABLE departments (department VARCHAR)")
        con.executemany("INSERT INTO departments VALUES (?)", [(d,) for d in departments])
        for config in a.configs.split(","):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                kept, seconds = run(con, config, template)
            right = len(kept & truth)
            precision = right / len(kept) if kept else 0.0
            recall = right / len(truth)
            f1 = 2 * precision * recall / (precision + recall) if right else 0.0
            results.append(dict(config=config, pairs=len(rows) * len(departments), true=len(truth), kept=len(kept),
                                right=right, precision=precision, recall=recall, f1=f1,
                                kept_over_true=len(kept) / len(truth), pairs_per_s=len(rows) * len(departments) / seconds,
                                warning=[str(w.message) for w in caught if "LabelWarning" in type(w.message).__name__]))
    engine.close()
    print(f"\n{a.task}: {len(rows)} rows x {len(departments)} values, {len(truth)} true pairs\n")
    print("| config | kept | true kept | precision | recall | F1 | kept/true | pairs/s | warning |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['config']} | {r['kept']} | {r['right']} | {r['precision']:.2f} | {r['recall']:.2f} | {r['f1']:.2f} | "
              f"{r['kept_over_true']:.2f}x | {r['pairs_per_s']:.1f} | {'yes' if r['warning'] else 'no'} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
