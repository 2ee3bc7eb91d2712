"""Answer-quality benchmark: are llm_filter / llm_classify answers right, per prompt shape x method?

Labelled tasks over the tables in ../shared/datasets plus the project's demo table, each run
through DuckDB as a user writes them (``relserve.duckdb.sql``, the SQL is below), per label
method (``method :=``: generate / score / calibrate / batch / bootstrap; ``default`` names none,
which is adaptive for a filter or a 2-label classify, bootstrap for more labels; ``adaptive/-``
names it) and scoring prompt shape (``prompt_shape :=``: chat / chat_answer / completion /
question_first), side by side in one run. Two groups of tasks, kept apart (issue 22):

TUNING (the defaults were chosen on these, and only these):
  rt_classify   llm_classify rotten_tomatoes ['fresh', 'rotten'] vs review_type
  rt_sentiment  llm_classify rotten_tomatoes ['positive', 'negative'] vs review_type
  rt_filter     llm_filter   rotten_tomatoes "is this review positive?" vs review_type
  beer_family   llm_classify beer_reviews review text -> ['lager', 'pale ale', 'stout', 'wheat beer']
                             (style family from the style column; 4 labels, one of two tokens)
CHECK-ONLY (never looked at while choosing; they check the defaults):
  demo          llm_filter   datasets/demo_reviews.csv, column ``happy`` (24 rows, 12 yes)
  am_sentiment  llm_classify amazon_reviews ['positive', 'negative'] vs rating (1-2 / 4-5)
  am_filter     llm_filter   amazon_reviews "is the reviewer satisfied?" vs rating (1-2 / 4-5)
  am_negative   llm_filter   amazon_reviews "is this review negative?" vs rating (the e2e's `complaints`)
  am_department llm_classify amazon_reviews product name -> ['arts and crafts', 'office',
                             'health and household', 'automotive'] vs category (4 labels)

Every table but the demo is balanced over its labels (seeded sample). Per (task, method, shape):
accuracy, macro-F1, the share of the most frequent answer, AUC of the first label's score
against the truth (2-label tasks; the engine's per-row label scores, read from the executor),
rows/s (wall time of the statement including the content-free probes, cold prefix cache, empty
result cache; the machine is shared, so compare rows/s within one run only).

    python bench/bench_quality.py                      # every task and config, 200 rows per task
    python bench/bench_quality.py --group tuning --configs score/chat,batch/completion
    python bench/bench_quality.py --tasks beer_family --configs default,default@mean   # label norms side by side

Results print as tables and go to bench/out/quality.json (``--report`` rebuilds the tables).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "datasets" / "demo_reviews.csv"
SHAPES = ("chat", "chat_answer", "completion", "question_first")
#: method/shape; generate decodes, so it has no scoring shape
CONFIGS = ("generate/-",) + tuple(f"{m}/{s}" for m in ("score", "calibrate", "batch", "bootstrap") for s in SHAPES)
#: labelled rows per class shown as few-shot examples in "+examples" configs (never evaluated)
SHOTS_PER_CLASS = 1
SEED = 12
#: share of a task's first class (--skew; None: as many of each class as possible)
SKEW: float | None = None
#: run each task as this many statements over contiguous ranges of its rows sorted by truth
#: (--homogeneous; None: one statement), as SQL over a table stored in blocks of one label reads it
CHUNKS: int | None = None
#: run those statements in a seeded random order (--shuffle-chunks) instead of label order
SHUFFLE_CHUNKS = False
#: (--small K) the first half of each task's rows as one statement (the call's history, not
#: scored), then the second half as statements of K rows, the only ones scored; with --cold
#: (SMALL_COLD) the history is forgotten before them: each small statement on its own
SMALL: int | None = None
SMALL_COLD = False
#: (--statements K) each task's rows as K statements over contiguous ranges of its (shuffled,
#: balanced) rows, each scored; with --cold each statement forgets the examples, label means and
#: answer fields of the ones before, so every statement chooses its own (K samples of what one
#: statement of that size gets)
STATEMENTS: int | None = None


def balanced(df, column: str, rows: int, classes: list):
    """``rows`` rows, as many of each class as possible (seeded, then shuffled), and apart from
    them ``SHOTS_PER_CLASS`` rows of each class for the few-shot examples. With ``SKEW`` the first
    class (a filter's "yes") is that share of the rows and the others split the rest: a column
    where one label is rare, as most filters select."""
    import polars as pl

    if SKEW is None:
        counts = [rows // len(classes)] * len(classes)
    else:
        first = max(1, round(rows * SKEW))
        counts = [first] + [(rows - first) // (len(classes) - 1)] * (len(classes) - 1)
    picked = [df.filter(pl.col(column) == c).sample(n + SHOTS_PER_CLASS, seed=SEED, shuffle=True)
              for c, n in zip(classes, counts)]
    rows_ = pl.concat([p.head(n) for p, n in zip(picked, counts)]).sample(fraction=1.0, seed=SEED, shuffle=True)
    shots = pl.concat([p.tail(SHOTS_PER_CLASS) for p in picked])
    return rows_, shots


def beer_family(style: str) -> str | None:
    s = style.lower()
    if "stout" in s or "porter" in s:
        return "stout"
    if any(w in s for w in ("wheat", "weiss", "witbier", "weizen")):
        return "wheat beer"
    if "ipa" in s or "pale ale" in s or "bitter" in s:
        return "pale ale"
    if any(w in s for w in ("lager", "pils", "helles", "bock", "rzen", "dunkel")):
        return "lager"
    return None


def department(category: str) -> str | None:
    for prefix, label in (("Arts", "arts and crafts"), ("Office", "office"), ("Health", "health and household"),
                          ("Automotive", "automotive")):
        if category.startswith(prefix):
            return label
    return None


def tasks(rows: int) -> list[dict]:
    import polars as pl

    from relserve.workloads import load_table

    def shots(df, answer):
        return [{**{k: v for k, v in r.items() if k != "truth"}, "answer": answer(r["truth"])} for r in df.to_dicts()]

    demo = pl.read_csv(DEMO).rename({"happy": "truth"}).select("product", "review", "truth")
    rt = load_table("rotten_tomatoes").filter(pl.col("review_content").str.len_chars() > 0)
    rt = rt.select(pl.col("review_content").alias("review"), pl.col("review_type").alias("truth"))
    rt, rt_shots = balanced(rt, "truth", rows, ["fresh", "rotten"])
    fresh = {"fresh": "positive", "rotten": "negative"}
    rt_pn, rt_pn_shots = (d.with_columns(pl.col("truth").replace_strict(fresh)) for d in (rt, rt_shots))
    beer = load_table("beer_reviews").filter(pl.col("review_text").str.len_chars() > 0)
    beer = beer.with_columns(pl.col("style").map_elements(beer_family, return_dtype=pl.Utf8).alias("truth"))
    beer, beer_shots = balanced(beer.filter(pl.col("truth").is_not_null()), "truth", rows,
                                ["lager", "pale ale", "stout", "wheat beer"])
    beer, beer_shots = beer.select(pl.col("review_text").alias("review"), "truth"), beer_shots.select(pl.col("review_text").alias("review"), "truth")
    am = load_table("amazon_reviews").filter(pl.col("text").str.len_chars() > 0)
    sent = am.filter(pl.col("rating") != 3).with_columns(
        pl.when(pl.col("rating") >= 4).then(pl.lit("positive")).otherwise(pl.lit("negative")).alias("truth"))
    sent, sent_shots = balanced(sent, "truth", rows, ["positive", "negative"])
    sent, sent_shots = sent.select("title", "text", "truth"), sent_shots.select("title", "text", "truth")
    dep = am.with_columns(pl.col("category").map_elements(department, return_dtype=pl.Utf8).alias("truth"))
    dep = dep.filter(pl.col("truth").is_not_null()).unique("name", keep="first", maintain_order=True)
    deps = ["arts and crafts", "office", "health and household", "automotive"]
    dep, dep_shots = balanced(dep, "truth", rows, deps)
    dep, dep_shots = dep.select("name", "truth"), dep_shots.select("name", "truth")
    yes_no = lambda yes: (lambda v: yes[0] if v else yes[1] if v is not None else None)  # noqa: E731
    return [
        dict(
            name="rt_classify", group="tuning", table=rt, labels=["fresh", "rotten"], fn="llm_classify",
            template="Is this movie review fresh (positive) or rotten (negative)? Review: {review}", columns=["review"],
            answer=lambda v: v, examples=shots(rt_shots, str),
        ),
        dict(
            # the rt table with the labels the issue's own measurement scored (" positive"/" negative")
            name="rt_sentiment", group="tuning", table=rt_pn, labels=["positive", "negative"], fn="llm_classify",
            template="Is this movie review positive or negative? Review: {review}", columns=["review"],
            answer=lambda v: v, examples=shots(rt_pn_shots, str),
        ),
        dict(
            name="rt_filter", group="tuning", table=rt, labels=["fresh", "rotten"], fn="llm_filter",
            template="Is this movie review positive? Review: {review}", columns=["review"],
            answer=yes_no(["fresh", "rotten"]), examples=shots(rt_shots, lambda t: t == "fresh"),
        ),
        dict(
            name="beer_family", group="tuning", table=beer, labels=["lager", "pale ale", "stout", "wheat beer"],
            fn="llm_classify", template="Which kind of beer is this review about? Review: {review}", columns=["review"],
            answer=lambda v: v, examples=shots(beer_shots, str),
        ),
        dict(
            name="demo", group="check", table=demo, labels=["yes", "no"], fn="llm_filter",
            template="Is this customer happy with their {product}? Review: {review}", columns=["product", "review"],
            answer=yes_no(["yes", "no"]),
            # written for this benchmark, not rows of the table
            examples=[dict(product="toaster", review="Toasts evenly and looks great on the counter.", answer=True),
                      dict(product="toaster", review="Burnt every slice and the lever broke.", answer=False)],
        ),
        dict(
            name="am_sentiment", group="check", table=sent, labels=["positive", "negative"], fn="llm_classify",
            template="Is this product review positive or negative? Title: {title}. Review: {text}", columns=["title", "text"],
            answer=lambda v: v, examples=shots(sent_shots, str),
        ),
        dict(
            name="am_filter", group="check", table=sent, labels=["positive", "negative"], fn="llm_filter",
            template="Is the reviewer satisfied with the product? Title: {title}. Review: {text}", columns=["title", "text"],
            answer=yes_no(["positive", "negative"]), examples=shots(sent_shots, lambda t: t == "positive"),
        ),
        dict(
            # the end-to-end workload's `complaints` filter, word for word (a question whose "yes" is
            # the unhappy reviews; docs/benchmarks.md found its answers near chance there)
            name="am_negative", group="check", table=sent, labels=["negative", "positive"], fn="llm_filter",
            template="Is this product review negative? Review: {text}", columns=["text"],
            answer=yes_no(["negative", "positive"]), examples=shots(sent_shots, lambda t: t == "negative"),
        ),
        dict(
            name="am_department", group="check", table=dep, labels=deps, fn="llm_classify",
            template="Which department of a store sells this product? Product: {name}", columns=["name"],
            answer=lambda v: v, examples=shots(dep_shots, str),
        ),
    ]


def prevalence_task_dicts(rows: int) -> list[dict]:
    """The natural-prevalence filters of bench/prevalence_tasks.py (5-25% true rows), in this
    benchmark's task form; their groups (tuning / check) are kept apart as the balanced ones'."""
    import polars as pl

    sys.path.insert(0, str(ROOT / "bench"))
    from prevalence_tasks import prevalence_tasks

    from relserve.template import Template

    out = []
    for t in prevalence_tasks(rows):
        cols = list(Template.parse(t.template).columns)
        table = pl.DataFrame({**{c: [v[i] for v in t.values] for i, c in enumerate(cols)},
                              "truth": ["yes" if x else "no" for x in t.truth]})
        out.append(dict(name=t.name, group=t.group, table=table, labels=["yes", "no"], fn="llm_filter",
                        template=t.template, columns=cols, examples=[],
                        answer=lambda v: "yes" if v else "no" if v is not None else None, prevalence=True))
    return out


def filter_metrics(pairs: list[tuple[str | None, str]]) -> dict:
    """A filter's precision, recall and F1 on the "yes" rows, and how many it kept per true row."""
    kept = sum(a == "yes" for a, _ in pairs)
    true = sum(t == "yes" for _, t in pairs)
    tp = sum(a == "yes" and t == "yes" for a, t in pairs)
    precision = tp / kept if kept else 0.0
    recall = tp / true if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    return dict(kept=kept, true=true, precision=precision, recall=recall, f1=f1, kept_per_true=kept / true if true else None)


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


def parse_config(config: str) -> tuple[str, str | None, bool]:
    """"batch/completion+examples" -> ("batch", "completion", True); "default" -> the defaults."""
    body, _, extra = config.partition("+")
    method, _, shape = body.partition("/")
    return method, (shape if shape not in ("", "-") else None), extra == "examples"


def statement(task: dict, config: str) -> str:
    """The SQL a user writes for this task under ``config`` (method/shape[+examples])."""
    method, shape, examples = parse_config(config)
    opts = []
    if method != "default":
        opts.append(f"method := '{method}'")
    if shape:
        opts.append(f"prompt_shape := '{shape}'")
    if examples:
        opts.append(f"examples := {sql_literal(task['examples'])}")
    args = [sql_literal(task["template"])]
    if task["fn"] == "llm_classify":
        args.append(sql_literal(task["labels"]))
    args += task["columns"]
    if opts:
        args.append("llm_options(" + ", ".join(opts) + ")")
    return f"SELECT truth, {task['fn']}({', '.join(args)}) AS answer FROM t"


def macro_f1(pairs: list[tuple[str | None, str]], labels: list[str]) -> float:
    f1s = []
    for c in labels:
        tp = sum(a == c and t == c for a, t in pairs)
        fp = sum(a == c and t != c for a, t in pairs)
        fn = sum(a != c and t == c for a, t in pairs)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1s) / len(f1s)


