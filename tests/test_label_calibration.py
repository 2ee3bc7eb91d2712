"""Batch calibration and prompt shapes (issue 22): the pure parts, with hand-computed numbers.

The real engine's part runs in tests/test_label_scoring_engine.py.
"""

from __future__ import annotations

import math

import pytest
from engine_doubles import ScriptedEngine

from relserve.errors import ConfigError
from relserve.functions import CallOptions, make_call
from relserve.labels.means import (
    MIN_BATCH_ROWS,
    MIN_BATCH_ROWS_MANY_LABELS,
    batch_picks,
    calibrated,
    label_means,
    pick_calibrated,
)
from relserve.labels.resolution import method_ran
from relserve.planner.plan_and_run import run_call
from relserve.prompt_rendering import Renderer, render
from relserve.prompt_shapes import ANSWER_FIELD, engine_text, label_space
from relserve.relquery import RelQuery

# three rows' label scores (log-probabilities): raw picks yes, yes, no
ROWS = [
    {"yes": -0.2, "no": -1.8},
    {"yes": -0.5, "no": -0.8},
    {"yes": -1.1, "no": -0.4},
]


def test_label_means_are_each_labels_average_over_the_rows():
    # yes: (-0.2 - 0.5 - 1.1) / 3 = -0.6; no: (-1.8 - 0.8 - 0.4) / 3 = -1.0
    assert label_means(ROWS) == pytest.approx({"yes": -0.6, "no": -1.0})


def test_calibrated_scores_subtract_the_means_and_flip_a_row_the_bias_decided():
    means = label_means(ROWS)
    assert calibrated(ROWS[0], means) == pytest.approx({"yes": 0.4, "no": -0.8})
    # row 2: raw "yes" (-0.5 > -0.8), but "yes" is 0.1 above its mean and "no" 0.2 above its own
    assert calibrated(ROWS[1], means) == pytest.approx({"yes": 0.1, "no": 0.2})
    assert calibrated(ROWS[2], means) == pytest.approx({"yes": -0.5, "no": 0.6})
    assert [max(r, key=r.get) for r in ROWS] == ["yes", "yes", "no"]
    assert batch_picks(ROWS) == ["yes", "no", "no"]


def test_a_calibrated_tie_goes_to_the_models_preference_then_the_first_label():
    means = {"a": -1.0, "b": -2.0}
    assert pick_calibrated({"a": -1.5, "b": -2.5}, means) == "a"  # tie at -0.5, a scores higher
    assert pick_calibrated({"a": -1.0, "b": -1.0}, {"a": 0.0, "b": 0.0}) == "a"


def test_a_constant_per_row_does_not_change_the_picks():
    shifted = [{k: v - 3.0 * i for k, v in r.items()} for i, r in enumerate(ROWS)]
    assert batch_picks(shifted) == batch_picks(ROWS)


def test_batch_falls_back_to_the_content_free_prior_below_the_minimum_rows():
    assert MIN_BATCH_ROWS == 16
    assert method_ran("batch", 15) == "prior"
    assert method_ran("batch", 16) == "batch"
    assert method_ran("score", 2) == "score"
    assert method_ran(None, 100) is None


def test_three_labels_or_more_use_their_own_means_from_fewer_rows():
    # the content-free prior of a 4-label call gave one label to 82% of the rows; its own
    # means are better from 8 rows, even over rows of one kind (docs/notebook, "Ninth pass")
    assert MIN_BATCH_ROWS_MANY_LABELS == 8
    assert method_ran("batch", 7, labels=4) == "prior"
    assert method_ran("batch", 8, labels=4) == "batch"
    assert method_ran("batch", 8, labels=3) == "batch"
    # too few rows to choose examples from: bootstrap runs as batch
    assert method_ran("bootstrap", 8, labels=4) == "batch"
    assert method_ran("bootstrap", 15, labels=4) == "batch"
    assert method_ran("bootstrap", 16, labels=4) == "bootstrap"
    # two labels keep the prior below 16 rows (a few rows of one kind would be split in half)
    assert method_ran("batch", 15, labels=2) == "prior"
    assert method_ran("bootstrap", 15, labels=2) == "prior"
    assert method_ran("score", 3, labels=4) == "score"


