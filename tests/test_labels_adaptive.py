"""The adaptive label method's pure logic (relserve/labels/): the concept read from a
question, the candidate layouts, the two-crowd reading of margins, and whole calls over a
scripted engine whose scores separate the rows cleanly at 2%, 10%, 25% and 50% prevalence (a
strong model behind relserve must get every row right). The real engine runs in
tests/test_labels_engine.py."""

from __future__ import annotations

import math
import random

import pytest
from engine_doubles import ScriptedEngine
from label_doubles import ChoiceScoresEngine, MarginEngine, strong_engine
from waits import result_within

from relserve.engine.handle import RelQueryHandle
from relserve.functions import make_call
from relserve.labels import adaptive
from relserve.labels.adaptive import AdaptiveRun, mutual_information
from relserve.labels.concept import Concept, concept_of, question_of
from relserve.labels.decide import FEW_ROWS, read
from relserve.labels.interface import LabelContext
from relserve.labels.layouts import Layout, LayoutRenderer, layouts_for
from relserve.labels.mixture import Mixture, fit_mixture
from relserve.planner.plan_and_run import run_call
from relserve.relquery import RelQuery
from relserve.results import RelQueryResult, RowResult
from relserve.template import Template


@pytest.fixture(autouse=True)
def _fresh_memory():
    adaptive.forget()
    yield
    adaptive.forget()


@pytest.mark.parametrize(("template", "word", "contrast"), [
    ("Is this news article about sports? {title}. {description}", "sports", "other"),
    ("Is this SMS message spam? {text}", "spam", "other"),
    ("Is this movie review positive? Review: {text}", "positive", "negative"),
    ("Is the reviewer satisfied? Title: {title}. Review: {text}", "satisfied", "dissatisfied"),
    ("Is this product an automotive product? Product: {name}", "automotive", "other"),
    ("Is this a wheat beer? Review: {review}", "wheat", "other"),
    ("Is this movie a horror film? Synopsis: {s}", "horror", "other"),
    ("Is this customer happy with their {product}? Review: {review}", "happy", "unhappy"),
    ("Review: {r}\nIs the review above about science fiction films?", "science fiction", "other"),
    ("Is {name} a good product?", "good", "bad"),
    ("Does this review mention a defect? {review}", "defect", "other"),
    # a feeling comes before the object it is about
    ("Is the customer disappointed with this purchase? {title}. {text}", "disappointed", "pleased"),
    ("Is this review title enthusiastic about the product? {title}", "enthusiastic", "unenthusiastic"),
    ("Is this product review helpful to other shoppers? {text}", "helpful", "unhelpful"),
    ("Is the guest worried about the price? {review}", "worried", "other"),
    # a preposition after a word that is no feeling leaves the object as the concept
    ("Is this beer brewed with fruit? {review}", "fruit", "other"),
    ("Is this headline about sports? {title}", "sports", "other"),
])
def test_the_concept_is_the_word_the_question_asks_about(template, word, contrast):
    assert concept_of(Template.parse(template)) == Concept(word, contrast)


@pytest.mark.parametrize("template", [
    "Is the headline \"{title}\" about {name}?",  # the concept changes per row
    "Summarize: {review}",  # no question
    "Review: {r}. Keep it?",  # no content word
    "Which one is it? {x}",  # not a yes/no question
])
def test_no_concept_where_the_question_names_none(template):
    assert concept_of(Template.parse(template)) is None


def test_the_question_is_its_own_sentence():
    assert question_of(Template.parse("Review: {r}\nIs the review above about sports? Answer well.")) == \
        "Is the review above about sports?"


def test_a_filter_gets_the_question_and_four_row_alone_layouts_a_classify_its_own_labels():
    f = layouts_for(make_call("llm_filter", "Is this news article about sports? {title}"))
    assert [x.name for x in f] == ["question, Answer: yes/no", "row, Sentiment: sports/other", "row, Topic: sports/other",
                                   "row, Category: sports/other", "row, Answer: sports/other"]
    c = layouts_for(make_call("llm_classify", "Tone of {review}?", labels=["warm", "cold"]))
    assert [x.labels for x in c] == [("warm", "cold")] * 5
    # no concept: the question alone
    assert layouts_for(make_call("llm_filter", "Keep {x}?")) == [Layout(True, "Answer", ("yes", "no"))]