def auc(scores: list[float], positive: list[bool]) -> float | None:
    """Area under the ROC curve (ties count one half)."""
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


class ScoreTap:
    """Reads the engine's per-row label scores as the shared executor answers them (for AUC)."""

    def __init__(self) -> None:
        from relserve.planner import executor

        self.scores: dict[str, dict[str, float]] = {}
        self.confidence: dict[str, float] = {}
        self._orig = executor.CallExecutor._answer_one
        tap = self

        def _answer_one(ex, row):
            if row.label_logprobs is not None:
                tap.scores[ex.rows.prompts[row.index]] = dict(row.label_logprobs)
                if row.confidence is not None:
                    tap.confidence[ex.rows.prompts[row.index]] = row.confidence
            return tap._orig(ex, row)

        executor.CallExecutor._answer_one = _answer_one


def run_one(engine, task: dict, config: str, tap: ScoreTap) -> dict:
    import duckdb

    config, _, scoring = config.partition("@")
    method, shape, examples = parse_config(config)
    con = duckdb.connect()
    sql = statement(task, config)
    with label_scoring_as(scoring):
        return _run_one(engine, task, config, tap, con, sql, method, shape, examples, scoring)


@contextlib.contextmanager
def label_scoring_as(norm: str):
    """A config's part after "@" (e.g. "default@mean"): the label norm of that one statement
    (label_scoring.LABEL_NORM), so two norms compare in one run on one engine; empty: the default."""
    from relserve.engine import label_scoring

    saved = label_scoring.LABEL_NORM
    if norm and norm not in label_scoring.LABEL_NORMS:
        raise SystemExit(f"unknown label norm {norm!r}: one of {', '.join(label_scoring.LABEL_NORMS)}")
    label_scoring.LABEL_NORM = norm or saved
    try:
        yield
    finally:
        label_scoring.LABEL_NORM = saved


