"""The adaptive label method's pure logic (relserve/labels/): the concept read from a
question, the candidate layouts, the plan's boundary read from a sample's margins, and whole
calls over scripted engines: one whose scores separate the rows cleanly at 2%, 10%, 25% and 50%
prevalence (a strong model behind relserve must get every row right), and ones that do not.
The real engine runs in tests/test_label_scoring_engine.py and tests/test_golden.py."""

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
from relserve.labels.adaptive import AdaptiveRun
from relserve.labels.concept import Concept, concept_of, proposed_concept, question_of
from relserve.labels.decide import read_boundary
from relserve.labels.information import categorical_information, mutual_information
from relserve.labels.interface import LabelContext
from relserve.labels.layouts import Layout, LayoutRenderer, layouts_for
from relserve.labels.mixture import Mixture
from relserve.labels.plan import Calibration, PlanRule
from relserve.planner.plan_and_run import run_call
from relserve.relquery import RelQuery
from relserve.results import RelQueryResult, RowResult
from relserve.template import Template


@pytest.mark.parametrize(("template", "word", "contrast", "kind"), [
    ("Is this news article about sports? {title}. {description}", "sports", "other", False),
    ("Is this SMS message spam? {text}", "spam", "other", False),
    ("Is this movie review positive? Review: {text}", "positive", "negative", False),
    ("Is the reviewer satisfied? Title: {title}. Review: {text}", "satisfied", "dissatisfied", False),
    ("Is this product an automotive product? Product: {name}", "automotive", "other", False),
    ("Is this a wheat beer? Review: {review}", "wheat", "other", False),
    ("Is this movie a horror film? Synopsis: {s}", "horror", "other", False),
    ("Is this customer happy with their {product}? Review: {review}", "happy", "unhappy", False),
    ("Review: {r}\nIs the review above about science fiction films?", "science fiction", "other", False),
    ("Is {name} a good product?", "good", "bad", False),
    ("Does this review mention a defect? {review}", "defect", "other", False),
    # a feeling comes before the object it is about
    ("Is the customer disappointed with this purchase? {title}. {text}", "disappointed", "pleased", False),
    ("Is this review title enthusiastic about the product? {title}", "enthusiastic", "unenthusiastic", False),
    ("Is this product review helpful to other shoppers? {text}", "helpful", "unhelpful", False),
    ("Is the guest worried about the price? {review}", "worried", "other", False),
    # a preposition after a word that is no feeling leaves the object as the concept
    ("Is this beer brewed with fruit? {review}", "fruit", "other", False),
    ("Is this headline about sports? {title}", "sports", "other", False),
    # every content word names what a row is: the question asks whether the row is that thing
    ("Is this a review of a beer? Review: {review}", "beer", "other", True),
    ("Is this review about a beer? Review: {review}", "beer", "other", True),
    ("Is this a movie review? {text}", "movie", "other", True),
    ("Is this a beer? {text}", "beer", "other", True),
])
def test_the_concept_is_the_word_the_question_asks_about(template, word, contrast, kind):
    assert concept_of(Template.parse(template)) == Concept(word, contrast, names_a_kind=kind)


def test_a_question_about_what_kind_a_row_is_takes_no_judgement_the_model_proposes():
    beer = concept_of(Template.parse("Is this a review of a beer? Review: {review}"))
    assert beer == Concept("beer", "other", names_a_kind=True)
    assert proposed_concept({"positive": -0.5, "negative": -2.0, "beer": -1.0}, beer) is None
    # a word the lexicon reads as the concept, not a kind: the model's judgement is still tried
    like = concept_of(Template.parse("Does the critic like the movie? {r}"))
    assert like.names_a_kind is False
    assert proposed_concept({"positive": -0.5, "negative": -2.0, "critic": -3.0}, like) == Concept("positive", "negative")


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


