"""The methods that decide each row from its own label scores (every ``llm_classify`` of three
labels or more): a model that tells the rows apart keeps its answers at any prevalence, and one
that does not is answered all the same and warned about (issue 43). Scripted engines here; the
real engine, polars and PostgreSQL at the end."""

from __future__ import annotations

import math
import warnings

import polars as pl
import pytest
from label_doubles import LabelEngine

import relserve.polars  # noqa: F401 (registers the .llm namespaces)
from relserve.errors import LabelWarning
from relserve.functions import make_call
from relserve.labels.guesses import AnswerSpread
from relserve.labels.information import explained_share
from relserve.labels.memory import forget_all
from relserve.planner.plan_and_run import analyzed, run_call

LABELS = ["damage", "account", "billing"]
TEMPLATE = "What is this ticket about? {t}"


def strong(text: str, labels: list[str]) -> dict[str, float]:
    """Sure of the row's own label by 4-8 nats (the gap from the row's text, so no two rows alike)."""
    gap = 4 + (sum(text.encode()) % 97) / 24
    return {label: 0.0 if f"about {label}" in text else -gap for label in labels}


def blind(text: str, labels: list[str]) -> dict[str, float]:
    """The same preference for every row, with a little noise: the row does not matter."""
    wobble = (sum(text.encode()) % 7) / 100
    return {label: -0.5 * k + (wobble if k == 1 else 0.0) for k, label in enumerate(labels)}


def tickets(n: int, share: float) -> tuple[list[str], list[str]]:
    """``share`` of the rows about each of the first and last label, the rest about the middle one."""
    k = max(1, round(n * share))
    truth = [LABELS[0]] * k + [LABELS[2]] * k + [LABELS[1]] * (n - 2 * k)
    return [f"ticket {i} about {t}" for i, t in enumerate(truth)], truth


@pytest.fixture(autouse=True)
def _fresh_memory():
    forget_all()
    yield
    forget_all()


def test_the_share_the_rows_explain_is_zero_for_alike_rows_and_one_for_sure_ones():
    alike = [{"a": -0.2, "b": -1.7}] * 5
    assert explained_share(alike) == pytest.approx(0.0, abs=1e-12)
    sure = [{"a": 0.0, "b": -30.0}] * 49 + [{"a": -30.0, "b": 0.0}]  # 2% of one label
    assert explained_share(sure) == pytest.approx(1.0, abs=1e-9)
    assert explained_share([{"a": 0.0, "b": -40.0}] * 3) == 1.0  # nothing to explain
    # two rows leaning apart by 1.1 nats: 1 - H(p) / ln 2 of the answers' entropy
    p = 1 / (1 + math.exp(-1.1))
    h = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert explained_share([{"a": -0.3, "b": -1.4}, {"a": -1.4, "b": -0.3}]) == pytest.approx(1 - h / math.log(2))


@pytest.mark.parametrize("method", [None, "batch", "bootstrap", "prior", "score"])
@pytest.mark.parametrize("share", [0.02, 0.10, 0.25, 0.45])
def test_a_model_that_separates_the_rows_gets_every_row_right_at_any_prevalence(method, share):
    rows, truth = tickets(200, share)
    options = {"method": method} if method else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabelWarning)
        out = run_call(make_call("llm_classify", TEMPLATE, labels=LABELS, **options), [rows],
                       engine=LabelEngine(strong), cache=False, progress=False)
    # before the model's own answers were kept, batch means moved 110 of these 200 rows at 2%
    assert out.values == truth
    assert out.warning is None


def test_a_model_blind_to_the_rows_answers_every_row_and_warns():
    rows, _ = tickets(60, 0.25)
    with pytest.warns(LabelWarning, match=r"llm_classify\('What is this ticket about\? \{t\}'\): the model gives the "
                                          r"60 rows it scored about the same scores.*close to guesses"):
        out = run_call(make_call("llm_classify", TEMPLATE, labels=LABELS), [rows], engine=LabelEngine(blind),
                       cache=False, progress=False)
    assert out.failures == [] and len(out.values) == 60 and all(v in LABELS for v in out.values)
    assert "method 'bootstrap'" in out.warning and "Check a sample of the answers by hand" in out.warning
    ana = str(analyzed(out.plan.call, out))
    assert "method 'bootstrap': mutual information between rows and answers" in ana
    assert "(close to guesses) over 60 rows" in ana


