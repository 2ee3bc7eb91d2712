"""Scoring layouts tried offline by bench/quality_offline.py (issue 22).

Each layout takes a task of bench_quality.py, its rows and labels and returns the prompts (one per
row) and per label the surface forms scored after the prompt. Every layout is built from the
task's template by the same generic rules relserve would apply; nothing is written per task.
"""

from __future__ import annotations

from relserve.functions import make_call
from relserve.labels.answer_fields import CANDIDATES
from relserve.prompt_rendering import Renderer


def pieces(task: dict, row: dict) -> tuple[str, str]:
    """(head, question): the row's long values as "Name: value" lines, and the question, as
    relserve's completion shape lays them out."""
    call = make_call(task["fn"], task["template"], labels=task["labels"] if task["fn"] == "llm_classify" else None,
                     prompt_shape="completion")
    return Renderer(call).shaped.parts(tuple(row[c] for c in call.template.columns))


def forms_of(labels, space=" "):
    return [[space + lab, space + lab[:1].upper() + lab[1:]] for lab in labels]


def _each(task, rows, labels, layout):
    """Every row's prompt as ``layout(head, question)``, the labels after a space."""
    return [layout(*pieces(task, r)) for r in rows], forms_of(labels)


def current(task, rows, labels):
    return _each(task, rows, labels, lambda head, q: head + q + "\nAnswer:")


def question_first(task, rows, labels):
    return _each(task, rows, labels, lambda head, q: q + "\n" + head + "Answer:")


def qa_fields(task, rows, labels):
    return _each(task, rows, labels, lambda head, q: head + "Question: " + q + "\nAnswer:")


def q_head_qa(task, rows, labels):
    return _each(task, rows, labels, lambda head, q: "Question: " + q + "\n" + head + "Answer:")


def label_line(task, rows, labels):
    opts = "yes or no" if labels == ["yes", "no"] else ", ".join(labels[:-1]) + " or " + labels[-1]
    prompts = []
    for r in rows:
        head, q = pieces(task, r)
        prompts.append(head + q + f" ({opts})\nAnswer:")
    return prompts, forms_of(labels)


def _demo(task, row, label, base=None, labels=None):
    if base is not None:
        return base(task, [row], labels or [label])[0][0] + " " + label + "\n\n"
    head, q = pieces(task, row)
    return head + q + "\nAnswer: " + label + "\n\n"