def test_a_judgement_the_model_reads_in_the_question_is_tried_beside_the_lexicons_word():
    """The lexicon reads "like" in "Does the critic like the film?" and scores it against "other";
    the model, asked what a yes means, says "positive": positive/negative is tried too, and the
    first pass's criterion chooses among all of them. A question the lexicon cannot read at all
    (another language) gets the model's word; one whose judgement the lexicon reads with its own
    opposite gets nothing more."""
    from relserve.labels.concept import proposal_words, proposed_concept

    like = make_call("llm_filter", "Does the critic like the film? {review}")
    words = proposal_words(like.template)
    assert words == ["critic", "like", "positive", "negative"]
    scores = {"critic": -5.1, "like": -5.1, "positive": -0.5, "negative": -3.0}
    proposed = proposed_concept(scores, concept_of(like.template))
    assert proposed == Concept("positive", "negative")
    names = [x.name for x in layouts_for(like, proposed=proposed)]
    assert names[-2:] == ["row, Sentiment: positive/negative", "row, Category: positive/negative"]
    assert "row, Topic: like/other" in names
    german = make_call("llm_filter", "Ist dieser Film eine Komödie? {plot}")
    assert concept_of(german.template) is None
    proposed = proposed_concept({w: (-0.1 if w == "komödie" else -3.0) for w in proposal_words(german.template)}, None)
    assert proposed == Concept("komödie", "other")
    assert [x.name for x in layouts_for(german, proposed=proposed)][1] == "row, Sentiment: komödie/other"
    sad = make_call("llm_filter", "Is the customer disappointed with this purchase? {t}")
    assert proposed_concept({"positive": -0.2, "disappointed": -3.0}, concept_of(sad.template)) is None
    # every word alike: the model proposes nothing
    assert proposed_concept({"positive": -1.0, "critic": -1.0}, concept_of(like.template)) is None


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


@pytest.mark.parametrize("prevalence", [0.02, 0.10, 0.25, 0.50, 0.90])
def test_a_wide_gap_is_two_crowds_split_in_its_middle_at_any_share(prevalence):
    rng = random.Random(7)
    n = 64
    k = max(1, round(prevalence * n))
    xs = [rng.gauss(5, 0.5) for _ in range(k)] + [rng.gauss(-5, 0.5) for _ in range(n - k)]
    b = read_boundary(xs, content_free=[4.0])
    assert b.rule is PlanRule.TWO_CROWDS and b.share == pytest.approx(k / n)
    gap = (min(xs[:k]) + max(xs[k:])) / 2
    assert b.value == pytest.approx(gap)
    assert [x > b.value for x in xs] == [True] * k + [False] * (n - k)


def test_one_lump_is_decided_against_the_content_free_rows_not_by_a_share():
    rng = random.Random(3)
    xs = [rng.gauss(0, 1) for _ in range(64)]
    b = read_boundary(xs, content_free=[0.4, 0.8, 0.6])
    assert (b.rule, b.calibration) == (PlanRule.CALIBRATED, Calibration.CONTENT_FREE)
    assert b.value == pytest.approx(0.6)
    assert b.share == sum(x > 0.6 for x in xs) / 64
    # the same margins with the content-free rows elsewhere: the boundary follows them
    assert read_boundary(xs, content_free=[-2.0]).share == sum(x > -2.0 for x in xs) / 64
    # none to calibrate against: the model's own answer
    own = read_boundary(xs)
    assert (own.rule, own.calibration, own.value) == (PlanRule.CALIBRATED, Calibration.OWN_ANSWER, 0.0)


def test_two_crowds_without_a_gap_are_read_by_a_mixture_and_one_lump_is_not():
    rng = random.Random(11)
    xs = [rng.gauss(2.5, 0.8) for _ in range(32)] + [rng.gauss(-2.5, 0.8) for _ in range(32)]
    b = read_boundary(xs, content_free=[1.5])
    assert b.rule is PlanRule.TWO_CROWDS and b.mixture is not None and -1.0 < b.value < 1.0
    assert b.share == sum(x > b.value for x in xs) / 64
    lump = [rng.gauss(0, 1) + (1.0 if k % 5 == 0 else 0.0) for k in range(64)]
    assert read_boundary(lump, content_free=[0.3]).rule is PlanRule.CALIBRATED


def test_a_gap_is_read_as_two_crowds_only_when_it_is_wide_in_nats_and_in_spreads():
    # noise: at most one set in ten read as two crowds (by the gap or the mixture)
    two = sum(read_boundary([random.Random(s).gauss(0, 1) for _ in range(random.Random(s).randint(4, 64))]).rule
              is PlanRule.TWO_CROWDS for s in range(300))
    assert two <= 30, two
    # 0.48 nats apart, though 48 of the crowds' spreads: not crowds
    assert read_boundary([0.10, 0.11, 0.12, 0.60, 0.61, 0.62]).rule is PlanRule.CALIBRATED
    # 3.0 nats apart, but about one of the crowds' wide spread (3.1): noise, not crowds
    assert read_boundary([-4.0, -1.0, 1.2, 2.2, 4.4, 7.0]).rule is PlanRule.CALIBRATED
    # a model that separates the rows: always two crowds, every row on its side
    for seed in range(200):
        rng = random.Random(seed)
        k, n = rng.randint(1, 3), rng.randint(5, 64)
        xs = [4 + rng.random() * 4 for _ in range(k)] + [-(4 + rng.random() * 4) for _ in range(n - k)]
        b = read_boundary(xs)
        assert b.rule is PlanRule.TWO_CROWDS and [x > b.value for x in xs] == [True] * k + [False] * (n - k)