def test_a_row_alone_is_its_values_and_the_question_layout_keeps_the_question():
    call = make_call("llm_filter", "Is this product an automotive product? Product: {name}")
    render = LayoutRenderer(call)
    q, alone = layouts_for(call)[0], layouts_for(call)[2]
    # a short value stays in the question; alone it is shown under its field name
    assert render(q, ("Tire gauge",)) == "Is this product an automotive product? Product: Tire gauge"
    assert render(alone, ("Tire gauge",)) == "Product: Tire gauge"


def test_mutual_information_is_zero_for_one_answer_and_grows_with_sure_varied_answers():
    assert mutual_information([3.0] * 10) == pytest.approx(0.0, abs=1e-12)
    assert mutual_information([0.0] * 10) == pytest.approx(0.0, abs=1e-12)
    # half the rows sure of one answer, half of the other: close to log 2
    assert mutual_information([20.0] * 5 + [-20.0] * 5) == pytest.approx(math.log(2), abs=1e-6)
    assert mutual_information([2.0] * 5 + [-2.0] * 5) < mutual_information([4.0] * 5 + [-4.0] * 5)


@pytest.mark.parametrize("prevalence", [0.02, 0.10, 0.25, 0.50])
def test_two_crowds_are_read_at_their_own_share(prevalence):
    rng = random.Random(7)
    n = 200
    k = max(1, round(prevalence * n))
    xs = [rng.gauss(5, 1) for _ in range(k)] + [rng.gauss(-5, 1) for _ in range(n - k)]
    reading, mix = read(xs)
    assert reading.rule == "two crowds"
    assert reading.prior == pytest.approx(k / n, abs=0.01)
    assert [mix.posterior(x) > 0.5 for x in xs] == [True] * k + [False] * (n - k)


def test_one_crowd_is_not_read_as_two():
    rng = random.Random(3)
    xs = [rng.gauss(0, 1) for _ in range(300)]
    reading, mix = read(xs)
    assert reading.rule == "one crowd" and mix is None
    assert fit_mixture(xs).gain < 0.05


def test_a_few_margins_are_read_across_a_gap_only_when_it_is_wide_in_nats_and_in_spreads():
    # wide by both measures (4.4 nats; the crowds spread 0.09): two crowds, split at the gap
    both = [-3.1, -3.0, -2.9, 1.5, 1.6, 1.7, 1.6]
    reading, mix = read(both)
    assert (reading.rule, reading.prior) == ("two crowds", pytest.approx(4 / 7))
    assert [mix.posterior(x) > 0.5 for x in both] == [False] * 3 + [True] * 4
    # 0.48 nats apart, though 48 of the crowds' spreads: small statements, not crowds (the
    # model's own answers, by each margin's sign)
    narrow = [0.10, 0.11, 0.12, 0.60, 0.61, 0.62]
    assert read(narrow)[0].rule == "few rows"
    # 3.0 nats apart, but about one of the crowds' wide spread (3.1): noise, not crowds
    noisy = [-4.0, -1.0, 1.2, 2.2, 4.4, 7.0]
    assert read(noisy)[0].rule == "few rows"


def _strong_engine(true_rows: set[str]):
    """A model that separates the rows cleanly (tests/label_doubles.py) whose true rows are ``true_rows``."""
    return strong_engine(lambda text: any(t in text for t in true_rows))


@pytest.mark.parametrize("prevalence", [0.02, 0.10, 0.25, 0.50])
@pytest.mark.parametrize("function", ["llm_filter", "llm_classify"])
def test_a_strong_model_gets_every_row_right_at_any_prevalence(prevalence, function):
    n = 200
    k = max(1, round(prevalence * n))
    rows = [f"match number {i}" if i < k else f"plain row {i}" for i in range(n)]
    random.Random(prevalence).shuffle(rows)
    truth = [r.startswith("match") for r in rows]
    true_rows = {r for r in rows if r.startswith("match")}
    if function == "llm_filter":
        call = make_call(function, "Is this news article about sports? Article: {a}", method="adaptive")
        expected = truth
    else:
        call = make_call(function, "Which kind is it? {a}", labels=["sport", "rest"], method="adaptive")
        expected = ["sport" if t else "rest" for t in truth]
    out = run_call(call, [rows], engine=_strong_engine(true_rows), cache=False, progress=False)
    assert out.values == expected