def _self_examples(task, rows, labels, score, per_label, pick, sample=None, base=None, start=0, max_chars=None):
    """Two passes: score every row in the current layout, batch-calibrate, take ``per_label``
    rows per label (``pick``: the most confident, or the first rows of each pseudo-label) as
    examples in front of every row, score again. The first pass scores ``sample`` rows from
    ``start`` (all rows when ``sample`` is None)."""
    import random

    prompts, forms = (base or current)(task, rows, labels)
    # the rows of the first pass: ``sample`` of them from ``start``, wrapping round
    first = [(start + k) % len(prompts) for k in range(sample or len(prompts))]
    s = score([prompts[r] for r in first], forms)
    n = len(labels)
    long_ok = max_chars is None
    means = [sum(x[j] for x in s) / len(s) for j in range(n)]
    cal = [[x[j] - means[j] for j in range(n)] for x in s]
    best = [max(range(n), key=lambda j: c[j]) for c in cal]
    demos = []
    for j in range(n):
        # relserve leaves out a prompt longer than MAX_EXAMPLE_CHARS (max_chars here)
        mine = [i for i in range(len(s)) if best[i] == j and (long_ok or len(prompts[first[i]]) <= max_chars)]
        if pick in ("confident", "second", "median"):
            mine.sort(key=lambda i: -(cal[i][j] - max(c for k, c in enumerate(cal[i]) if k != j)))
        if pick == "second":  # the next surest: less extreme than the surest
            mine = mine[1:] or mine
        elif pick == "median":  # a typical row of the label, not its most extreme
            mine = mine[len(mine) // 2:] or mine
        demos += [(i, j) for i in mine[:per_label]]
    random.Random(0).shuffle(demos)
    prefix = "".join(_demo(task, rows[first[i]], labels[j], base, labels) for i, j in demos)
    return [prefix + p for p in prompts], forms


def random_labels(task, rows, labels, score):
    """One pass: the first 2 rows per label shown with labels given round-robin (not checked)."""
    prompts, forms = current(task, rows, labels)
    k = 2 * len(labels)
    prefix = "".join(_demo(task, rows[i], labels[i % len(labels)]) for i in range(k))
    return [prefix + p for p in prompts], forms


def reference_sentiment(task, rows, labels):
    """Reference only, not generic: the issue's measured shape, "Review: <text>\\nSentiment:"."""
    return _each(task, rows, labels, lambda head, q: head + "Sentiment:")


def no_question(task, rows, labels):
    """Reference: the row and the answer field, no question (what the values alone suggest)."""
    return _each(task, rows, labels, lambda head, q: head + "Answer:")


def _labels_field(labels):
    """An answer field named by the labels themselves ("Positive or negative:"), generic where
    the issue's "Sentiment:" needs to know what the labels are about."""
    words = list(labels)
    name = ", ".join(words[:-1]) + " or " + words[-1]
    return name[:1].upper() + name[1:] + ":"


def labels_field(task, rows, labels):
    """The row, then the labels as the answer field; no question."""
    return _each(task, rows, labels, lambda head, q: head + _labels_field(labels))


def q_labels_field(task, rows, labels):
    """completion with the labels as the answer field."""
    return _each(task, rows, labels, lambda head, q: head + q + "\n" + _labels_field(labels))


def qq_labels_field(task, rows, labels):
    """relserve's question_first with the labels as the answer field."""
    return _each(task, rows, labels, lambda head, q: "Question: " + q + "\n" + head + _labels_field(labels))


def _two_pass(per_label, pick, sample=None, base=None):
    """A two-pass layout (``_self_examples``) with these settings."""
    def run(task, rows, labels, score):
        return _self_examples(task, rows, labels, score, per_label, pick, sample, base)
    return run


LAYOUTS = {f.__name__: f for f in (current, question_first, qa_fields, q_head_qa, label_line, reference_sentiment,
                                    no_question, labels_field, q_labels_field, qq_labels_field)}
#: name -> examples per label, how they are picked, first-pass rows (None: all), base layout
#: (None: ``current``); "self1_s32" is what relserve's bootstrap does under the completion shape,
#: "self1_qaf" what it does for a 2-label classify (question first, "Question:" as a field)
TWO_PASS = {
    "self_confident2": _two_pass(2, "confident"),
    "self_confident4": _two_pass(4, "confident"),
    "self2_s16": _two_pass(2, "confident", 16),
    "self2_s32": _two_pass(2, "confident", 32),
    "self1": _two_pass(1, "confident"),
    "self1_s32": _two_pass(1, "confident", 32),
    "self1_qf": _two_pass(1, "confident", 32, question_first),
    "self1_qaf": _two_pass(1, "confident", 32, q_head_qa),
    "self1_qf_s64": _two_pass(1, "confident", 64, question_first),
    "self2_qf": _two_pass(2, "confident", 32, question_first),
    "self1_qf_second": _two_pass(1, "second", 32, question_first),
    "self1_qf_median": _two_pass(1, "median", 32, question_first),
    # reference only: the "Sentiment:" field, to tell what this model reaches on a table
    "self1_reference": _two_pass(1, "confident", 32, reference_sentiment),
    "self1_labels_field": _two_pass(1, "confident", 32, labels_field),
    "self1_q_labels_field": _two_pass(1, "confident", 32, q_labels_field),
    "self1_qq_labels_field": _two_pass(1, "confident", 32, qq_labels_field),
    "random_labels": random_labels,
}


#: generic names of what a label can be about, fixed before any was measured (relserve's own
#: list); the auto-field layouts pick one per template by how likely the model is to say the
#: labels after it
FIELDS = CANDIDATES


def _question_words(task):
    """Capitalised words of four letters or more of the template's question (a generic source of
    field names: "Which department ... sells this product?" names its own field)."""
    import re
    _, q = pieces(task, {c: "N/A" for c in task["columns"]})
    return tuple(dict.fromkeys(w[:1].upper() + w[1:].lower() for w in re.findall(r"[A-Za-z]{4,}", q)))


def _pick_field(task, rows, labels, score, with_question, sample, candidates, completion=False):
    """The candidate field after which the labels are likeliest: content-free (a row of "N/A")
    when ``sample`` is 0, else the mean over the first ``sample`` rows."""
    import math

    src = [{c: "N/A" for c in task["columns"]}] if not sample else rows[:sample]
    best, best_mass = None, -math.inf
    for f in candidates:
        prompts = [(head + q + "\n" + f + ":") if completion else
                   ((("Question: " + q + "\n") if with_question else "") + head + f + ":")
                   for head, q in (pieces(task, r) for r in src)]
        s = score(prompts, forms_of(labels), raw=True)
        mass = sum(math.log(sum(math.exp(v) for v in x)) for x in s) / len(s)
        if mass > best_mass:
            best, best_mass = f, mass
    print(f"    field for {task['name']}: {best}", flush=True)
    return best


def _auto_field(with_question, sample, question_words=False, examples=False, per_label=1, start=0, max_chars=None,
                completion=False):
    def run(task, rows, labels, score):
        cands = FIELDS + (_question_words(task) if question_words else ())
        f = _pick_field(task, rows, labels, score, with_question, sample, cands, completion)
        if completion:  # relserve's completion shape (the row, the question) with the name chosen
            base = lambda t, rs, ls: _each(t, rs, ls, lambda head, q: head + q + "\n" + f + ":")  # noqa: E731
        else:
            base = lambda t, rs, ls: _each(t, rs, ls, lambda head, q: (("Question: " + q + "\n") if with_question else "")  # noqa: E731
                                           + head + f + ":")
        if examples:
            return _self_examples(task, rows, labels, score, per_label, "confident", 32, base, start, max_chars)
        return base(task, rows, labels)
    return run


TWO_PASS.update({
    "field_cf": _auto_field(False, 0),
    "qfield_cf": _auto_field(True, 0),
    "field_rows": _auto_field(False, 16),
    "qfield_rows": _auto_field(True, 16),
    "field_cf_words": _auto_field(False, 0, True),
    "field_rows_words": _auto_field(False, 16, True),
    "self1_field_cf": _auto_field(False, 0, examples=True),
    "self1_qfield_cf": _auto_field(True, 0, examples=True),
    # the same with the first pass over other rows of the table (how much the examples' choice moves it)
    **{f"self{k}_qfield_cf_at{start}": _auto_field(True, 0, examples=True, per_label=k, start=start)
       for k in (1, 2) for start in (32, 64, 96, 128)},
    # the completion shape (3+ labels, filters) after the name chosen
    "self1_cfield_cf": _auto_field(False, 0, examples=True, completion=True),
    # as relserve chooses: no example over label_bootstrap.MAX_EXAMPLE_CHARS
    "self1_qfield_cf_short": _auto_field(True, 0, examples=True, max_chars=1000),
    **{f"self1_qfield_cf_short_at{start}": _auto_field(True, 0, examples=True, start=start, max_chars=1000)
       for start in (32, 64)},
})
