"""Model cascade benchmark (issue 46): LLM-only against cascades at 0.90 / 0.95 / 0.99, side by
side in one run, over several seeds.

A table of real reviews from ../shared/datasets (Amazon product reviews and Rotten Tomatoes
critic reviews, distinct texts, a seeded sample of ``--rows``), one call over it (``--task``):

  sentiment  llm_classify('Is this review positive or negative? Review: {review}', ['positive', 'negative'])
  satisfied  llm_filter('Is the reviewer satisfied? Review: {review}')
  topic      llm_classify('What is this review about? Review: {review}', ['a movie', 'a product', 'a beer'])
             (beer reviews added to the table)
  beer       llm_filter('Is this review about a beer? Review: {review}') over a table with 2% beer reviews
  beer_kind  the same filter and table, its LLM answers the topic classify's 'a beer' (replays only)
  beer_truth the same filter and table, its answers the truth (replays only, no LLM)

1. LLM-only: the call as it runs without the option (one relQuery, the default label method),
   cold: the label methods' per-template memory (examples, label means, priors) forgotten first,
   as a user's first statement. Its answers are the reference, computed once and used for every
   seed (``--llm-answers FILE`` saves them, and reads them back in a later run instead of
   running again: say so when you quote such a run).
2. Real runs (``--real SEEDS``), per seed and target (``--real-targets``, 0.95 by default): the
   same call with ``cascade := target, seed := seed``, cold too, timed end to end (planning, the
   LLM on the sample and audit, embedding, training, the threshold, the LLM on the rest).
   Measured agreement: the share of rows whose answer equals the LLM-only answer; split into the
   proxy's rows and the LLM's rows (those differ from the LLM-only run only through the label
   method's dependence on the other rows of its relQuery); whether the stated interval covers
   the measured agreement.
3. Replays (``--replay SEEDS``), per seed and target, without the engine: relserve's own cascade
   steps (the same split, embeddings, proxy and threshold: ``Cascade.learn``) with the sample's
   and audit's LLM answers taken from the LLM-only run. Their measured agreement is the proxy
   rows' against the LLM-only answers, so they check the statistics (does the stated interval
   cover it?) over many seeds at the cost of one embedding of the table; their time is ESTIMATED
   from the per-row costs measured in this run (LLM-only rows/s, embedding rows/s), never
   quoted as measured.

Time goes to a run's own phases (the report's sample_s / embed_s / learn_s / remainder_s).

    .venv/bin/python bench/bench_cascade.py --rows 20000 \
        --llm-answers bench/out/cascade_llm_sentiment.json --real 0 --replay 0-9
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

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from relserve.cascade.targets import Targets  # noqa: E402

TASKS = {
    "sentiment": dict(fn="llm_classify", template="Is this review positive or negative? Review: {review}",
                      labels=["positive", "negative"], beer=False),
    "satisfied": dict(fn="llm_filter", template="Is the reviewer satisfied? Review: {review}", labels=None, beer=False),
    # what the review is about: the three tables' reviews mixed (an answer that follows the text)
    "topic": dict(fn="llm_classify", template="What is this review about? Review: {review}",
                  labels=["a movie", "a product", "a beer"], beer=True),
    # a filter that keeps few rows (issue 64): 2% of the table are beer reviews, the rest product
    # and movie reviews (rare_reviews)
    "beer": dict(fn="llm_filter", template="Is this review about a beer? Review: {review}", labels=None, beer=False,
                 rare="beer"),
    # the same table, with a filter whose LLM answers follow the text: its "yes" rows are the rows
    # the topic classify answers 'a beer' (the small model's own filter above reads one lump and
    # keeps most rows). Replays only: a real run would ask the filter, not the classify
    "beer_kind": dict(fn="llm_filter", template="Is this review about a beer? Review: {review}", labels=None,
                      beer=False, rare="beer",
                      answers_from=dict(fn="llm_classify", template="What is this review about? Review: {review}",
                                        labels=["a movie", "a product", "a beer"], yes="a beer")),
    # the same filter and table, its answers the truth (which rows come from the beer table): a
    # stand-in for a model whose answers keep the 2% the question asks for, which the small
    # model's do not. Replays only; no LLM runs (times are estimated at --llm-rate rows/s)
    "beer_truth": dict(fn="llm_filter", template="Is this review about a beer? Review: {review}", labels=None,
                       beer=False, rare="beer", answers_from="truth"),
}
#: the share of a rare task's table from its category
RARE_SHARE = 0.02
TARGETS = (0.90, 0.95, 0.99)


def reviews(rows: int, seed: int = 0, beer: bool = False, rare: str | None = None) -> list[str]:
    """``rows`` distinct review texts: Amazon and Rotten Tomatoes reviews (and beer reviews with
    ``beer``, or when those run out), shuffled with ``seed``. ``rare``: a kind of review that
    makes ``RARE_SHARE`` of the rows (rare_reviews)."""
    import polars as pl

    from relserve.workloads import load_table

    if rare is not None:
        return rare_reviews(rows, rare, seed)

    am = load_table("amazon_reviews").select(pl.col("text").alias("review"))
    rt = load_table("rotten_tomatoes").select(pl.col("review_content").alias("review"))
    beer_rows = load_table("beer_reviews").select(pl.col("review_text").alias("review"))
    first = pl.concat([am, rt, beer_rows] if beer else [am, rt]).filter(pl.col("review").str.len_chars() > 0)
    first = first.unique(maintain_order=True)
    if first.height < rows:
        extra = beer_rows.filter(pl.col("review").str.len_chars() > 0).unique(maintain_order=True)
        first = pl.concat([first, extra.head(rows - first.height)])
    if first.height < rows:
        raise SystemExit(f"only {first.height} distinct reviews in the tables, asked for {rows}")
    return first.sample(rows, seed=seed, shuffle=True)["review"].to_list()


def rare_reviews(rows: int, rare: str, seed: int = 0) -> list[str]:
    """``rows`` distinct texts, ``RARE_SHARE`` of them beer reviews (``rare="beer"``), the rest
    Amazon reviews and review titles, Rotten Tomatoes reviews and the movies table's reviews
    (the review tables hold too few texts of other kinds for 19,600 rows without the titles)."""
    import polars as pl

    from relserve.workloads import load_table

    if rare != "beer":
        raise ValueError(f"unknown rare kind {rare!r}")
    am = load_table("amazon_reviews")
    others = pl.concat([
        am.select(pl.col("text").alias("review")),
        am.select(pl.col("title").alias("review")),
        load_table("rotten_tomatoes").select(pl.col("review_content").alias("review")),
        load_table("movies_small").select(pl.col("review_content").alias("review")),
    ]).drop_nulls().filter(pl.col("review").str.len_chars() > 0).unique(keep="first", maintain_order=True)
    beer = load_table("beer_reviews").select(pl.col("review_text").alias("review")).drop_nulls()
    beer = beer.filter(pl.col("review").str.len_chars() > 0).unique(keep="first", maintain_order=True)
    k = round(rows * RARE_SHARE)
    picked = pl.concat([beer.sample(k, seed=seed, shuffle=True), others.sample(rows - k, seed=seed, shuffle=True)])
    return picked.sample(fraction=1.0, seed=seed, shuffle=True)["review"].to_list()


def forget_template_memory() -> None:
    """Every run cold: no examples, label means, priors or answer fields from an earlier run."""
    from relserve.labels.memory import forget_all

    forget_all()


def make(task: dict, **options):
    from relserve.functions import make_call

    return make_call(task["fn"], task["template"], labels=task["labels"], **options)


def truth_answers(texts: list[str], llm_rate: float) -> dict:
    """Whether each text is a beer review (from the beer table), in place of an LLM's answers;
    the seconds an LLM at ``llm_rate`` rows/s would take, for the replays' estimates."""
    import polars as pl

    from relserve.workloads import load_table

    beer = set(load_table("beer_reviews").select(pl.col("review_text")).drop_nulls().to_series().to_list())
    return {"seconds": len(texts) / llm_rate, "values": [t in beer for t in texts], "errors": 0}