def test_the_layout_whose_answers_vary_with_the_rows_is_chosen_and_remembered():
    """The question layout gives every row the same answer; the Topic layout separates them."""
    rows = [f"sports story {i}" if i % 4 == 0 else f"other story {i}" for i in range(40)]

    eng = ScriptedEngine()

    def submit(rq, tenancy=None):
        eng.relqueries.append(rq)
        eng.submitted.append(list(rq.prompts))
        out = []
        for i, p in enumerate(rq.prompts):
            own = p.rsplit("\n\n", 1)[-1]
            informative = rq.answer_field == "Topic:"
            m = (3.0 if "sports story" in own else -3.0) if informative else 1.0
            a, b = rq.choices
            out.append(RowResult(i, a, label_logprobs={a: -math.log1p(math.exp(-m)), b: -math.log1p(math.exp(m))},
                                 finish_reason="scored"))
        from engine_doubles import _Handle, _Result, _Stats

        return _Handle(_Result(out, _Stats(rq.rel_id, len(out))))

    eng.submit = submit  # type: ignore[method-assign]
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    first = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert first.values == [r.startswith("sports") for r in rows]
    layouts = [rq.answer_field for rq in eng.relqueries]
    # five layouts tried on 8 sampled rows, the two most informative (the question wins the tie
    # at 0 nats) on the other 16, then the rows scored after "Topic:"
    assert layouts == ["Answer:", "Sentiment:", "Topic:", "Category:", "Answer:", "Answer:", "Topic:", "Topic:"]
    assert [len(rq.prompts) for rq in eng.relqueries[:7]] == [8] * 5 + [16] * 2
    # the examples in front: the sample's surest row of each word
    assert eng.relqueries[-1].prompts[0].startswith("Article: sports story 0\nTopic: sports\n\nArticle: other story")
    run_call(call, [rows[:20]], engine=eng, cache=False, progress=False)
    assert [rq.answer_field for rq in eng.relqueries[8:]] == ["Topic:"], "the choice is remembered: no first pass"


def test_a_run_reports_its_choice_and_reading():
    rows = [f"sports story {i}" if i % 5 == 0 else f"other story {i}" for i in range(60)]
    eng = _strong_engine({f"sports story {i}" for i in range(0, 60, 5)})
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    run = AdaptiveRun(LabelContext(call, eng, "m", rows, [(r,) for r in rows], "rq1", call.engine_options()))
    request = run.request()
    assert len(request.prompts) == 60 and request.answered == {} and request.engine_index is None
    res = eng.submit(RelQuery.from_prompts(request.prompts, **{**call.engine_options(), **request.options}))
    decided = run.decide(result_within(res, 60, "the 60 rows' relQuery on the double").rows)
    assert [r.text for r in decided] == ["yes" if i % 5 == 0 else "no" for i in range(60)]
    assert all(r.confidence > 0.99 for r in decided)
    rep = run.report
    assert rep.first_pass and rep.reading.rule == "two crowds" and not rep.guessing
    assert rep.reading.prior == pytest.approx(0.2, abs=0.01)
    assert rep.warning("llm_filter", "t") is None