def test_margins_every_one_sure_of_one_answer_are_taken_at_the_models_word_only_when_the_rows_made_it_sure():
    sure = [-3.0 - i / 10 for i in range(20)]
    assert read_boundary(sure, [-2.5]).rule is PlanRule.ALL_ALIKE
    assert read_boundary(sure, [-2.5], sureness_is_the_rows=False).rule is PlanRule.CALIBRATED


def _strong_engine(true_rows: set[str]):
    """A model that separates the rows cleanly (tests/label_doubles.py) whose true rows are ``true_rows``."""
    return strong_engine(lambda text: any(t in text for t in true_rows))


@pytest.mark.parametrize("prevalence", [0.02, 0.10, 0.25, 0.50, 0.90])
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


def test_the_layout_whose_answers_vary_with_the_rows_is_chosen_and_kept():
    """The question layout gives every row the same answer; the Topic layout separates them."""
    rows = [f"sports story {i}" if i % 4 == 0 else f"other story {i}" for i in range(100)]

    def margin(own: str, rq) -> float:
        if rq.answer_field != "Topic:":
            return 1.0
        return 3.0 if "sports story" in own else -3.0

    eng = MarginEngine(margin)
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    first = run_call(call, [rows], engine=eng, cache=False, progress=False)
    assert first.values == [r.startswith("sports") for r in rows]
    fields = [rq.answer_field for rq in eng.relqueries]
    # the model asked what a "yes" means (it proposes nothing: every word alike); five layouts
    # tried on 8 sampled rows, the two most informative (the question wins the tie at 0 nats) on
    # the other 16; then, in the chosen layout behind its examples, the content-free rows and the
    # boundary's sample of 64 rows, and the other 36 rows
    assert fields == ["Meaning:", "Answer:", "Sentiment:", "Topic:", "Category:", "Answer:", "Answer:", "Topic:"] + \
        ["Topic:"] * 3
    assert [len(rq.prompts) for rq in eng.relqueries] == [1] + [8] * 5 + [16] * 2 + [3, 64, 36]
    # the examples in front: the sample's surest row of each word
    assert eng.relqueries[-1].prompts[0].startswith("Article: sports story 0\nTopic: sports\n\nArticle: other story")
    assert first.labels.plan.rule is PlanRule.TWO_CROWDS and first.labels.first_pass
    run_call(call, [rows[:20]], engine=eng, cache=False, progress=False)
    assert [rq.answer_field for rq in eng.relqueries[11:]] == ["Topic:"], "the plan is kept: no first pass"


def test_a_run_reports_its_plan():
    rows = [f"sports story {i}" if i % 5 == 0 else f"other story {i}" for i in range(100)]
    eng = _strong_engine({f"sports story {i}" for i in range(0, 100, 5)})
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    run = AdaptiveRun(LabelContext(call, eng, "m", rows, [(r,) for r in rows], "rq1", call.engine_options()))
    request = run.request()
    assert len(request.prompts) == 100 and request.engine_index is None and len(request.scored) == 64
    rest = [i for i in range(100) if i not in request.scored]
    res = eng.submit(RelQuery.from_prompts([request.prompts[i] for i in rest],
                                           **{**call.engine_options(), **request.options}))
    scored = [*request.scored.values(),
              *(RowResult(rest[r.index], r.text, label_logprobs=r.label_logprobs) for r in
                result_within(res, 60, "the rows' relQuery on the double").rows)]
    decided = {r.index: r for r in run.decide(scored)}
    assert [decided[i].text for i in range(100)] == ["yes" if i % 5 == 0 else "no" for i in range(100)]
    assert all(r.confidence > 0.99 for r in decided.values())
    rep = run.report
    assert rep.first_pass and rep.plan.rule is PlanRule.TWO_CROWDS and not rep.guessing
    from relserve.labels.batch import sample_indices

    sampled = sample_indices(100, adaptive.PLAN_ROWS)
    assert rep.plan.share == sum(i % 5 == 0 for i in sampled) / 64 and rep.plan.sample == 64
    assert rep.warning("llm_filter", "t") is None