def run_llm_only(engine, task: dict, texts: list[str]) -> dict:
    from relserve.planner.plan_and_run import run_call

    forget_template_memory()
    source = task.get("answers_from")
    t0 = time.perf_counter()
    out = run_call(make(source or task), [texts], engine=engine, cache=False, progress=False)
    seconds = time.perf_counter() - t0
    values = out.values if source is None else [None if v is None else v == source["yes"] for v in out.values]
    return {"seconds": seconds, "values": values, "errors": sum(e is not None for e in out.errors)}


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


def run_kept(engine, task: dict, texts: list[str], mode: str, options: dict, seed: int, reference: list) -> dict:
    """A real run of a filter with kept-row targets (``options``), cold, against the LLM-only answers."""
    from relserve.planner.plan_and_run import run_call

    forget_template_memory()
    t0 = time.perf_counter()
    out = run_call(make(task, seed=seed, **options), [texts], engine=engine, cache=False, progress=False)
    seconds = time.perf_counter() - t0
    recall, precision = kept_quality(out.values, reference)
    rep = out.cascade
    return {"mode": mode, "seed": seed, "seconds": seconds, "report": rep.as_dict() if rep else None,
            "recall": recall, "precision": precision}


def breakdown(rep: dict, seconds: float) -> str:
    """Where a real run's time went (the report's phases; the rest is planning and the label method's own passes)."""
    phases = [("LLM sample", rep["sample_s"]), ("embedding", rep["embed_s"]), ("training + threshold", rep["learn_s"]),
              ("LLM audit", rep.get("audit_s", 0.0)), ("LLM rest", rep["remainder_s"])]
    other = seconds - sum(s for _, s in phases)
    rows = {"LLM sample": rep["train"] + (0 if rep.get("targets") else rep["audit"]),
            "LLM audit": rep["audit"] if rep.get("targets") else 0, "LLM rest": rep["remainder_rows"]}
    shown = ", ".join(f"{name} {s:.0f} s" + (f" ({rows[name]:,} rows)" if rows.get(name) else "")
                      for name, s in phases if s or rows.get(name))
    return f"    time: {shown}, other {other:.0f} s; total {seconds:.0f} s"