def _run_one(engine, task, config, tap, con, sql, method, shape, examples, scoring) -> dict:
    import relserve.duckdb
    from relserve.functions import make_call
    from relserve.labels.bootstrap import follows_method, in_examples_shape
    from relserve.labels.memory import LabelMemory, use_memory

    def forget() -> None:
        # a label memory of the statement's own: every statement makes its call's plan
        use_memory(LabelMemory())
    from relserve.planner.cache import ResultCache
    from relserve.prompt_rendering import Renderer

    with tempfile.TemporaryDirectory() as tmp:
        # an empty result cache: every row runs on the engine
        relserve.duckdb.install(con, engine=engine, cache=ResultCache(Path(tmp) / "r.sqlite"), progress=False)
        con.register("t_arrow", task["table"].to_arrow())
        if SMALL:
            con.execute("CREATE TABLE t AS SELECT row_number() OVER () AS rid, * FROM t_arrow")
        elif STATEMENTS:
            con.execute("CREATE TABLE t AS SELECT row_number() OVER () AS rid, * FROM t_arrow")
        elif CHUNKS:
            # rid: the rows sorted by truth, read in contiguous ranges
            con.execute("CREATE TABLE t0 AS SELECT row_number() OVER () AS i, * FROM t_arrow")
            con.execute("CREATE TABLE t AS SELECT row_number() OVER (ORDER BY truth, i) AS rid, * FROM t0")
        else:
            con.execute("CREATE TABLE t AS SELECT * FROM t_arrow")
        engine.reset_prefix_cache()
        # every statement chooses its own bootstrapped examples (the first pass is measured); the
        # chunks of one --homogeneous task are one template's relQueries, so they share them
        forget()
        tap.scores.clear()
        n_rows = len(task["table"])
        parts = CHUNKS or STATEMENTS
        ranges = [f" WHERE rid > {n_rows * k // parts} AND rid <= {n_rows * (k + 1) // parts}" for k in range(parts)] if parts else [""]
        if SHUFFLE_CHUNKS:
            random.Random(SEED).shuffle(ranges)
        t0 = time.monotonic()
        out = []
        if SMALL:
            half = n_rows // 2
            relserve.duckdb.sql(con, sql + f" WHERE rid <= {half}").fetchall()
            if SMALL_COLD:
                forget()
            ranges = [f" WHERE rid > {lo} AND rid <= {min(lo + SMALL, n_rows)}" for lo in range(half, n_rows, SMALL)]
            t0 = time.monotonic()
        per_statement = []
        for where in ranges:
            if STATEMENTS and SMALL_COLD:
                forget()
            got = relserve.duckdb.sql(con, sql + where).fetchall()
            per_statement.append(sum(task["answer"](v) == str(t) for t, v in got) / max(len(got), 1))
            out += got
        seconds = time.monotonic() - t0
    pairs = [(task["answer"](v), str(t)) for t, v in out]
    n = len(pairs)
    dist = Counter(a if a is not None else "NULL" for a, _ in pairs)
    res = dict(
        task=task["name"], group=task["group"], config=config + (f"@{scoring}" if scoring else ""), sql=sql, rows=n,
        accuracy=sum(a == t for a, t in pairs) / n,
        macro_f1=macro_f1(pairs, task["labels"]),
        answers=dict(dist.most_common()),
        top_share=dist.most_common(1)[0][1] / n,
        rows_per_s=n / seconds, seconds=seconds,
    )
    if len(per_statement) > 1:
        res["per_statement"] = per_statement
    if task["fn"] == "llm_filter":
        res.update(filter_metrics(pairs))
    if tap.scores:
        # every row's label scores (as the engine scored them, before any correction) with its
        # truth, its prompt rendered again: for the AUC and for comparing pick rules (--offline)
        opts = {"method": None if method == "default" else method, "prompt_shape": shape}
        if examples:
            opts["examples"] = task["examples"]
        call = make_call(task["fn"], task["template"], labels=task["labels"] if task["fn"] == "llm_classify" else None, **opts)
        # in each layout the planner may pick for the call (label_bootstrap.shaped_for)
        renders = [Renderer(call)]
        if follows_method(call):
            renders.append(Renderer(in_examples_shape(call)))
        scored_rows = task["table"].to_dicts()
        if SMALL:  # the first half is the call's history, not scored
            scored_rows = scored_rows[len(scored_rows) // 2:]

        def scores_of(values: tuple):
            return next((tap.scores[p] for p in (r(values) for r in renders) if p in tap.scores), None)

        keyed = [(scores_of(tuple(r[c] for c in task["columns"])), r["truth"]) for r in scored_rows]
        res["scores"] = [[s, t] for s, t in keyed if s is not None]
        # a cold statement's example rows are answered by their first-pass label, with no score
        # of their own (relserve/labels/bootstrap.py, ``Examples.answered``): the AUC is
        # over the rows the engine scored, if they are at least nine in ten
        if len(task["labels"]) == 2 and len(res["scores"]) >= 0.9 * n:
            # the first label's score ranks the rows (truth: the first label); under the adaptive
            # method the scored words are the chosen layout's, whose first stands for the first label
            res["auc"] = auc([next(iter(s.values())) - list(s.values())[1] for s, _ in res["scores"]],
                             [t == task["labels"][0] for _, t in res["scores"]])
    return res


def class_means(scores: list, max_rounds: int = 50) -> dict[str, float]:
    """Each label's mean score with every answered label weighing alike (tried for skewed columns,
    not kept): start from batch calibration's means, pick, average each label's score per picked
    label and take the mean of those, until the picks stop changing. For two labels: 1-D
    two-means, the threshold halfway between the groups' mean score gaps."""
    from relserve.labels.means import label_means, pick_calibrated

    means = label_means(scores)
    picks = [pick_calibrated(s, means) for s in scores]
    for _ in range(max_rounds):
        groups = [g for g in ([s for s, p in zip(scores, picks) if p == label] for label in means) if g]
        if len(groups) < 2:
            return means
        per_group = [label_means(g) for g in groups]
        means = {label: sum(m[label] for m in per_group) / len(per_group) for label in means}
        again = [pick_calibrated(s, means) for s in scores]
        if again == picks:
            break
        picks = again
    return means


def em_means(scores: list, rounds: int = 100) -> dict[str, float]:
    """Label shares estimated by EM under label shift (Saerens et al., Neural Computation 2002;
    tried for skewed columns, not kept): the batch-calibrated scores as posteriors under equal
    shares, reweighted by the estimated shares until they settle; returned as offsets to subtract."""
    import math

    from relserve.labels.means import label_means

    means = label_means(scores)
    labels = list(means)
    post = []
    for s in scores:
        z = math.log(sum(math.exp(s[lab] - means[lab]) for lab in labels))
        post.append({lab: math.exp(s[lab] - means[lab] - z) for lab in labels})
    share = {lab: 1 / len(labels) for lab in labels}
    for _ in range(rounds):
        weighted = [{lab: p[lab] * share[lab] for lab in labels} for p in post]
        weighted = [{lab: w[lab] / sum(w.values()) for lab in labels} for w in weighted]
        share = {lab: sum(w[lab] for w in weighted) / len(weighted) for lab in labels}
    return {lab: means[lab] - math.log(max(share[lab], 1e-12)) for lab in labels}


RULES = ("raw", "mean", "class", "em", "spread")


def _picks_scored(task: dict, rows: list, rule: str) -> list[tuple[str, str]]:
    """(answer as the task's label, truth) of every stored row under one pick rule: ``raw`` (the
    model's best label), ``mean`` (batch calibration, relserve's), ``class`` (``class_means``),
    ``em`` (``em_means``), ``spread`` (minus the mean, over each label's standard deviation among
    the rows: batch calibration that also evens out how widely each label's scores vary; twelfth
    pass, not kept)."""
    import statistics

    from relserve.labels.means import label_means, pick_calibrated

    scores = [s for s, _ in rows]
    if rule == "spread":
        means = label_means(scores)
        sd = {lab: statistics.pstdev([s[lab] for s in scores]) or 1.0 for lab in means}
        return [(_as_answer(task, max(means, key=lambda lab: (s[lab] - means[lab]) / sd[lab])), truth) for s, truth in rows]
    if rule == "raw":
        means = {lab: 0.0 for lab in scores[0]}
    else:
        means = {"mean": label_means, "class": class_means, "em": em_means}[rule](scores)
    return [(_as_answer(task, pick_calibrated(s, means)), truth) for s, truth in rows]


def _as_answer(task: dict, label: str) -> str:
    """A picked label as the task's truth is written (a filter's "yes" is its first label)."""
    if task["fn"] != "llm_classify":
        return task["labels"][0] if label == "yes" else task["labels"][1]
    return label


def offline(results: list[dict], tasks_by_name: dict) -> str:
    """Pick rules compared on the same stored scores (every run keeps its rows' scores): the
    model's best label, batch calibration (minus each label's mean), per-label means
    (``class_means``), EM label shares (``em_means``), minus the mean over the spread. Accuracy /
    macro-F1 / share answered the first label."""
    lines = ["| task | config | truth: first label | raw | minus mean (batch) | per-label means | EM shares | over the spread |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if not r.get("scores"):
            continue
        task = tasks_by_name[r["task"]]
        first = task["labels"][0]
        truth_share = sum(t == first for _, t in r["scores"]) / len(r["scores"])
        cells = []
        for rule in RULES:
            pairs = _picks_scored(task, r["scores"], rule)
            acc = sum(a == t for a, t in pairs) / len(pairs)
            share = sum(a == first for a, _ in pairs) / len(pairs)
            cells.append(f"{acc:.1%} / {macro_f1(pairs, task['labels']):.2f} / {share:.0%}")
        lines.append(f"| {r['task']} | {r['config']} | {truth_share:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def own_means(results: list[dict], tasks_by_name: dict, sizes: list[int]) -> str:
    """Each statement corrected by its own label means, computed on stored scores: the scored
    rows cut into statements of k rows as they come ("mixed") and sorted by truth first ("one
    kind", what a ``WHERE`` over a column stored by label gives). For choosing the smallest
    relQuery whose own means beat the content-free prior (docs/quality.md, "Ninth pass")."""
    lines = ["| task | config | raw | " + " | ".join(f"k={k} mixed / one kind" for k in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]

    def accuracy(rows: list, k: int) -> float:
        pairs = []
        for lo in range(0, len(rows), k):
            chunk = rows[lo:lo + k]
            pairs += _picks_scored(tasks_by_name[r["task"]], chunk, "mean")
        return sum(a == t for a, t in pairs) / len(pairs)

    for r in results:
        if not r.get("scores"):
            continue
        task = tasks_by_name[r["task"]]
        raw = _picks_scored(task, r["scores"], "raw")
        cells = [f"{sum(a == t for a, t in raw) / len(raw):.0%}"]
        one_kind = sorted(r["scores"], key=lambda st: str(st[1]))
        cells += [f"{accuracy(r['scores'], k):.0%} / {accuracy(one_kind, k):.0%}" for k in sizes]
        lines.append(f"| {r['task']} | {r['config']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: list[dict]) -> str:
    """One markdown table per group: a row per config, a column per task."""
    out = []
    for group, title in (("tuning", "TUNING tasks (chose the defaults)"), ("check", "CHECK-ONLY tasks")):
        rs = [r for r in results if r["group"] == group]
        if not rs:
            continue
        names = list(dict.fromkeys(r["task"] for r in rs))
        configs = list(dict.fromkeys(r["config"] for r in rs))
        out.append(f"\n{title}: accuracy / macro-F1 / top answer share / AUC / rows/s (filters: / kept per true row, F1 of yes)\n")
        out.append("| config | " + " | ".join(names) + " |")
        out.append("|---|" + "---|" * len(names))
        for c in configs:
            cells = []
            for name in names:
                r = next((x for x in rs if x["task"] == name and x["config"] == c), None)
                if r is None:
                    cells.append("")
                    continue
                a = f" / {r['auc']:.2f}" if r.get("auc") is not None else ""
                k = (f" / kept {r['kept_per_true']:.2f}x, F1 {r['f1']:.2f}" if r.get("kept_per_true") is not None else "")
                cells.append(f"{r['accuracy']:.1%} / {r['macro_f1']:.2f} / {r['top_share']:.0%}{a} / {r['rows_per_s']:.1f}{k}")
            out.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200, help="rows per task (the demo table always has 24)")
    ap.add_argument("--model", default="smollm2", help="model name or folder")
    ap.add_argument("--configs", default=",".join(CONFIGS) + ",default",
                    help="comma-separated method/shape[+examples][@norm]; 'default' runs without "
                         "method/prompt_shape; '@mean' scores that config's labels by another norm")
    ap.add_argument("--group", choices=("tuning", "check", "all"), default="all")
    ap.add_argument("--prevalence", action="store_true",
                    help="add the natural-prevalence filters (5-25%% true rows, bench/prevalence_tasks.py) to the tasks")
    ap.add_argument("--tasks", default=None, help="comma-separated task names (default: the group's)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "quality.json"))
    ap.add_argument("--report", default=None, help="print the tables of a results file and exit")
    ap.add_argument("--offline", action="store_true", help="with --report: compare calibrations on the stored scores")
    ap.add_argument("--own-means", default=None, metavar="K,K",
                    help="with --report: each statement of K stored rows corrected by its own label means, mixed and of one kind")
    ap.add_argument("--skew", type=float, default=None,
                    help="share of each task's first class (a filter's yes), e.g. 0.1: a column where one label is rare")
    ap.add_argument("--homogeneous", type=int, default=None, metavar="K",
                    help="run each task as K statements over contiguous ranges of its rows sorted by label: relQueries of one kind of row")
    ap.add_argument("--shuffle-chunks", action="store_true",
                    help="with --homogeneous: the K statements in a seeded random order, not sorted by label")
    ap.add_argument("--small", type=int, default=None, metavar="K",
                    help="half of each task's rows as one statement first, then the other half as statements of K rows (only those scored)")
    ap.add_argument("--statements", type=int, default=None, metavar="K",
                    help="run each task's rows as K statements of mixed rows, each scored (--cold: each chooses its own examples)")
    ap.add_argument("--cold", action="store_true",
                    help="with --small: forget the first statement's examples and label means first; with --statements: before every statement")
    ap.add_argument("--sample-seed", type=int, default=None,
                    help="draw the natural-prevalence tasks' rows with this seed instead of "
                         "bench/prevalence_tasks.py's SEED: another sample of the same tasks")
    a = ap.parse_args()
    if a.sample_seed is not None:
        import prevalence_tasks
        prevalence_tasks.SEED = a.sample_seed
    global SKEW, CHUNKS, SHUFFLE_CHUNKS, SMALL, SMALL_COLD, STATEMENTS
    SKEW, CHUNKS, SHUFFLE_CHUNKS, SMALL, SMALL_COLD, STATEMENTS = a.skew, a.homogeneous, a.shuffle_chunks, a.small, a.cold, a.statements
    if a.report:
        results = json.loads(Path(a.report).read_text())["results"]
        print(report(results))
        if a.offline:
            print(offline(results, {t["name"]: t for t in tasks(a.rows)}))
        if a.own_means:
            print(own_means(results, {t["name"]: t for t in tasks(a.rows)}, [int(k) for k in a.own_means.split(",")]))
        return

    from relserve import Engine
    from relserve.engine import label_scoring

    all_tasks = tasks(a.rows) + (prevalence_task_dicts(a.rows) if a.prevalence else [])
    if a.group != "all":
        all_tasks = [t for t in all_tasks if t["group"] == a.group]
    if a.tasks:
        all_tasks = [t for t in all_tasks if t["name"] in a.tasks.split(",")]
    tap = ScoreTap()
    results = []
    t0 = time.monotonic()
    with Engine(model=a.model, max_num_seqs=64, kv_cache_gb=2.0) as engine:
        start = time.monotonic() - t0
        # one throw-away statement: the first scoring batch pays vLLM's warm-up, not a method
        run_one(engine, {**all_tasks[0], "table": all_tasks[0]["table"].head(4)}, "score/chat", tap)
        for task in all_tasks:
            for config in a.configs.split(","):
                r = dict(model=a.model, label_norm=label_scoring.LABEL_NORM, engine_start_s=start,
                         **run_one(engine, task, config, tap))
                results.append(r)
                # written after every statement: an interrupted run keeps what it measured
                out = Path(a.out)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(dict(argv=sys.argv[1:], rows=a.rows, skew=a.skew, homogeneous=a.homogeneous, shuffle_chunks=a.shuffle_chunks, small=a.small, statements=a.statements, cold=a.cold, label_norm=label_scoring.LABEL_NORM, results=results), indent=1))
                kept = (f" kept {r['kept']}/{r['true']} P {r['precision']:.2f} R {r['recall']:.2f} F1(yes) {r['f1']:.2f}"
                        if "kept" in r else "")
                print(
                    f"{r['group']:6s} {r['task']:16s} {config:24s} acc {r['accuracy']:6.1%} F1 {r['macro_f1']:5.3f}{kept} "
                    f"top {r['top_share']:5.1%} AUC {r.get('auc') or float('nan'):4.2f} {r['rows_per_s']:6.1f} rows/s  {r['answers']}"
                    + (f"  per statement {' '.join(f'{x:.1%}' for x in r['per_statement'])}" if "per_statement" in r else ""),
                    flush=True,
                )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(argv=sys.argv[1:], rows=a.rows, skew=a.skew, homogeneous=a.homogeneous, shuffle_chunks=a.shuffle_chunks, small=a.small, statements=a.statements, cold=a.cold, label_norm=label_scoring.LABEL_NORM, results=results), indent=1))
    print(report(results))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