def test_a_relquery_of_a_few_rows_is_answered_by_its_own_plans_sample_and_keeps_it_as_provisional(label_memory):
    """Sixteen rows or fewer: the plan's sample is every row, scored in the chosen layout behind
    the examples as the rows are, so those scores answer the relQuery (no relQuery after the first
    pass); a plan from so few rows is kept as provisional."""
    eng = _strong_engine({"sports story"})
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    small = [f"sports story {i}" if i % 3 == 0 else f"other story {i}" for i in range(10)]
    out = run_call(call, [small], engine=eng, cache=False, progress=False)
    assert out.values == [i % 3 == 0 for i in range(10)]
    assert [len(rq.prompts) for rq in eng.relqueries] == [1] + [8] * 5 + [2] * 2 + [3, 10]
    assert all(rq.rel_id.startswith(adaptive.FIRST_PASS_PREFIX) for rq in eng.relqueries)
    # the relQuery's stats are the rows' own (scored once, by the plan's sample)
    assert out.engine_stats.num_rows == 10 and out.engine_stats.prompt_tokens > 0
    assert [p.plan.provisional for p in label_memory.plans()] == [True]


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
        f"llm_filter({template!r}): the model answered {answer!r} for every one of the 40 rows it sampled for this "
        "call, sure of each (layout ")
    assert "rank by llm_score(...)" in out.warning


def test_rows_the_worked_examples_alone_make_the_model_sure_of_are_not_taken_at_its_word():
    """A model that leans on the worked example shown last: without examples the sampled rows'
    margins rank the rows (true ones +1.5..+2, the rest -1..+1), behind two examples every margin
    falls 6 nats, each sure of "no". That sureness is the examples' doing, so the rows are read as
    a ranking against the content-free rows behind the same examples, and no true row is lost
    (a 135M model's stout filter did this: 0.0..+1.6 on the sample, -6.6..-2.9 behind the
    examples, none of 7 stouts kept)."""
    rows = [f"story {i}" for i in range(40)]
    truth = [i % 10 == 3 for i in range(40)]

    def margin(prompt: str, rq) -> float:
        own = prompt.rsplit("\n\n", 1)[-1]
        if "story " not in own:  # a content-free row: as a row that leans neither way
            m = 0.0
        else:
            i = int(own.split("story ", 1)[1].split()[0].rstrip("\n"))
            m = 1.5 + (i % 7) / 14 if truth[i] else -1 + (i % 11) / 5.5
        return m - 6 if "\n\n" in prompt else m

    eng = MarginEngine(margin, whole_prompt=True)
    out = run_call(make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive"),
                   [rows], engine=eng, cache=False, progress=False)
    assert all(v for v, t in zip(out.values, truth) if t)
    assert "for every one of the" not in out.warning and "do not split these rows" in out.warning


def test_a_join_the_model_cannot_split_gives_each_left_row_the_value_it_scores_highest():
    """A join's question about a row's own value asks which of k values a left row is: where the
    chosen layout's margins form one crowd, each left row is paired with the value the model
    scores highest for it (one pair per left row; nothing assumed about a share), and the
    warning says the model does not split the pairs."""
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
    plan = out.labels.plan
    assert plan.layout.column == "topic" and plan.rule is PlanRule.CALIBRATED
    best = {h: max(topics, key=lambda t: noise[(h, t)]) for h in heads}
    assert out.values == [best[h] == t for h, t in pairs]
    assert "do not split these rows" in out.warning


def test_a_classify_whose_rows_all_get_one_label_names_that_label():
    rows = [f"story {i}" for i in range(20)]
    call = make_call("llm_classify", "Which kind is it? {a}", labels=["sport", "rest"], method="adaptive")
    out = run_call(call, [rows], engine=strong_engine(lambda text: False), cache=False, progress=False)
    assert out.values == ["rest"] * 20
    assert "the model answered 'rest' for every one of the 20 rows" in out.warning


