"""Is a row's answer a function of the row? (issue 62) The same filter over two tables that share
80 rows, on the real engine, through DuckDB as a user writes it, with an empty result cache each
time (so every answer is the engine's, not a stored one):

* **after the plan exists** (one home): the table T1 first, which makes the call's label plan,
  then T2, then the shared rows alone; every answer of a shared row must equal its answer in T1
  (target: 0 differences);
* **two fresh homes**: T1 in one home, T2 in another, each making its own plan from its own rows;
  the shared rows' answers may differ only through the plans (target: at most 2%).

T1 and T2 differ on purpose: T1's other rows are mostly "no" (10% "yes"), T2's mostly "yes"
(80%), the shared rows half and half, so a decision that leaned on the other rows (a share of
"yes", label means pooled over the table) would move the shared rows' answers.

    .venv/bin/python bench/bench_plan_stability.py                 # both questions
    .venv/bin/python bench/bench_plan_stability.py --out bench/out/plan_stability.json

Questions (check tasks' wording, bench/prevalence_tasks.py): the critic's "like" over Rotten
Tomatoes snippets, and "a wheat beer" over beer reviews (a weak filter: AUC below 0.7 there).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(__file__).resolve().parent / "out"
SHARED, OTHER = 80, 120
SEED = 62


@dataclass
class Question:
    name: str
    template: str
    column: str


QUESTIONS = [
    Question("rt_likes", "Does the critic like the film? {review}", "review"),
    Question("beer_wheat", "Is this a wheat beer? Review: {review}", "review"),
]


@dataclass
class Stability:
    question: str
    shared_rows: int
    #: shared rows whose answer in T2 (same home, after T1 made the plan) differs from T1's
    after_plan_t2: int
    #: shared rows whose answer asked alone (same home) differs from T1's
    after_plan_alone: int
    #: shared rows whose answer differs between two fresh homes (T1 in one, T2 in the other)
    fresh_homes: int
    kept_t1: int
    kept_t2_fresh: int
    seconds: float
    #: each home's plan in EXPLAIN's words (what the fresh homes' answers differ through)
    plan_t1: str = ""
    plan_t2_fresh: str = ""


def labelled(question: Question) -> tuple[list[str], list[str]]:
    """The question's source texts, distinct: (its "yes" rows, its "no" rows), each shuffled."""
    import polars as pl

    from relserve.workloads import load_table

    if question.name == "rt_likes":
        df = load_table("rotten_tomatoes").filter(pl.col("review_content").str.len_chars() > 20)
        df = df.unique("review_content", keep="first", maintain_order=True)
        text, yes = pl.col("review_content"), pl.col("review_type") == "fresh"
    else:
        df = load_table("beer_reviews").filter(pl.col("review_text").str.len_chars() > 20)
        df = df.unique("review_text", keep="first", maintain_order=True)
        text, yes = pl.col("review_text"), pl.col("style").str.to_lowercase().str.contains("wheat|weiss|witbier|weizen")
    pos = df.filter(yes).select(text.alias("t")).sample(fraction=1.0, shuffle=True, seed=SEED)["t"].to_list()
    neg = df.filter(~yes).select(text.alias("t")).sample(fraction=1.0, shuffle=True, seed=SEED)["t"].to_list()
    return pos, neg


def tables(question: Question) -> tuple[list[str], list[str], list[str]]:
    """(T1's rows, T2's rows, the shared rows): texts only, each list distinct."""
    return split(*labelled(question))