def kept_real_summary(llm: dict, runs: list[dict], rows: int, rate: float | None) -> str:
    lines = ["Kept-row targets, real runs:", ""]
    for r in runs:
        rep = r["report"]
        base = f"{llm['seconds'] / r['seconds']:.2f}x LLM-only"
        if rate is not None:
            base += f" ({rows / rate / r['seconds']:.2f}x at this run's LLM-only rate)"
        lines.append(f"{r['mode']} seed {r['seed']}: {r['seconds']:.0f} s, {base}; recall {r['recall']:.2%}, "
                     f"precision {r['precision']:.2%}; LLM rows {rep['llm_rows']:,} of {rows:,}")
        lines.append(breakdown(rep, r["seconds"]))
    return "\n".join(lines)


class TableEmbedder:
    """The default embedder's vectors of one table, computed once (replays reuse them)."""

    def __init__(self, texts: list[str]) -> None:
        from relserve.cascade.embedding import CHUNK, default_embedder

        inner = default_embedder()
        self.name = inner.name
        t0 = time.perf_counter()
        vectors = [inner.embed(texts[i : i + CHUNK]) for i in range(0, len(texts), CHUNK)]
        self.seconds = time.perf_counter() - t0
        self._index = {t: i for i, t in enumerate(texts)}
        self._vectors = np.concatenate(vectors)

    def embed(self, texts):
        return self._vectors[[self._index[t] for t in texts]]


def planned_rows(task: dict, texts: list[str], target: float | None, seed: int, **options):
    """The call's PlannedRows as run_call plans them (the prompts the cascade splits and embeds)."""
    from relserve.planner.plan import plan_call
    from relserve.planner.planned_rows import PlannedRows

    plan = plan_call(make(task, cascade=target, seed=seed, **options), [texts], model_id="SmolLM2-135M-Instruct")
    return plan, PlannedRows.of(plan, None)