def test_few_rows_are_guesses_unless_the_model_is_sure_of_each():
    unsure = AnswerSpread("prior")
    for scores in ({"a": -0.1, "b": -2.4}, {"a": -2.4, "b": -0.1}, {"a": -0.3, "b": -1.35}):
        unsure.add(scores, max(scores, key=scores.get))
    assert unsure.few and unsure.unsure == 1 and unsure.guessing
    assert "with 3 rows and no earlier ones of this call" in unsure.warning("llm_classify", "{t}")
    # behind a plan read from 5 rows (a provisional one): 8 rows in all are still too few
    unsure.earlier = 5
    assert unsure.few and "with 3 rows and only 5 earlier ones of this call behind its plan" in unsure.warning(
        "llm_classify", "{t}")
    sure = AnswerSpread("prior")
    for scores in ({"a": -0.01, "b": -4.6}, {"a": -4.6, "b": -0.01}):
        sure.add(scores, max(scores, key=scores.get))
    assert not sure.guessing and sure.warning("llm_classify", "{t}") is None
    # the call's earlier relQueries stand behind the reading (and were judged): three rows more
    # are not, whatever their share (one row's alone is always 0)
    unsure.earlier = 16
    assert not unsure.few and unsure.explained < 0.5 and not unsure.guessing
    one = AnswerSpread("prior", earlier=20)
    one.add({"a": -0.6, "b": -0.8}, "a")
    assert one.explained == 0.0 and not one.guessing


def test_a_call_run_row_by_row_under_the_prior_is_told_once_by_the_row_that_made_its_plan():
    """PostgreSQL's scalar calls (``relserve.batch_calls = off``) send one relQuery per row: the
    first makes the call's plan (the content-free prior) and is told its answers are guesses of
    few rows; the rows after it, decided by that plan, are not told again."""
    eng = LabelEngine(blind)
    call = make_call("llm_classify", TEMPLATE, labels=LABELS)
    warned = []
    for i in range(20):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            run_call(call, [[f"ticket {i} about billing"]], engine=eng, cache=False, progress=False)
        warned.append(any(issubclass(w.category, LabelWarning) for w in got))
    assert warned == [True] + [False] * 19


def test_many_rows_of_a_separating_model_at_two_percent_are_no_guesses():
    spread = AnswerSpread("batch")
    for i in range(100):
        rare = i < 2
        scores = {"a": -0.05 if rare else -3.0, "b": -3.0 if rare else -0.05}
        spread.add(scores, "a" if rare else "b")
    # each row 95% sure: at 2% the rare label's share is mostly the others' 5%, so the rows explain
    # only a fifth of the answers' entropy, twice the share below which they count as guesses
    sure = 1 / (1 + math.exp(-2.95))

    def h(p: float) -> float:
        return -(p * math.log(p) + (1 - p) * math.log(1 - p))

    rare = 0.02 * sure + 0.98 * (1 - sure)
    assert spread.explained == pytest.approx((h(rare) - h(sure)) / h(rare))
    assert spread.explained > 0.2 and not spread.guessing


TICKETS = [
    "My parcel arrived with the box crushed and the vase broken.",
    "How do I change the email address on my account?",
    "I was charged twice for the same order last week.",
    "The tracking page has said 'in transit' for nine days.",
]


@pytest.mark.engine
def test_polars_warns_when_a_small_classify_on_the_real_model_is_guessing(engine, engine_home):
    # the 135M model scores "billing" for every ticket; divided by its prior every one is "damage",
    # none of them sure (measured: confidence 0.54-0.70)
    df = pl.DataFrame({"ticket": TICKETS})
    with pytest.warns(LabelWarning, match=r"with 4 rows and no earlier ones of this call.*close to guesses"):
        out = df.with_columns(kind=pl.col("ticket").llm.classify(
            "What is this support ticket about? {ticket}", ["damage", "account", "billing", "delivery"], engine=engine))
    assert out["kind"].null_count() == 0 and set(out["kind"]) <= {"damage", "account", "billing", "delivery"}


def test_a_cascades_sample_takes_its_examples_from_the_whole_relquery():
    """A cascade asks the LLM for a random sample of the rows first. Bootstrap's first pass chose
    its examples among that sample's rows, so the LLM's answers moved away from the LLM-only
    run's (15% of a 3-label cascade's); it samples the whole relQuery, as that run does."""
    from relserve.labels.bootstrap import BootstrapRun
    from relserve.labels.interface import LabelContext, LabelScope

    call = make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap")
    whole, _ = tickets(90, 0.25)
    values = [(w,) for w in whole]

    def first_pass_of(prompts: list[str], scope: LabelScope | None):
        forget_all()
        eng = LabelEngine(strong)
        ctx = LabelContext(call, eng, "m", prompts, [(p,) for p in prompts], None, call.engine_options(), None, scope)
        request = BootstrapRun(ctx).request()
        return [str(p) for p in eng.relqueries[0].render()], request

    alone, _ = first_pass_of(whole, None)
    part = whole[0::3]  # a 30-row sample of the 90 (of the three examples, rows 5, 39 and 45 of the 90, it holds two)
    scoped, request = first_pass_of(part, LabelScope(values, None, whole))
    assert scoped == alone and len(alone) == 16
    assert not set(alone) <= set(part)  # the part's own rows would have given other examples
    # every row of the part is scored behind the examples chosen from the whole
    examples = request.prompts[0][: request.prompts[0].rindex("\n\n") + 2]
    assert len(request.prompts) == len(part) and all(p == examples + q for p, q in zip(request.prompts, part))
    assert whole[39] in examples and whole[45] in examples