def split(pos: list[str], neg: list[str]) -> tuple[list[str], list[str], list[str]]:
    """``tables`` from the question's "yes" and "no" texts."""
    shared = pos[: SHARED // 2] + neg[: SHARED // 2]
    pos, neg = pos[SHARED // 2:], neg[SHARED // 2:]
    t1_yes = OTHER // 10
    t2_yes = OTHER * 8 // 10
    t1 = pos[:t1_yes] + neg[: OTHER - t1_yes]
    pos, neg = pos[t1_yes:], neg[OTHER - t1_yes:]
    t2 = pos[:t2_yes] + neg[: OTHER - t2_yes]
    import random

    rng = random.Random(SEED)
    t1, t2 = t1 + shared, t2 + shared
    rng.shuffle(t1)
    rng.shuffle(t2)
    return t1, t2, shared


def answers(engine, question: Question, rows: list[str]) -> dict[str, bool]:
    """The filter's answer per row, through DuckDB, an empty result cache, the process's label memory."""
    import duckdb
    import polars as pl

    import relserve.duckdb
    from relserve.planner.cache import ResultCache

    con = duckdb.connect()
    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=engine, cache=ResultCache(Path(tmp) / "r.sqlite"), progress=False)
        con.register("t_arrow", pl.DataFrame({question.column: rows}).to_arrow())
        con.execute("CREATE TABLE t AS SELECT * FROM t_arrow")
        sql = f"SELECT {question.column}, llm_filter('{question.template}', {question.column}) FROM t"
        got = relserve.duckdb.sql(con, sql).fetchall()
    return {r: bool(a) for r, a in got}


def _plan_words(memory) -> str:
    """The one plan a home holds, as EXPLAIN describes it."""
    kept = memory.plans()
    return "; ".join(k.plan.describe() for k in kept) or "(no plan)"


def measure(engine, question: Question) -> Stability:
    from relserve.labels.memory import LabelMemory, use_memory

    t0 = time.monotonic()
    t1, t2, shared = tables(question)
    home_a, home_b = LabelMemory(), LabelMemory()
    use_memory(home_a)  # home A: T1 makes the plan
    a1 = answers(engine, question, t1)
    a2 = answers(engine, question, t2)
    alone = answers(engine, question, shared)
    use_memory(home_b)  # home B: T2 makes its own plan
    b2 = answers(engine, question, t2)
    use_memory(None)
    return Stability(
        question.name, len(shared),
        after_plan_t2=sum(a1[r] != a2[r] for r in shared),
        after_plan_alone=sum(a1[r] != alone[r] for r in shared),
        fresh_homes=sum(a1[r] != b2[r] for r in shared),
        kept_t1=sum(a1.values()), kept_t2_fresh=sum(b2.values()), seconds=time.monotonic() - t0,
        plan_t1=_plan_words(home_a), plan_t2_fresh=_plan_words(home_b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", default=",".join(q.name for q in QUESTIONS))
    ap.add_argument("--out", type=Path, default=OUT / "plan_stability.json")
    args = ap.parse_args()
    from relserve import Engine

    picked = [q for q in QUESTIONS if q.name in args.questions.split(",")]
    results = []
    with Engine(max_num_seqs=64, kv_cache_gb=2.0) as engine:
        print(f"engine: {engine.settings.model} in {engine.settings.resolved_dtype}", flush=True)
        for q in picked:
            s = measure(engine, q)
            results.append(s)
            print(f"{s.question}: {s.shared_rows} shared rows; differ after the plan exists: T2 {s.after_plan_t2}, "
                  f"alone {s.after_plan_alone}; two fresh homes: {s.fresh_homes} ({s.fresh_homes / s.shared_rows:.1%}); "
                  f"kept T1 {s.kept_t1}/{len(tables(q)[0])}, T2 (its own plan) {s.kept_t2_fresh}; {s.seconds:.0f} s",
                  flush=True)
            print(f"  plan from T1: {s.plan_t1}\n  plan from T2: {s.plan_t2_fresh}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([asdict(s) for s in results], indent=1))
    ok = all(s.after_plan_t2 == 0 and s.after_plan_alone == 0 and s.fresh_homes <= 0.02 * s.shared_rows for s in results)
    print("targets met" if ok else "a target missed (0 differences once the plan exists; <= 2% between fresh homes)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
