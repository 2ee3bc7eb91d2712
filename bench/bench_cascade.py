"""Model cascade benchmark (issue 46): LLM-only against cascades at 0.90 / 0.95 / 0.99, side by
side in one run, over several seeds.

A table of real reviews from ../shared/datasets (Amazon product reviews and Rotten Tomatoes
critic reviews, distinct texts, a seeded sample of ``--rows``), one call over it:

  sentiment  llm_classify('Is this review positive or negative? Review: {review}', ['positive', 'negative'])
  satisfied  llm_filter('Is the reviewer satisfied? Review: {review}')

1. LLM-only: the call as it runs without the option (one relQuery, the default label method),
   cold: the label methods' per-template memory (examples, label means, priors) forgotten first,
   as a user's first statement. Its answers are the reference, computed once and used for every
   seed (``--llm-answers FILE`` saves them, and reads them back in a later run instead of
   running again: say so when you quote such a run).
2. Per seed and target: the same call with ``cascade := target, seed := seed``, cold too, timed
   end to end (planning, the LLM on the sample and audit, embedding, training, the threshold,
   the LLM on the rest). Measured agreement: the share of rows whose answer equals the
   LLM-only answer; split into the proxy's rows and the LLM's rows (those differ from the LLM-only
   run only through the label method's dependence on the other rows of its relQuery); whether the
   stated interval covers the measured agreement.

Time goes to a run's own phases (the report's sample_s / embed_s / learn_s / remainder_s).

    flock -x /tmp/relserve-cpu.lock .venv/bin/python bench/bench_cascade.py --rows 20000 --seeds 0-9
    .venv/bin/python bench/bench_cascade.py --memory 100000      # peak memory of embedding + proxy

Writes bench/out/cascade_<task>.json and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = {
    "sentiment": dict(fn="llm_classify", template="Is this review positive or negative? Review: {review}",
                      labels=["positive", "negative"]),
    "satisfied": dict(fn="llm_filter", template="Is the reviewer satisfied? Review: {review}", labels=None),
}
TARGETS = (0.90, 0.95, 0.99)


def reviews(rows: int, seed: int = 0) -> list[str]:
    """``rows`` distinct review texts: Amazon and Rotten Tomatoes reviews, then beer reviews if
    those run out, shuffled with ``seed``."""
    import polars as pl

    from relserve.workloads import load_table

    am = load_table("amazon_reviews").select(pl.col("text").alias("review"))
    rt = load_table("rotten_tomatoes").select(pl.col("review_content").alias("review"))
    beer = load_table("beer_reviews").select(pl.col("review_text").alias("review"))
    first = pl.concat([am, rt]).filter(pl.col("review").str.len_chars() > 0).unique(maintain_order=True)
    if first.height < rows:
        extra = beer.filter(pl.col("review").str.len_chars() > 0).unique(maintain_order=True)
        first = pl.concat([first, extra.head(rows - first.height)])
    if first.height < rows:
        raise SystemExit(f"only {first.height} distinct reviews in the tables, asked for {rows}")
    return first.sample(rows, seed=seed, shuffle=True)["review"].to_list()


def forget_template_memory() -> None:
    """Every run cold: no examples, label means, priors or answer fields from an earlier run."""
    from relserve.planner.labels.adaptive import forget as forget_adaptive
    from relserve.planner.labels.answer_fields import forget_fields
    from relserve.planner.labels.bootstrap import forget_examples
    from relserve.planner.labels.pools import forget_means
    from relserve.planner.labels.prior import forget_priors

    forget_examples()
    forget_means()
    forget_fields()
    forget_priors()
    forget_adaptive()


def make(task: dict, **options):
    from relserve.functions import make_call

    return make_call(task["fn"], task["template"], labels=task["labels"], **options)


def run_llm_only(engine, task: dict, texts: list[str]) -> dict:
    from relserve.planner.plan_and_run import run_call

    forget_template_memory()
    t0 = time.perf_counter()
    out = run_call(make(task), [texts], engine=engine, cache=False, progress=False)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "values": out.values, "errors": sum(e is not None for e in out.errors)}


def run_cascade(engine, task: dict, texts: list[str], target: float, seed: int, reference: list) -> dict:
    from relserve.planner.plan_and_run import run_call

    forget_template_memory()
    t0 = time.perf_counter()
    out = run_call(make(task, cascade=target, seed=seed), [texts], engine=engine, cache=False, progress=False)
    seconds = time.perf_counter() - t0
    rep = out.cascade
    same = [a == b for a, b in zip(out.values, reference)]
    by_proxy = [s for s, r in zip(same, out.details) if r is not None and r.answered_by == "proxy"]
    by_llm = [s for s, r in zip(same, out.details) if r is not None and r.answered_by != "proxy"]
    agreement = sum(same) / len(same)
    low, high = rep.agreement_low, rep.agreement_high
    return {
        "target": target, "seed": seed, "seconds": seconds, "report": rep.as_dict(),
        "agreement": agreement,
        "agreement_proxy_rows": sum(by_proxy) / len(by_proxy) if by_proxy else None,
        "agreement_llm_rows": sum(by_llm) / len(by_llm) if by_llm else None,
        "covered": None if low is None else bool(low <= agreement <= high),
    }


def summary(llm: dict, runs: list[dict], rows: int) -> str:
    base = rows / llm["seconds"]
    lines = [
        f"LLM-only: {rows:,} rows in {llm['seconds']:.1f} s = {base:.2f} rows/s",
        "",
        "| target | seed | rows/s | x LLM-only | proxy rows | LLM rows | measured agreement (proxy rows / LLM rows) "
        "| stated (95% interval) | covered | sample s / embed s / learn s / rest s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rep = r["report"]
        stated = ("fallback" if rep["agreement"] is None else
                  f"{rep['agreement']:.2%} ({rep['agreement_low']:.2%}-{rep['agreement_high']:.2%})")
        split = " / ".join("-" if x is None else f"{x:.2%}" for x in (r["agreement_proxy_rows"], r["agreement_llm_rows"]))
        lines.append(
            f"| {r['target']:g} | {r['seed']} | {rows / r['seconds']:.2f} | {llm['seconds'] / r['seconds']:.2f}x "
            f"| {rep['proxy_rows']:,} | {rep['llm_rows']:,} | {r['agreement']:.2%} ({split}) | {stated} "
            f"| {'-' if r['covered'] is None else ('yes' if r['covered'] else 'NO')} "
            f"| {rep['sample_s']:.0f} / {rep['embed_s']:.0f} / {rep['learn_s']:.1f} / {rep['remainder_s']:.0f} |"
        )
    lines.append("")
    for target in sorted({r["target"] for r in runs}):
        these = [r for r in runs if r["target"] == target]
        speed = sorted(llm["seconds"] / r["seconds"] for r in these)
        covered = [r["covered"] for r in these if r["covered"] is not None]
        lines.append(
            f"target {target:g}: {len(these)} seeds, x LLM-only median {speed[len(speed) // 2]:.2f} "
            f"(min {speed[0]:.2f}, max {speed[-1]:.2f}); measured agreement min "
            f"{min(r['agreement'] for r in these):.2%}; interval covers it in {sum(covered)} of {len(covered)} "
            f"seeds where the proxy answered rows"
        )
    return "\n".join(lines)


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def memory(rows: int) -> None:
    """Peak memory of a cascade's embedding and proxy over ``rows`` prompts (no LLM: the sample's
    answers are made up, which changes nothing of the memory): the process's peak RSS after the
    embedding model is loaded, and after ``learn`` has embedded and scored every row."""
    import numpy as np

    from relserve.cascade.embedding import default_embedder
    from relserve.cascade.policy import CascadePlan, plan
    from relserve.cascade.runner import Cascade
    from relserve.functions import make_call
    from relserve.planner.planned_rows import PlannedRows

    texts = reviews(27_000)
    prompts = [f"Is this review positive or negative? Review: {texts[i % len(texts)]} (#{i})" for i in range(rows)]
    call = make_call("llm_classify", "Is this review positive or negative? Review: {review}",
                     labels=["positive", "negative"], cascade=0.95)
    p: CascadePlan = plan(call, rows)
    planned = PlannedRows(call, rows, None, [], prompts, [[i] for i in range(rows)])
    default_embedder().embed(["warm up"])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cascade = Cascade(planned, p, seed=0)
    rng = np.random.default_rng(0)
    for i in cascade.parts.train + cascade.parts.audit:
        cascade.answers[i] = "positive" if rng.uniform() < 0.5 else "negative"
    t0 = time.perf_counter()
    cascade.learn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{rows:,} rows: peak RSS {peak:.0f} MiB, {peak - base:.0f} MiB above the loaded model ({base:.0f} MiB); "
          f"embedding {cascade.report.embed_s:.0f} s ({rows / cascade.report.embed_s:.0f} rows/s), "
          f"learn {time.perf_counter() - t0:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), default="sentiment")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,7")
    ap.add_argument("--targets", default=",".join(map(str, TARGETS)))
    ap.add_argument("--llm-answers", type=Path, help="save the LLM-only answers here; read them if the file exists")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--memory", type=int, help="only measure the peak memory of a cascade over this many rows")
    args = ap.parse_args()
    if args.memory:
        memory(args.memory)
        return

    from relserve import Engine

    task = TASKS[args.task]
    texts = reviews(args.rows)
    engine = Engine()
    try:
        if args.llm_answers and args.llm_answers.exists():
            llm = json.loads(args.llm_answers.read_text())
            assert len(llm["values"]) == args.rows, "the saved LLM-only answers are of another table"
            print(f"LLM-only answers read from {args.llm_answers} (measured in an earlier run)")
        else:
            llm = run_llm_only(engine, task, texts)
            if args.llm_answers:
                args.llm_answers.parent.mkdir(parents=True, exist_ok=True)
                args.llm_answers.write_text(json.dumps(llm))
        print(f"LLM-only: {args.rows / llm['seconds']:.2f} rows/s ({llm['seconds']:.0f} s)", flush=True)
        runs = []
        for seed in seeds_of(args.seeds):
            for target in (float(t) for t in args.targets.split(",")):
                r = run_cascade(engine, task, texts, target, seed, llm["values"])
                runs.append(r)
                rep = r["report"]
                print(f"target {target:g} seed {seed}: {r['seconds']:.0f} s ({llm['seconds'] / r['seconds']:.2f}x), "
                      f"proxy rows {rep['proxy_rows']:,}, measured {r['agreement']:.2%}, stated "
                      f"{rep['agreement_low']}-{rep['agreement_high']}", flush=True)
    finally:
        engine.close()
    text = summary(llm, runs, args.rows)
    print(text)
    out = args.out or ROOT / "bench" / "out" / f"cascade_{args.task}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"task": args.task, "rows": args.rows, "llm_only_seconds": llm["seconds"],
                               "runs": runs, "summary": text}, indent=1))


if __name__ == "__main__":
    main()