def test_a_small_first_relquery_scores_every_row_in_every_layout_and_a_later_one_reuses_the_choice():
    """At most 24 rows with no earlier choice: 8 rows in every layout and the other rows in the two
    most informative; those scores answer every row (no relQuery after the first pass), and the
    choice (with no examples) is not kept. A larger relQuery then chooses with examples; a 5-row
    relQuery after it is decided with that layout and the margins pooled so far, exactly."""
    eng = _strong_engine({"sports story"})
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    small = [f"sports story {i}" if i % 3 == 0 else f"other story {i}" for i in range(10)]
    out = run_call(call, [small], engine=eng, cache=False, progress=False)
    assert out.values == [i % 3 == 0 for i in range(10)]
    assert [len(rq.prompts) for rq in eng.relqueries] == [8] * 5 + [2] * 2
    assert all(rq.rel_id.startswith(adaptive.FIRST_PASS_PREFIX) for rq in eng.relqueries)
    # the relQuery's stats are the rows' own (scored once, by the first pass)
    assert out.engine_stats.num_rows == 10 and out.engine_stats.prompt_tokens > 0
    # and its time is the first pass's (the demo divides by it)
    assert out.engine_stats.latency_s == out.engine_stats.core_s > 0
    assert adaptive.remembered(call, eng, "m") is None
    big = [f"sports story {i}" if i % 4 == 0 else f"other story {i}" for i in range(40)]
    run_call(call, [big], engine=eng, cache=False, progress=False)
    before = len(eng.relqueries)
    five = ["sports story 100", "other story 101", "other story 102", "sports story 103", "other story 104"]
    out = run_call(call, [five], engine=eng, cache=False, progress=False)
    (rq,) = eng.relqueries[before:]
    assert rq.prompts[0].count("\n\n") == 2  # the two examples the larger relQuery chose
    assert out.values == [True, False, False, True, False]


def test_a_few_margins_are_read_as_two_crowds_only_across_a_wide_gap():
    # noise: at most one set in ten read as two crowds (the rule's own rate is about one in twenty)
    two = sum(read([random.Random(s).gauss(0, 1) for _ in range(random.Random(s).randint(4, 15))])[0].rule == "two crowds"
              for s in range(1000))
    assert two <= 100, two
    # a model that separates the rows: always two crowds, and every row right
    for seed in range(200):
        rng = random.Random(seed)
        k, n = rng.randint(1, 3), rng.randint(5, 15)
        xs = [4 + rng.random() * 4 for _ in range(k)] + [-(4 + rng.random() * 4) for _ in range(n - k)]
        reading, mix = read(xs)
        assert reading.rule == "two crowds" and [mix.posterior(x) > 0.5 for x in xs] == [True] * k + [False] * (n - k)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_strong_model_that_answers_every_row_alike_is_taken_at_its_word_and_the_user_told(share):
    """Every row sure of one answer: the answers stand, and the warning says they are all one (a
    135M model answered "no" for all 100 beer reviews asked "Is this beer a stout?", 7 of which
    were stouts, and the filter kept none without a word)."""
    rows = [f"story {i}" for i in range(40)]
    eng = strong_engine(lambda text: share == 1.0)
    template = "Is this news article about sports? Article: {a}"
    out = run_call(make_call("llm_filter", template, method="adaptive"), [rows], engine=eng, cache=False, progress=False)
    assert out.values == [share == 1.0] * 40
    answer = "yes" if share == 1.0 else "no"
    assert out.warning is not None and out.warning.startswith(
        f"llm_filter({template!r}): the model answered {answer!r} for every one of the 40 rows it scored for this call, "
        "sure of each (layout ")
    assert "rank by llm_score(...)" in out.warning


def test_rows_the_worked_examples_alone_make_the_model_sure_of_are_not_taken_at_its_word():
    """A model that leans on the worked example shown last: without examples the sampled rows'
    margins rank the rows (true ones +1.5..+2, the rest -1..+1), behind two examples every margin
    falls 6 nats, each sure of "no". That sureness is the examples' doing, so the rows are read as
    a ranking and the true ones kept (a 135M model's stout filter did this: 0.0..+1.6 on the
    sample, -6.6..-2.9 behind the examples, none of 7 stouts kept)."""
    rows = [f"story {i}" for i in range(40)]
    truth = [i % 10 == 3 for i in range(40)]

    def margin(prompt: str, rq) -> float:
        own = prompt.rsplit("\n\n", 1)[-1]
        i = int(own.split("story ", 1)[1].split()[0].rstrip("\n"))
        m = 1.5 + (i % 7) / 14 if truth[i] else -1 + (i % 11) / 5.5
        return m - 6 if "\n\n" in prompt else m

    eng = MarginEngine(margin, whole_prompt=True)
    out = run_call(make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive"),
                   [rows], engine=eng, cache=False, progress=False)
    assert out.values == truth
    assert out.warning is None or "for every one of the" not in out.warning