def replay(task: dict, texts: list[str], target: float, seed: int, reference: list, embedder: TableEmbedder,
           llm_rows_per_s: float) -> dict:
    """relserve's cascade steps with the LLM-only answers standing in for the sample's."""
    from relserve.cascade import policy
    from relserve.planner.cascade_runner import Cascade

    plan, rows = planned_rows(task, texts, target, seed)
    cascade = Cascade(rows, policy.plan(plan.call, len(rows.prompts)), seed=seed, embedder=embedder)
    label = (lambda v: "yes" if v else "no") if task["labels"] is None else (lambda v: v)
    for p in cascade.parts.train + cascade.parts.audit:
        value = reference[rows.targets[p][0]]
        if value is not None:
            cascade.answers[p] = label(value)
    t0 = time.perf_counter()
    cascade.learn()
    learn_s = time.perf_counter() - t0
    rep = cascade.report
    proxy = cascade.proxy_answers()
    wrong = sum(r.value != reference[r.index] for r in proxy)
    agreement = 1 - wrong / len(texts)
    # the time a real run would take, from this run's per-row costs (the embedding counted whole)
    estimated = rep.llm_rows / llm_rows_per_s + embedder.seconds + learn_s
    low, high = rep.agreement_low, rep.agreement_high
    return {
        "target": target, "seed": seed, "estimated_seconds": estimated, "report": rep.as_dict(),
        "agreement": agreement,
        "agreement_proxy_rows": 1 - wrong / len(proxy) if proxy else None,
        "covered": None if low is None else bool(low <= agreement <= high),
    }


#: the kept rows' targets the replays check (``--kept``): name -> the call's options
KEPT_MODES = {
    "recall": lambda t: dict(cascade_recall=t.recall),
    "precision": lambda t: dict(cascade_precision=t.precision),
    "both": lambda t: dict(cascade_recall=t.recall, cascade_precision=t.precision),
}


def kept_quality(values: list, reference: list) -> tuple[float, float]:
    """(recall, precision) of a filter's answers against the LLM-only answers (failed rows: not kept)."""
    kept = [bool(v) for v in values]
    truth = [bool(v) for v in reference]
    tp = sum(a and b for a, b in zip(kept, truth))
    return tp / max(1, sum(truth)), tp / sum(kept) if any(kept) else 1.0


def replay_kept(task: dict, texts: list[str], mode: str, options: dict, seed: int, reference: list,
                embedder: TableEmbedder, llm_rows_per_s: float) -> dict:
    """A recall / precision cascade's steps (relserve/planner/cascade_targets.py) with the LLM-only
    answers standing in for the training rows' and the audit's; the rows the proxy does not
    answer keep their LLM-only answers, as the remainder's relQuery would give them."""
    from relserve.cascade import policy
    from relserve.planner.cascade_targets import TargetCascade

    plan, rows = planned_rows(task, texts, None, seed, **options)
    cascade = TargetCascade(rows, policy.plan(plan.call, len(rows.prompts)), seed=seed, embedder=embedder)

    def answer(prompts):
        for p in prompts:
            value = reference[rows.targets[p][0]]
            if value is not None:
                cascade.answers[p] = "yes" if value else "no"

    answer(cascade.parts.train)
    t0 = time.perf_counter()
    cascade.learn()
    learn_s = time.perf_counter() - t0
    if cascade.design is not None:
        answer([cascade.parts.rest[i] for i in cascade.design.audited()])
    t1 = time.perf_counter()
    cascade.choose()
    learn_s += time.perf_counter() - t1
    rep = cascade.report
    values = list(reference)
    for r in cascade.proxy_answers():
        values[r.index] = r.value
    recall, precision = kept_quality(values, reference)
    llm = rep.llm_rows
    estimated = llm / llm_rows_per_s + embedder.seconds + learn_s
    f = rep.targets
    return {
        "mode": mode, "seed": seed, "report": rep.as_dict(), "recall": recall, "precision": precision,
        "recall_met": None if f.recall is None else recall >= f.recall,
        "precision_met": None if f.precision is None else precision >= f.precision,
        "llm_rows": llm, "saved_rows": len(texts) - llm, "estimated_seconds": estimated,
    }