def test_a_small_four_label_relquery_is_corrected_by_its_own_means_without_probes(label_memory):
    from relserve.planner.executor import CallExecutor
    from relserve.planner.plan import plan_call
    from relserve.planner.planned_rows import PlannedRows
    from relserve.results import RowResult

    labels = ["sports", "business", "world", "tech"]
    rows = [f"story {i} about {'money' if i % 2 else 'a match'}" for i in range(8)]
    call = make_call("llm_classify", "Topic of {r}, for the own-means test?", labels=labels)
    planned = plan_call(call, [rows], model_id="m", cache=None, optimize=False, memory=label_memory)
    ex = CallExecutor(PlannedRows.of(planned, None), model_id="m")
    assert ex.resolution.method == "batch" and ex.resolution.asked == "bootstrap"
    # every row prefers "sports" in the raw scores; the money rows less so, and give "business"
    # more: after each label's mean over the 8 rows is subtracted they move to "business"
    match = {"sports": math.log(0.7), "business": math.log(0.1), "world": math.log(0.1), "tech": math.log(0.1)}
    money = {"sports": math.log(0.5), "business": math.log(0.3), "world": math.log(0.1), "tech": math.log(0.1)}
    from engine_doubles import _Handle, _Result, _Stats

    class Scores(ScriptedEngine):
        def submit(self, rq, tenancy=None):
            return _Handle(_Result([RowResult(i, text="sports", label_logprobs=money if "money" in p else match,
                                              finish_reason="scored") for i, p in enumerate(rq.prompts)],
                                   _Stats(rq.rel_id, len(rq.prompts))))

    out = [r for row in ex.submit(Scores()) for r in ex.answer(row)]
    assert {r.index: r.value for r in out} == {i: "business" if i % 2 else "sports" for i in range(8)}

    eng = ScriptedEngine(answer=lambda prompt, rq: "business" if "money" in prompt else "sports")
    out = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert out.values == ["business" if i % 2 else "sports" for i in range(8)]
    # no content-free probes, no bootstrap first pass: one relQuery of raw scores, which is the
    # plan's sample and answers every row
    assert eng.probes == [] and eng.first_passes == []
    [rq] = eng.relqueries
    assert rq.score_labels and rq.label_prior is None
    ex = str(run_call(call, [rows], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert "label scores minus their means over a sample of the call's rows (the plan); asked for bootstrap)" in ex
    # a plan from 8 rows is no sample: it is kept as provisional, and the call's next small
    # relQuery decides its rows by it
    (kept,) = [p for p in label_memory.plans() if p.key.model_id == "scripted-model"]
    assert kept.plan.provisional and kept.plan.method == "batch"
    seven = str(run_call(call, [rows[:7]], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert "label plan            kept: method batch" in seven and "provisional" in seven
    # with no plan, 7 rows are too few for label means of their own: the prior method runs
    from relserve.labels.memory import LabelMemory, use_memory

    use_memory(LabelMemory())
    seven = str(run_call(call, [rows[:7]], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert "divided by the model's answer on content-free rows (the plan); asked for bootstrap)" in seven


def test_method_and_prompt_shape_options_are_checked():
    with pytest.raises(ConfigError, match="method must be one of generate, score, prior, batch, bootstrap, adaptive, got 'vote'"):
        CallOptions(method="vote")
    with pytest.raises(ConfigError, match="prompt_shape must be one of chat, chat_answer, completion, question_first, got 'json'"):
        CallOptions(prompt_shape="json")
    with pytest.raises(ConfigError, match="prompt_shape must be one of"):
        make_call("llm_filter", "Is {r} good?", prompt_shape="Chat")
    with pytest.raises(ConfigError, match="prompt_shape applies only with score_labels"):
        RelQuery("{a}", [{"a": 1}], choices=["x", "y"], prompt_shape="completion")
    call = make_call("llm_filter", "Is {r} good?")
    assert (call.label_method, call.prompt_shape) == ("adaptive", "completion")
    # decoding has no scoring layout
    assert make_call("llm_filter", "Is {r} good?", method="generate", prompt_shape="completion").prompt_shape == "chat"


def test_result_cache_key_holds_method_and_shape():
    key = lambda **kw: make_call("llm_filter", "Is {r} good?", **kw).sampling_settings()  # noqa: E731
    assert key(method="batch", prompt_shape="completion") == {
        "max_tokens": 2, "temperature": 0.0, "choices": ["yes", "no"], "json_schema": None,
        "method": "batch", "prompt_shape": "completion", "template": "Is {r} good?", "examples": None,
    }
    # chat keeps the keys of before issue 22
    assert key(method="score", prompt_shape="chat") == {
        "max_tokens": 2, "temperature": 0.0, "choices": ["yes", "no"], "json_schema": None, "method": "score",
    }
    assert key(method="score", prompt_shape="chat_answer")["prompt_shape"] == "chat_answer"
    assert "method" not in key(method="generate")


def test_completion_shape_puts_long_values_first_and_names_them_in_the_question():
    call = make_call("llm_filter", "Is this customer happy with their {product}? Review: {review}", prompt_shape="completion")
    values = ("chair", "My back pain is gone since I switched to this chair")
    # "Review: {review}" leaves the question with its field name; the short product stays
    # no "Answer yes or no." line under this shape: the engine adds the answer field after the question
    assert Renderer(call)(values) == (
        "Review: My back pain is gone since I switched to this chair\n"
        "Is this customer happy with their chair?"
    )
    # a value the template does not introduce by name is named in the question
    bare = make_call("llm_filter", "Is {review} positive?", prompt_shape="completion")
    assert Renderer(bare)((values[1],)) == (
        "Review: My back pain is gone since I switched to this chair\nIs the review above positive?"
    )
    # short values stay where they are
    assert Renderer(bare)(("N/A",)) == "Is N/A positive?"
    # the labels are not listed either
    classify = make_call("llm_classify", "Which department sells {name}?", labels=["office", "automotive"], prompt_shape="completion")
    assert Renderer(classify)(("stapler",)) == "Which department sells stapler?"
    assert render(call, values) == Renderer(call)(values)
    chat = make_call("llm_filter", "Is this customer happy with their {product}? Review: {review}", prompt_shape="chat")
    assert Renderer(chat)(values) == (
        "Is this customer happy with their chair? Review: My back pain is gone since I switched to this chair\n"
        "Answer yes or no."
    )


def test_question_first_shape_names_the_question_then_the_long_values():
    qf = dict(prompt_shape="question_first")
    call = make_call("llm_filter", "Is this customer happy with their {product}? Review: {review}", **qf)
    values = ("chair", "My back pain is gone since I switched to this chair")
    assert Renderer(call)(values) == (
        "Question: Is this customer happy with their chair?\n"
        "Review: My back pain is gone since I switched to this chair"
    )
    assert render(call, values) == Renderer(call)(values)
    bare = make_call("llm_filter", "Is {review} positive?", **qf)
    assert Renderer(bare)((values[1],)) == (
        "Question: Is the review above positive?\nReview: My back pain is gone since I switched to this chair"
    )
    # short values stay in the question, which is then the whole prompt
    assert Renderer(bare)(("N/A",)) == "Question: Is N/A positive?"
    # two moved values keep the template's order; the "." that closed the first one does not
    # stay behind the question's "?" ("Is it positive?." before)
    two = make_call("llm_classify", "Is this review positive or negative? Title: {title}. Review: {text}",
                    labels=["positive", "negative"], **qf)
    assert Renderer(two)(("A title long enough to move out of it", "A text long enough to move out of it")) == (
        "Question: Is this review positive or negative?\n"
        "Title: A title long enough to move out of it\nReview: A text long enough to move out of it"
    )
    # the engine adds the answer field on its own line
    assert engine_text(_Prompter(), Renderer(bare)(("N/A",)), None, "question_first") == "Question: Is N/A positive?\nAnswer:"
    # the completion shape drops the dangling "." too
    two_c = make_call("llm_classify", two.template.source, labels=["positive", "negative"])
    assert Renderer(two_c)(("A title long enough to move out of it", "A text long enough to move out of it")).endswith(
        "\nIs this review positive or negative?")


class _Prompter:
    def text(self, prompt, system):
        return f"<user>{prompt}<assistant>"


def test_engine_text_per_shape():
    p = _Prompter()
    assert engine_text(p, "Q?", None, "chat") == "<user>Q?<assistant>"
    assert engine_text(p, "Q?", None, "chat_answer") == "<user>Q?<assistant>" + ANSWER_FIELD
    assert engine_text(p, "Q?", None, "completion") == "Q?\nAnswer:"
    assert engine_text(p, "Q?", "Be brief.", "completion") == "Be brief.\n\nQ?\nAnswer:"
    assert [label_space(s) for s in ("chat", "chat_answer", "completion", "question_first")] == ["", " ", " ", " "]


def test_executor_picks_every_row_after_subtracting_the_batch_means():
    # the scripted engine gives its answer 0.9 and the other label 0.1 ("yes" for rows with
    # "great"): after the means are subtracted the picks stay the rows' own
    rows = [f"review {i} {'great' if i % 4 == 0 else 'bad'}" for i in range(20)]

    def answer(prompt, rq):
        return "yes" if "great" in prompt else "no"

    eng = ScriptedEngine(answer=answer)
    call = make_call("llm_filter", "Is {r} good, after the batch means?", method="batch")
    out = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert out.values == ["great" in r for r in rows]
    rq = eng.relqueries[0]
    # 20 rows: batch needs no content-free probes and asks the engine for raw scores; its plan's
    # sample is every row, and answers them
    assert rq.score_labels and rq.label_prior is None and rq.prompt_shape == "completion"
    assert eng.probes == [] and len(eng.relqueries) == 1
    # a small relQuery of a call with no plan: the content-free prior (three probes, before the rows)
    fresh = make_call("llm_filter", "Is {r} good, with no history?", method="batch")
    out = run_call(fresh, [rows[:5]], engine=eng, cache=False, progress=False)
    assert len(eng.probes) == 1 and eng.relqueries[-1].score_labels
    assert out.values == ["great" in r for r in rows[:5]]
    # the call's next small relQuery: its plan (the prior) is kept, no new probes
    out = run_call(fresh, [rows[5:10]], engine=eng, cache=False, progress=False)
    assert len(eng.probes) == 1
    assert out.values == ["great" in r for r in rows[5:10]]
    # after the 20-row relQuery, a small one of that call is decided with its kept plan (the
    # means): no probes, one relQuery of raw scores
    n = len(eng.relqueries)
    out = run_call(call, [rows[:5]], engine=eng, cache=False, progress=False)
    assert len(eng.probes) == 1 and len(eng.relqueries) == n + 1
    assert out.values == ["great" in r for r in rows[:5]]


def test_executor_batch_correction_flips_the_rows_the_bias_decided():
    from engine_doubles import _Handle, _Result, _Stats

    from relserve.planner.executor import CallExecutor
    from relserve.planner.plan import plan_call
    from relserve.planner.planned_rows import PlannedRows
    from relserve.results import RowResult

    rows = [f"r{i}" for i in range(16)]
    call = make_call("llm_filter", "Is {r} good?", method="batch")
    plan = plan_call(call, [rows], model_id="m", cache=None, optimize=False)
    ex = CallExecutor(PlannedRows.of(plan, None), model_id="m")
    assert ex.resolution.method == "batch"
    # every row prefers "no" in the raw scores; rows 0-3 less so than the others
    lps = {f"r{i}": [{"yes": math.log(0.4), "no": math.log(0.6)}] * 4 + [{"yes": math.log(0.1), "no": math.log(0.9)}] * 12
           for i in range(1)}["r0"]

    class Scores(ScriptedEngine):
        def submit(self, rq, tenancy=None):
            return _Handle(_Result([RowResult(i, text="no", label_logprobs=lps[int(p.split("r", 1)[1].split()[0])],
                                              finish_reason="scored") for i, p in enumerate(rq.prompts)],
                                   _Stats(rq.rel_id, len(rq.prompts))))

    out = [r for row in ex.submit(Scores()) for r in ex.answer(row)]
    # means: yes (4 log .4 + 12 log .1) / 16 = log .1 + log(4) / 4, no (4 log .6 + 12 log .9) / 16;
    # rows 0-3: yes log 4 - log(4)/4 = +1.04 above its mean, no log(.6/.9) * 3/4 = -0.30: yes;
    # the others: yes -0.35, no +0.10: no
    assert {r.index: r.value for r in out} == {i: i < 4 for i in range(16)}
    assert [r.text for r in out].count("yes") == 4


def test_explain_says_which_method_runs_and_the_prompt_shape():
    call = make_call("llm_filter", "Is this review positive? Review: {r}", method="batch")
    long_rows = [f"review number {i}, long enough to move in front" for i in range(16)]
    ex = str(run_call(call, [long_rows], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert "  label method               batch   (label scores minus their means over a sample of the call's rows (the plan))" in ex
    assert ("  label plan            none kept yet: a spread sample of up to 32 of this relQuery's rows is scored first "
            "for the label means") in ex
    assert "  prompt shape          completion   (how the scoring request is laid out)" in ex
    small = str(run_call(call, [long_rows[:15]], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert ("  label method               prior   (label log-probabilities divided by the model's answer on "
            "content-free rows (the plan); asked for batch)") in small
    # once a relQuery of the call has made its plan, a small one is decided with it
    eng = ScriptedEngine()
    run_call(call, [long_rows], engine=eng, cache=False, progress=False)
    small = str(run_call(call, [long_rows[:15]], engine=eng, cache=False, progress=False, explain_only=True).explain)
    assert "  label method               batch   (label scores minus their means over a sample" in small
    assert "  label plan            kept: method batch, label means over 16 sampled rows (label_plan := 'refresh'" in small
    gen = make_call("llm_filter", "Is this review positive? Review: {r}", method="generate")
    out = str(run_call(gen, [long_rows], engine=ScriptedEngine(), cache=False, progress=False, explain_only=True).explain)
    assert "  label method            generate   (constrained decoding)" in out and "prompt shape" not in out


def test_explain_of_a_label_call_the_result_cache_answers_shows_the_kept_plan(tmp_path):
    # every row cached: nothing runs now; EXPLAIN shows the plan their answers were decided with
    from relserve.planner.cache import ResultCache

    rows = [f"review number {i}, long enough to move in front" for i in range(16)]
    cache = ResultCache(tmp_path / "results.sqlite")
    for method in ("adaptive", "bootstrap", "batch"):
        call = make_call("llm_filter", "Is this review positive? Review: {r}", method=method)
        run_call(call, [rows], engine=ScriptedEngine(), cache=cache, progress=False)
        ex = str(run_call(call, [rows], engine=ScriptedEngine(), cache=cache, progress=False, explain_only=True).explain)
        assert "  prompts to run                 0" in ex
        assert f"  label plan            kept: method {method}," in ex, ex


class _ScoresByRow(ScriptedEngine):
    """Each row's label scores given by its text ("row <i>": ``scores[i]``)."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def submit(self, rq, tenancy=None):
        from engine_doubles import _Handle, _Result, _Stats

        from relserve.results import RowResult

        self.relqueries.append(rq)
        rows = [RowResult(i, text="movie", label_logprobs=self.scores[int(p.rsplit("row ", 1)[1].split()[0])],
                          finish_reason="scored") for i, p in enumerate(rq.prompts)]
        return _Handle(_Result(rows, _Stats(rq.rel_id, len(rows))))


def _batch_part(call, eng, rows: list[int], scope) -> list[str]:
    """One relQuery of a 3-label call's ``rows`` decided by ``batch``, as a part of ``scope``
    (None: alone)."""
    from relserve.labels.batch import BatchRun
    from relserve.labels.interface import LabelContext
    from relserve.relquery import RelQuery

    values = [(f"row {i}",) for i in rows]
    run = BatchRun(LabelContext(call, eng, "m", [v[0] for v in values], values, None, call.engine_options(),
                                None, scope))
    request = run.request()
    scored = dict(request.scored)
    if len(scored) < len(rows):
        res = eng.submit(RelQuery.from_prompts(request.prompts, **{**call.engine_options(), **request.options}))
        scored = {r.index: r for r in res.result().rows}
    return [r.text for r in run.decide([scored[i] for i in range(len(rows))])]


def test_a_cascades_parts_are_decided_as_one_relquery_of_all_their_rows_would_be():
    """A cascade's LLM rows come as a random sample, then the rows its proxy was unsure of. The
    plan is made from the whole table's rows, as one relQuery of every row makes it, and decides
    the remainder too: its rows are no sample of the table (here every one is a 'movie' that also
    looks like a 'product'), and means read from the remainder alone moved 20 of its 40 rows."""
    from relserve.labels.interface import LabelScope

    labels = ["movie", "product", "beer"]
    call = make_call("llm_classify", "What is this review about? {r}", labels=labels, method="batch")
    sample = [{lab: (0.0 if lab == truth else -1.0) for lab in labels} for _ in range(50) for truth in labels]
    clear = {"movie": -0.5, "product": -1.0, "beer": -2.0}
    close = {"movie": -0.95, "product": -1.0, "beer": -2.0}
    remainder = [clear] * 20 + [close] * 20
    scores = sample + remainder

    whole = _batch_part(call, _ScoresByRow(scores), list(range(190)), None)
    eng = _ScoresByRow(scores)
    scope = LabelScope([(f"row {i}",) for i in range(190)], prompts=[f"row {i}" for i in range(190)])
    parts = _batch_part(call, eng, list(range(150)), scope) + _batch_part(call, eng, list(range(150, 190)), scope)
    assert parts == whole
    assert whole == [t for _ in range(50) for t in labels] + ["movie"] * 40
    # the remainder on its own, with no plan: its own means split it
    alone = _batch_part(call, _ScoresByRow(scores), list(range(150, 190)), None)
    assert alone == ["movie"] * 20 + ["product"] * 20