def test_a_join_the_model_cannot_split_keeps_one_pair_in_k_per_left_row_on_average():
    """A join's question about a row's own value asks which of k values a left row is: where the
    chosen layout's margins form one crowd, one pair in k is kept (not the eighth of a filter),
    and the warning says so."""
    topics = ["sports", "business", "science", "politics"]
    heads = [f"headline {i}" for i in range(40)]
    rng = random.Random(7)
    noise = {(h, t): rng.gauss(0, 0.3) for h in heads for t in topics}

    def scores(own, rq):
        head = next(h for h in heads if f"{h}\"" in own or own.startswith(f"Title: {h}\n") or own.endswith(h))
        if sorted(rq.choices) != sorted(topics):  # the question layout: "yes" and "no" alike for every pair
            return {c: math.log(1 / len(rq.choices)) for c in rq.choices}
        z = math.log(sum(math.exp(noise[(head, c)]) for c in rq.choices))
        return {c: noise[(head, c)] - z for c in rq.choices}

    eng = ChoiceScoresEngine(scores)
    call = make_call("llm_filter", 'Is the headline "{title}" about {topic}?', method="adaptive")
    pairs = [(h, t) for h in heads for t in topics]
    out = run_call(call, [[h for h, _ in pairs], [t for _, t in pairs]], engine=eng, cache=False, progress=False)
    assert out.labels.choice.layout.column == "topic" and out.labels.reading.rule == "one crowd"
    assert sum(out.values) == 40 and out.labels.reading.prior == 0.25
    assert "it answered 'yes' for the 25.0% it scored highest" in out.warning


def test_a_classify_whose_rows_all_get_one_label_names_that_label():
    rows = [f"story {i}" for i in range(20)]
    call = make_call("llm_classify", "Which kind is it? {a}", labels=["sport", "rest"], method="adaptive")
    out = run_call(call, [rows], engine=strong_engine(lambda text: False), cache=False, progress=False)
    assert out.values == ["rest"] * 20
    assert "the model answered 'rest' for every one of the 20 rows" in out.warning


def test_rows_all_alike_are_told_once_the_call_has_read_enough_of_them():
    """Under ``FEW_ROWS`` rows nothing is said (a few rows alike are no news); a call run a row at a
    time says it once, with the row that brings its reading to that many, not on every later row."""
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    eng = strong_engine(lambda text: False)
    few = run_call(call, [[f"story {i}" for i in range(FEW_ROWS - 1)]], engine=eng, cache=False, progress=False)
    assert few.values == [False] * (FEW_ROWS - 1) and few.warning is None
    adaptive.forget()
    warned = [run_call(call, [[f"row {i}"]], engine=eng, cache=False, progress=False).warning is not None
              for i in range(FEW_ROWS + 4)]
    assert warned == [False] * (FEW_ROWS - 1) + [True] + [False] * 4


def test_a_question_about_a_rows_own_value_scores_every_value_of_it():
    """A semantic join's question ("Is the headline {title} about {topic}?"): besides the
    question, the headline alone after a field, scored on every distinct topic of the relQuery;
    a pair is "yes" where its own topic stands out among them."""
    topics = ["sports", "business", "science", "politics"]
    heads = [f"{t} headline {i}" for i in range(10) for t in topics]

    def scores(own, rq):
        if rq.answer_field == "Topic:" and sorted(rq.choices) == sorted(topics):
            # the headline's own topic gets 90% of the probability
            return {c: math.log(0.9 if own.startswith(f"Title: {c} ") else 0.1 / 3) for c in rq.choices}
        # every other layout tells the pairs apart no better than a coin
        return {c: math.log(1 / len(rq.choices)) for c in rq.choices}

    eng = ChoiceScoresEngine(scores)
    call = make_call("llm_filter", 'Is the headline "{title}" about {topic}?', method="adaptive")
    pairs = [(h, t) for h in heads for t in topics]
    out = run_call(call, [[h for h, _ in pairs], [t for _, t in pairs]], engine=eng, cache=False, progress=False)
    assert out.values == [h.startswith(t + " ") for h, t in pairs]
    assert out.labels.choice.layout.name == "row, Topic: {topic}"
    main = eng.relqueries[-1]
    assert sorted(main.choices) == sorted(topics) and all(p.startswith("Title: ") and "\n" not in p for p in main.prompts)