def kept_summary(llm: dict, runs: list[dict], rows: int, embed_s: float) -> str:
    positives = sum(bool(v) for v in llm["values"])
    lines = [
        f"Kept-row targets, replays ({rows:,} rows, the LLM-only run kept {positives:,} = {positives / rows:.2%}; "
        f"times ESTIMATED from this run's LLM-only rows/s and the embedding's {embed_s:.0f} s):",
        "",
        "| mode | seed | census | 'no' drawn | 'yes' drawn | proxy 'no' | proxy 'yes' | LLM rows | recall (stated >=) "
        "| precision (stated >=) | estimated x LLM-only |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        f = r["report"]["targets"]
        stated_r = "-" if f["recall_low"] is None else f"{f['recall_low']:.2%}"
        stated_p = "-" if f["precision_low"] is None else f"{f['precision_low']:.2%}"
        lines.append(f"| {r['mode']} | {r['seed']} | {f['census']:,} | {f['low_drawn']:,} | {f['high_drawn']:,} "
                     f"| {f['no_rows']:,} | {f['yes_rows']:,} | {r['llm_rows']:,} | {r['recall']:.2%} ({stated_r}) "
                     f"| {r['precision']:.2%} ({stated_p}) | {llm['seconds'] / r['estimated_seconds']:.2f}x |")
    lines.append("")
    for mode in dict.fromkeys(r["mode"] for r in runs):
        these = [r for r in runs if r["mode"] == mode]
        f = these[0]["report"]["targets"]
        parts = []
        if f["recall"] is not None:
            parts.append(f"recall >= {f['recall']:g} in {sum(r['recall_met'] for r in these)} of {len(these)} seeds "
                         f"(min {min(r['recall'] for r in these):.2%})")
        if f["precision"] is not None:
            parts.append(f"precision >= {f['precision']:g} in {sum(r['precision_met'] for r in these)} of "
                         f"{len(these)} (min {min(r['precision'] for r in these):.2%})")
        saved = [r["saved_rows"] for r in these]
        speed = sorted(llm["seconds"] / r["estimated_seconds"] for r in these)
        lines.append(f"{mode} (failure {f['failure']:g}): " + "; ".join(parts)
                     + f"; LLM rows saved mean {sum(saved) / len(saved):,.0f} of {rows:,} "
                       f"(min {min(saved):,}, max {max(saved):,}); estimated x LLM-only median {speed[len(speed) // 2]:.2f}")
    return "\n".join(lines)


def replay_summary(llm: dict, runs: list[dict], rows: int, embed_s: float) -> str:
    lines = [
        f"Replays (LLM answers from the LLM-only run; times ESTIMATED from this run's LLM-only rows/s and "
        f"the embedding's {embed_s:.0f} s for the table):",
        "",
        "| target | seed | proxy rows | LLM rows | agreement with LLM-only (proxy rows) | stated (95% interval) | covered "
        "| estimated x LLM-only |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rep = r["report"]
        stated = ("fallback" if rep["agreement"] is None else
                  f"{rep['agreement']:.2%} ({rep['agreement_low']:.2%}-{rep['agreement_high']:.2%})")
        proxy = "-" if r["agreement_proxy_rows"] is None else f"{r['agreement_proxy_rows']:.2%}"
        lines.append(f"| {r['target']:g} | {r['seed']} | {rep['proxy_rows']:,} | {rep['llm_rows']:,} "
                     f"| {r['agreement']:.2%} ({proxy}) | {stated} "
                     f"| {'-' if r['covered'] is None else ('yes' if r['covered'] else 'NO')} "
                     f"| {llm['seconds'] / r['estimated_seconds']:.2f}x |")
    lines.append("")
    for target in sorted({r["target"] for r in runs}):
        these = [r for r in runs if r["target"] == target]
        covered = [r["covered"] for r in these if r["covered"] is not None]
        speed = sorted(llm["seconds"] / r["estimated_seconds"] for r in these)
        lines.append(f"target {target:g}: {len(these)} seeds, proxy answered rows in {len(covered)}; the interval covers "
                     f"the measured agreement in {sum(covered)} of them; estimated x LLM-only median "
                     f"{speed[len(speed) // 2]:.2f}; mean proxy rows "
                     f"{sum(r['report']['proxy_rows'] for r in these) / len(these):,.0f}")
    return "\n".join(lines)


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


def embedding_texts(task: dict, texts: list[str]) -> list[str]:
    """What the cascade embeds of each prompt (the planner's prompts, cut as the runner cuts them)."""
    from relserve.cascade.embedding import row_texts

    _, rows = planned_rows(task, texts, 0.95, 0)
    return row_texts(rows.prompts)


def seeds_of(text: str) -> list[int]:
    if not text:
        return []
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def memory(rows: int) -> None:
    """Peak memory of a cascade's embedding and proxy over ``rows`` prompts (no LLM: the sample's
    answers are made up, which changes nothing of the memory): the process's peak RSS after the
    embedding model is loaded, and after ``learn`` has embedded and scored every row."""
    from relserve.cascade.embedding import default_embedder
    from relserve.cascade.policy import CascadePlan, plan
    from relserve.functions import make_call
    from relserve.planner.cascade_runner import Cascade
    from relserve.planner.planned_rows import PlannedRows

    texts = reviews(27_000, beer=True)
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
    ap.add_argument("--real", default="0", help="seeds of real runs, e.g. 0-2 or 0,3 ('' for none)")
    ap.add_argument("--replay", default="0-9", help="seeds of replays ('' for none)")
    ap.add_argument("--targets", default=",".join(map(str, TARGETS)), help="targets of the replays")
    ap.add_argument("--real-targets", default="0.95", help="targets of the real runs")
    ap.add_argument("--llm-answers", type=Path, help="save the LLM-only answers here; read them if the file exists")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--memory", type=int, help="only measure the peak memory of a cascade over this many rows")
    ap.add_argument("--kept", default="", help="a filter's kept-row targets to replay: recall, precision, both "
                    "(comma-separated; '' for none)")
    ap.add_argument("--real-kept", default="", help="the same, as real runs (seeds of --real)")
    ap.add_argument("--recall", type=float, default=0.9, help="cascade_recall of --kept / --real-kept")
    ap.add_argument("--precision", type=float, default=0.9, help="cascade_precision of --kept / --real-kept")
    ap.add_argument("--failure", type=float, default=0.05, help="cascade_failure of --kept / --real-kept")
    ap.add_argument("--llm-rate", type=float, default=28.76,
                    help="with --task beer_truth: the LLM rows/s the replays' times are estimated at (default: the "
                         "beer filter's LLM-only rate measured on 6 Dec, bf16, Intel Xeon 2 CPUs)")
    ap.add_argument("--rate-rows", type=int, default=0,
                    help="also time the LLM alone on the table's first N rows in this run (its rows/s beside the "
                         "real runs, when the LLM-only answers were read from an earlier run)")
    args = ap.parse_args()
    if args.memory:
        memory(args.memory)
        return

    from relserve import Engine

    task = TASKS[args.task]
    if "answers_from" in task and seeds_of(args.real):
        ap.error(f"--task {args.task} takes its LLM answers from another call: replays only (--real '')")
    texts = reviews(args.rows, beer=task["beer"], rare=task.get("rare"))
    saved = args.llm_answers is not None and args.llm_answers.exists()
    # the engine only when something runs on it (replays of saved answers or of the truth need none)
    engine = Engine() if (not saved and task.get("answers_from") != "truth") or seeds_of(args.real) else None
    try:
        if saved:
            llm = json.loads(args.llm_answers.read_text())
            assert len(llm["values"]) == args.rows, "the saved LLM-only answers are of another table"
            print(f"LLM-only answers read from {args.llm_answers} (measured in an earlier run)")
        elif task.get("answers_from") == "truth":
            llm = truth_answers(texts, args.llm_rate)
            print(f"answers: the truth, {sum(llm['values']):,} beer reviews; times estimated at {args.llm_rate} "
                  "LLM rows/s (--llm-rate)")
        else:
            llm = run_llm_only(engine, task, texts)
            if args.llm_answers:
                args.llm_answers.parent.mkdir(parents=True, exist_ok=True)
                args.llm_answers.write_text(json.dumps(llm))
        print(f"LLM-only: {args.rows / llm['seconds']:.2f} rows/s ({llm['seconds']:.0f} s)", flush=True)
        targets = [float(t) for t in args.targets.split(",") if t]
        kept = Targets(args.recall, args.precision, args.failure)
        rate = None
        if args.rate_rows:
            part = run_llm_only(engine, task, texts[: args.rate_rows])
            rate = args.rate_rows / part["seconds"]
            print(f"LLM-only on the first {args.rate_rows:,} rows in this run: {rate:.2f} rows/s "
                  f"({part['seconds']:.0f} s)", flush=True)
        runs, kept_runs = [], []
        for seed in seeds_of(args.real):
            for target in (float(t) for t in args.real_targets.split(",")):
                r = run_cascade(engine, task, texts, target, seed, llm["values"])
                runs.append(r)
                rep = r["report"]
                print(f"target {target:g} seed {seed}: {r['seconds']:.0f} s ({llm['seconds'] / r['seconds']:.2f}x), "
                      f"proxy rows {rep['proxy_rows']:,}, measured {r['agreement']:.2%}, stated "
                      f"{rep['agreement_low']}-{rep['agreement_high']}", flush=True)
                print(breakdown(rep, r["seconds"]), flush=True)
            for mode in filter(None, args.real_kept.split(",")):
                r = run_kept(engine, task, texts, mode, KEPT_MODES[mode](kept), seed, llm["values"])
                kept_runs.append(r)
                print(f"{mode} seed {seed}: {r['seconds']:.0f} s ({llm['seconds'] / r['seconds']:.2f}x), recall "
                      f"{r['recall']:.2%}, precision {r['precision']:.2%}, LLM rows {r['report']['llm_rows']:,}", flush=True)
                print(breakdown(r["report"], r["seconds"]), flush=True)
    finally:
        if engine is not None:
            engine.close()
    replays, kept_replays, embed_s = [], [], None
    if seeds_of(args.replay):
        embedder = TableEmbedder(embedding_texts(task, texts))
        embed_s = embedder.seconds
        print(f"embedding the table: {embed_s:.0f} s ({args.rows / embed_s:.0f} rows/s)", flush=True)
        kept_replays = []
        for seed in seeds_of(args.replay):
            for target in targets:
                replays.append(replay(task, texts, target, seed, llm["values"], embedder, args.rows / llm["seconds"]))
            for mode in filter(None, args.kept.split(",")):
                kept_replays.append(replay_kept(task, texts, mode, KEPT_MODES[mode](kept), seed, llm["values"],
                                                embedder, args.rows / llm["seconds"]))
    text = summary(llm, runs, args.rows) if runs else f"LLM-only: {args.rows / llm['seconds']:.2f} rows/s"
    if rate is not None:
        text += (f"\nLLM-only measured in this run on the first {args.rate_rows:,} rows: {rate:.2f} rows/s "
                 f"({args.rows / rate:.0f} s for {args.rows:,} rows at that rate)")
    if kept_runs:
        text += "\n\n" + kept_real_summary(llm, kept_runs, args.rows, rate)
    if replays:
        text += "\n\n" + replay_summary(llm, replays, args.rows, embed_s)
    if kept_replays:
        text += "\n\n" + kept_summary(llm, kept_replays, args.rows, embed_s)
    print(text)
    out = args.out or ROOT / "bench" / "out" / f"cascade_{args.task}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"task": args.task, "rows": args.rows, "llm_only_seconds": llm["seconds"],
                               "llm_rate_rows": args.rate_rows, "llm_rate": rate, "runs": runs, "kept_runs": kept_runs,
                               "replays": replays, "kept_replays": kept_replays,
                               "embed_seconds": embed_s, "summary": text}, indent=1))


if __name__ == "__main__":
    main()