def test_rows_all_alike_are_told_by_the_statement_that_made_the_plan_not_by_every_later_one(label_memory):
    call = make_call("llm_filter", "Is this news article about sports? Article: {a}", method="adaptive")
    eng = strong_engine(lambda text: False)
    few = run_call(call, [[f"story {i}" for i in range(15)]], engine=eng, cache=False, progress=False)
    assert few.values == [False] * 15 and few.warning is None, "fifteen rows alike are no news"
    first = run_call(call, [[f"story {i}" for i in range(30)]], engine=eng, cache=False, progress=False)
    assert "for every one of the 30 rows it sampled" in first.warning
    later = [run_call(call, [[f"row {i}"]], engine=eng, cache=False, progress=False).warning for i in range(5)]
    assert later == [None] * 5


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
    assert out.labels.plan.layout.name == "row, Topic: {topic}"
    main = eng.relqueries[-1]
    assert sorted(main.choices) == sorted(topics) and all(p.startswith("Title: ") and "\n" not in p for p in main.prompts)


def _scored_at(text: str, rq) -> float:
    """A row "story <i> at <margin>": scored at its own margin in every layout (a content-free row
    at 0)."""
    return float(text.rsplit(" at ", 1)[1].split()[0]) if " at " in text else 0.0


def _decide_part(eng, call, rows: list[str], part: list[int], scope) -> tuple[list[str], AdaptiveRun]:
    """One relQuery of ``rows``' prompts ``part``, as a part of ``scope`` (None: on its own)."""
    values = [(rows[p],) for p in part]
    prompts = [v[0] for v in values]
    run = AdaptiveRun(LabelContext(call, eng, "m", prompts, values, None, call.engine_options(), part, scope))
    request = run.request()
    res = eng.submit(RelQuery.from_prompts(request.prompts, **{**call.engine_options(), **request.options}))
    return [r.text for r in run.decide(result_within(res, 60, "a cascade part's relQuery on the double").rows)], run


def test_a_cascades_parts_are_decided_with_one_plan_made_from_the_whole():
    """A cascade's LLM rows come as two relQueries: a random sample, then the rows its proxy was
    unsure of. The plan the sample makes samples the whole table, as one relQuery of every row
    would, and decides the remainder too."""
    from relserve.labels.batch import sample_indices
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
    # the first pass and the plan's sample came from the whole table, as one relQuery would draw them
    sampled = {int(p.split("story ")[1].split()[0]) for rq in eng.relqueries[1:8] for p in rq.prompts}
    assert sampled == set(sample_indices(300, adaptive.SAMPLE_ROWS)) and not sampled <= set(sample)
    got_rest, later = _decide_part(eng, call, rows, rest, scope)
    assert later.report.plan == first.report.plan and not later.report.first_pass
    # every row, of either part, decided by its margin against the one boundary
    boundary = first.report.plan.boundary
    margins = {i: float(rows[i].rsplit(" at ", 1)[1]) for i in range(300)}
    assert got == ["yes" if margins[i] > boundary else "no" for i in sample]
    assert got_rest == ["yes" if margins[i] > boundary else "no" for i in rest]


def test_a_row_the_plans_sample_could_not_score_is_scored_with_the_rest():
    """One row the first pass could not score: the other rows' sample scores answer them, and the
    engine scores that row in the chosen layout; every row is answered."""

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
    assert [len(rq.prompts) for rq in eng.relqueries] == [1] + [8] * 5 + [2] * 2 + [3, 10, 1]
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
            return next((d for k, d in kinds.items() if k in text), "arts")
        return rq.choices[0] if rq.choices != ["yes", "no"] else "no"  # the same answer for every row

    eng = ScriptedEngine(answer=answer)
    products = [f"{k} model {i}" for i in range(3) for k in kinds]
    pairs = [(d, p) for p in products for d in departments]
    call = make_call("llm_filter", "Is this product a {department} product? Product: {name}", method="adaptive")
    out = run_call(call, [[d for d, _ in pairs], [p for _, p in pairs]], engine=eng, cache=False, progress=False)
    assert out.labels.plan.layout.field == "Category" and out.labels.plan.layout.column == "department"
    assert out.values == [kinds[p.split()[0]] == d for d, p in pairs]
    same = [{"arts": math.log(0.9), **{d: math.log(0.1 / 3) for d in departments[1:]}}] * 12
    own = [{d: math.log(0.9 if d == kinds[p.split()[0]] else 0.1 / 3) for d in departments} for p in products]
    assert categorical_information(same) == pytest.approx(0.0, abs=1e-12)
    p = [0.9] + [0.1 / 3] * 3
    h = -sum(q * math.log(q) for q in p)
    assert categorical_information(own) == pytest.approx(math.log(4) - h)
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