def _scored_at(text: str, rq) -> float:
    """A row "story <i> at <margin>": scored at its own margin in every layout."""
    return float(text.rsplit(" at ", 1)[1].split()[0])


def _decide_part(eng, call, rows: list[str], part: list[int], scope) -> tuple[list[str], AdaptiveRun]:
    """One relQuery of ``rows``' prompts ``part``, as a part of ``scope`` (None: on its own)."""
    values = [(rows[p],) for p in part]
    prompts = [v[0] for v in values]
    run = AdaptiveRun(LabelContext(call, eng, "m", prompts, values, None, call.engine_options(), part, scope))
    request = run.request()
    res = eng.submit(RelQuery.from_prompts(request.prompts, **{**call.engine_options(), **request.options}))
    return [r.text for r in run.decide(result_within(res, 60, "a cascade part's relQuery on the double").rows)], run


def test_a_cascades_parts_are_chosen_from_the_whole_and_decided_with_its_samples_reading():
    """A cascade's LLM rows come as two relQueries: a random sample, then the rows its proxy was
    unsure of. Here the proxy answered every "no" row, so the remainder is the true rows only:
    read alone, its margins (all from +1 to +3) are one crowd and half would be "no"; decided
    with the sample's reading, every one is "yes", as in one relQuery of all the rows."""
    from relserve.labels.bootstrap import sample_indices
    from relserve.labels.interface import LabelScope

    rng = random.Random(5)
    truth = [i % 5 == 0 for i in range(300)]
    rows = [f"story {i} at {1 + 2 * rng.random() if t else -3 + 2.5 * rng.random():.3f}" for i, t in enumerate(truth)]
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    sample = sorted(random.Random(1).sample(range(300), 150))
    rest = [i for i in range(300) if truth[i] and i not in sample]

    eng = MarginEngine(_scored_at)
    scope = LabelScope([(r,) for r in rows], list(range(300)))
    got, first = _decide_part(eng, call, rows, sample, scope)
    assert got == ["yes" if truth[i] else "no" for i in sample]
    # the first pass sampled the whole table, as one relQuery of every row would
    sampled = {int(p.split("story ")[1].split()[0]) for rq in eng.relqueries[:7] for p in rq.prompts}
    assert sampled == set(sample_indices(300, adaptive.SAMPLE_ROWS)) and not sampled <= set(sample)
    got, later = _decide_part(eng, call, rows, rest, scope)
    assert got == ["yes"] * len(rest) and len(rest) == 28
    assert later.report.reading == first.report.reading and not later.report.first_pass
    # the remainder is no sample of the table: its margins are not pooled for later statements
    assert adaptive.pooled_margins(call, eng, "m") == 150

    # the same remainder read on its own (no cascade, nothing remembered): its one crowd of
    # margins is split in two, and 13 of its 28 true rows come out "no"
    adaptive.forget()
    alone, _ = _decide_part(MarginEngine(_scored_at), call, rows, rest, None)
    assert alone.count("no") == 13


def test_a_small_relquery_whose_first_pass_lost_a_row_is_scored_again_whole():
    """One row the first pass could not score: the first pass's scores do not answer the relQuery;
    the engine scores every row in the chosen layout (one relQuery), and every row is answered."""

    class OneRowFails(MarginEngine):
        def submit(self, rq, tenancy=None):
            handle = super().submit(rq, tenancy)
            if not rq.rel_id.startswith(adaptive.FIRST_PASS_PREFIX):
                return handle
            rows = [RowResult(r.index, error="engine error") if "story 4" in str(rq.render()[r.index]) else r
                    for r in result_within(handle, 60, "the first pass on the double").rows]
            out = RelQueryHandle(rq.rel_id, len(rows), rq.on_error, lambda: None)
            for r in rows:
                out.row_done(r)
            out.finish(RelQueryResult(rows, result_within(handle, 60, "the first pass on the double").stats))
            return out

    eng = OneRowFails(_strong_engine({"sports story"}).margin)
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    small = [f"sports story {i}" if i % 3 == 0 else f"other story {i}" for i in range(10)]
    out = run_call(call, [small], engine=eng, cache=False, progress=False)
    assert out.values == [i % 3 == 0 for i in range(10)] and out.errors == [None] * 10
    assert [len(rq.prompts) for rq in eng.relqueries] == [8] * 5 + [2] * 2 + [10]
    assert not eng.relqueries[-1].rel_id.startswith(adaptive.FIRST_PASS_PREFIX)


def test_a_join_layout_is_chosen_by_what_its_answer_tells_about_the_rows_not_by_how_sure_it_is():
    """A layout of a row's own value (a join's right side) answers which value a row is. A field
    under which the model names the same department for every product with 90% is sure, and its
    pairs' own-against-rest margins carry as much information as those of the field under which
    it names each product's own department with 90%; over the answer itself the first tells
    nothing (0 nats) and the second ln(4) x 0.66. The second is chosen and every pair is right."""
    departments = ["arts", "office", "health", "automotive"]
    kinds = {"paint": "arts", "stapler": "office", "vitamin": "health", "tyre": "automotive"}

    def answer(text: str, rq) -> str:
        if rq.answer_field == "Category:":  # the informative field: each product's own department
            return next(d for k, d in kinds.items() if k in text)
        return rq.choices[0] if rq.choices != ["yes", "no"] else "no"  # the same answer for every row

    eng = ScriptedEngine(answer=answer)
    products = [f"{k} model {i}" for i in range(3) for k in kinds]
    pairs = [(d, p) for p in products for d in departments]
    call = make_call("llm_filter", "Is this product a {department} product? Product: {name}", method="adaptive")
    out = run_call(call, [[d for d, _ in pairs], [p for _, p in pairs]], engine=eng, cache=False, progress=False)
    assert out.labels.choice.layout.field == "Category" and out.labels.choice.layout.column == "department"
    assert out.values == [kinds[p.split()[0]] == d for d, p in pairs]
    same = [{"arts": math.log(0.9), **{d: math.log(0.1 / 3) for d in departments[1:]}}] * 12
    own = [{d: math.log(0.9 if d == kinds[p.split()[0]] else 0.1 / 3) for d in departments} for p in products]
    assert adaptive.categorical_information(same) == pytest.approx(0.0, abs=1e-12)
    p = [0.9] + [0.1 / 3] * 3
    h = -sum(q * math.log(q) for q in p)
    assert adaptive.categorical_information(own) == pytest.approx(math.log(4) - h)
    # the pairs' own-against-rest margins cannot tell the two apart
    margins = [math.log(0.9 / 0.1)] * 12 + [math.log((0.1 / 3) / (1 - 0.1 / 3))] * 36
    assert mutual_information(margins) > 0.3


@pytest.mark.parametrize("mix", [
    Mixture(0.2, -3.0, 1.0, 4.0, 0.5, 0.0, 0.0),   # a narrow upper crowd: held at its mean, ties above it
    Mixture(0.2, -1.0, 0.4, 1.5, 1.2, 0.0, 0.0),   # a wide upper crowd
    Mixture(0.03, -1.0, 2.0, 0.5, 0.3, 0.0, 0.0),  # a crowd of few rows that the other outweighs at its mean
    Mixture(0.97, -0.5, 0.3, 1.0, 2.0, 0.0, 0.0),
])
def test_the_posterior_rises_past_the_crowds_means_without_changing_an_answer(mix):
    xs = [mix.low_mean - 12 + k * 0.01 for k in range(int((mix.high_mean - mix.low_mean + 24) / 0.01))]
    ps = [mix.posterior(x) for x in xs]
    assert all(a <= b for a, b in zip(ps, ps[1:]))  # never falls as the margin rises
    # each answer as it was with the margin held between the means
    held = [mix.posterior(min(max(x, mix.low_mean), mix.high_mean)) for x in xs]
    assert [p > 0.5 for p in ps] == [p > 0.5 for p in held]
    # past either mean, within a nat of it, no two margins 0.01 apart share a posterior
    past = [p for x, p in zip(xs, ps) if mix.high_mean < x < mix.high_mean + 1 or mix.low_mean - 1 < x < mix.low_mean]
    assert len(set(past)) == len(past)
