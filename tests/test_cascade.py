"""The model cascade's logic without the real engine or embedding model (relserve/cascade/).

Exact expectations on a scripted engine (``engine_doubles.ScriptedEngine``: answers from a rule)
with a scripted embedder (features from the same rule, or from nothing): which rows the LLM is
asked first, which the proxy answers, what the threshold is, when everything falls back to the
LLM. The real engine and embedding model are in test_cascade_engine.py.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from cascade_doubles import RuleEmbedder, reviews
from engine_doubles import ScriptedEngine
from waits import wait_until

from relserve.cascade import binomial, embedding, policy, prefetch, proxy, threshold
from relserve.errors import ConfigError, RowError
from relserve.functions import CallOptions, make_call
from relserve.labels.memory import forget_all
from relserve.planner.cascade_runner import PROXY, split
from relserve.planner.plan_and_run import run_call


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


# -- Clopper-Pearson ----------------------------------------------------------------------------


def test_clopper_pearson_matches_published_values():
    # R: binom.test(30, 1000)$conf.int, binom.test(0, 100), binom.test(5, 10)
    low, high = binomial.interval(30, 1000, 0.05)
    assert (round(low, 5), round(high, 5)) == (0.02033, 0.04255)
    assert binomial.interval(0, 100, 0.05) == (0.0, pytest.approx(0.036217, abs=1e-6))
    low, high = binomial.interval(5, 10, 0.05)
    assert (round(low, 4), round(high, 4)) == (0.1871, 0.8129)
    assert binomial.interval(10, 10, 0.05)[1] == 1.0


def test_binomial_tail_is_exact_on_small_cases():
    assert binomial.cdf(3, 10, 0.5) == pytest.approx(176 / 1024)
    assert binomial.cdf(0, 4, 0.25) == pytest.approx(0.75**4)
    assert binomial.cdf(-1, 4, 0.25) == 0.0
    assert binomial.cdf(4, 4, 0.25) == 1.0
    # a table of millions of rows: no overflow, the tail is still a probability
    assert 0.0 < binomial.cdf(49_000, 1_000_000, 0.05) < 1e-4  # 4.6 standard deviations below the mean
    assert binomial.cdf(50_000, 1_000_000, 0.05) == pytest.approx(0.5, abs=0.01)


def test_binomial_bounds_refuse_impossible_counts():
    with pytest.raises(ValueError):
        binomial.interval(11, 10, 0.05)
    with pytest.raises(ValueError):
        binomial.upper_bound(1, 10, 1.5)


# -- the threshold ------------------------------------------------------------------------------


def test_threshold_is_the_last_step_of_the_fixed_sequence_and_estimated_on_the_other_half():
    # 2 x 1,000 audit rows (first half chooses, second estimates), confidence = rank; the proxy
    # is wrong on the 60 least sure rows of each half. 10,000 rest rows, 12,000 in all.
    half = np.linspace(0.5, 1.0, 1000)
    wrong = np.zeros(1000, dtype=bool)
    wrong[:60] = True
    audit_conf = np.concatenate([half, half])
    agrees = ~np.concatenate([wrong, wrong])
    rest_conf = np.linspace(0.5, 1.0, 10_000)
    got = threshold.choose(audit_conf, agrees, rest_conf, rows=12_000, target=0.95)
    # allowed wrong share of the rest: 0.05 * 12,000 / 10,000 = 0.06. Up to 94% of the rest the
    # audit rows at or above the step have no wrong row; each 1% step further takes in 10 more:
    # at 98%, 40 wrong rows of the 1,000 (one-sided upper bound 5.3%), at 99% 50 (6.3% > 6%):
    # the sequence stops there and 98% is chosen
    assert binomial.upper_bound(40, 1000, 0.05) < 0.06 < binomial.upper_bound(50, 1000, 0.05)
    assert got.applies and got.coverage == pytest.approx(0.98, abs=1e-4)
    assert got.chose == threshold.AuditCount(1000, 980, 40)
    assert got.estimated == got.chose  # the halves are alike here
    low, high = binomial.interval(40, 1000, 0.05)
    assert got.agreement == pytest.approx(1 - 10_000 * (40 / 1000) / 12_000)
    assert (got.agreement_low, got.agreement_high) == (pytest.approx(1 - 10_000 * high / 12_000),
                                                       pytest.approx(1 - 10_000 * low / 12_000))
    assert got.confidence == 0.95


def test_the_estimate_comes_from_the_half_that_did_not_choose():
    # the choosing half is perfect, the estimating half is wrong on its 30 surest rows
    conf = np.linspace(0.5, 1.0, 800)
    est_agrees = np.ones(800, dtype=bool)
    est_agrees[-30:] = False
    got = threshold.choose(np.concatenate([conf, conf]), np.concatenate([np.ones(800, dtype=bool), est_agrees]),
                           np.linspace(0.5, 1.0, 5000), rows=6600, target=0.9)
    assert got.coverage == 1.0 and got.chose.wrong == 0 and got.estimated.wrong == 30
    assert got.agreement == pytest.approx(1 - 5000 * (30 / 800) / 6600)


def test_no_threshold_when_even_the_surest_rows_are_too_often_wrong():
    rng = np.random.default_rng(0)
    audit_conf = rng.uniform(0.5, 1, 800)
    agrees = rng.uniform(size=800) < 0.7  # wrong on 30% whatever its confidence
    got = threshold.choose(audit_conf, agrees, rng.uniform(0.5, 1, 5000), rows=6000, target=0.95)
    # the bound alone would let it answer a few percent of the rows (30% of them wrong is within
    # the 6% of the rest it may get wrong), the floor does not: a coin spends no agreement budget
    assert not got.applies and got.threshold is None and got.coverage == 0.0
    assert got.agreement == 1.0  # every row then goes to the LLM


def clopper_pearson_upper(wrong: int, n: int, delta: float) -> float:
    """The one-sided upper bound, computed here from the binomial's tail by bisection: the share
    p at which ``wrong`` or fewer of ``n`` happen with probability ``delta``."""
    def tail(p: float) -> float:
        return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(wrong + 1))

    low, high = wrong / n, 1.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if tail(mid) > delta else (low, mid)
    return high


@pytest.mark.parametrize("wrong", [10, 12])
def test_the_threshold_is_chosen_only_when_the_bound_on_its_wrong_rows_is_within_the_target(wrong):
    # one confidence for every row: each candidate lets the proxy answer every row; the choosing
    # half's 300 rows hold ``wrong`` disagreements, and the target allows (1 - 0.95) * 6,000 /
    # 5,000 = 6% of the rest rows wrong: the 95% upper bound of 10 in 300 is 5.6%, of 12 in 300 6.4%
    agrees = np.ones(600, dtype=bool)
    agrees[:wrong] = False
    got = threshold.choose(np.full(600, 0.9), agrees, np.full(5000, 0.9), rows=6000, target=0.95)
    allowed = (1 - 0.95) * 6000 / 5000
    assert got.applies == (clopper_pearson_upper(wrong, 300, 0.05) <= allowed) == (wrong == 10)
    assert got.chose.wrong == (wrong if got.applies else 0)


def test_a_perfect_proxy_answers_every_rest_row():
    got = threshold.choose(np.full(600, 0.99), np.ones(600, dtype=bool), np.full(4000, 0.99), rows=5000, target=0.99)
    assert got.applies and got.coverage == 1.0 and got.chose.wrong == got.estimated.wrong == 0
    assert got.agreement == 1.0 and got.agreement_high == 1.0
    assert got.agreement_low == pytest.approx(1 - 4000 * binomial.interval(0, 300, 0.05)[1] / 5000)


# -- the proxy ----------------------------------------------------------------------------------


def test_proxy_learns_a_separable_rule_and_its_probabilities_sum_to_one():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 8))
    answers = ["yes" if v > 0 else "no" for v in x[:, 0] + 0.5 * x[:, 1]]
    model = proxy.fit(x[:300], answers[:300], ["yes", "no"])
    labels, conf = model.predict(x[300:])
    assert np.mean([a == b for a, b in zip(labels, answers[300:])]) >= 0.95
    p = model.probabilities(x[300:])
    assert p.shape == (100, 2) and np.allclose(p.sum(axis=1), 1.0)
    assert np.all((conf >= 0.5) & (conf <= 1.0))


def test_proxy_with_three_labels_one_vs_rest():
    rng = np.random.default_rng(2)
    centers = np.array([[4, 0, 0], [0, 4, 0], [0, 0, 4]], dtype=float)
    y = rng.integers(0, 3, 450)
    x = centers[y] + rng.normal(size=(450, 3))
    labels = ["a", "b", "c"]
    model = proxy.fit(x[:300], [labels[i] for i in y[:300]], labels)
    got, _ = model.predict(x[300:])
    assert np.mean([g == labels[i] for g, i in zip(got, y[300:])]) >= 0.95
    assert np.allclose(model.probabilities(x[300:]).sum(axis=1), 1.0)


def test_proxy_of_a_one_sided_sample_answers_that_label():
    x = np.random.default_rng(3).normal(size=(50, 4))
    model = proxy.fit(x, ["no"] * 50, ["yes", "no"])
    labels, conf = model.predict(x)
    assert set(labels) == {"no"} and conf.min() > 0.99


def test_proxy_refuses_answers_outside_its_labels():
    with pytest.raises(ValueError, match="not among the labels"):
        proxy.fit(np.zeros((3, 2)), ["yes", "maybe", "no"], ["yes", "no"])


# -- when a call cascades -----------------------------------------------------------------------


def test_option_is_checked_and_keys_the_result_cache():
    plain = make_call("llm_filter", "Is {x} good?")
    on = make_call("llm_filter", "Is {x} good?", cascade=0.95)
    assert "cascade" not in plain.sampling_settings()
    assert on.sampling_settings()["cascade"] == 0.95 and on.sampling_settings()["cascade_seed"] is None
    assert make_call("llm_filter", "Is {x} good?", cascade=0.95, seed=3).sampling_settings()["cascade_seed"] == 3
    for bad in (1.5, 0.2, "high", True, float("nan")):
        with pytest.raises(ConfigError, match="cascade must be an agreement target"):
            make_call("llm_filter", "Is {x} good?", cascade=bad)


def test_plan_says_when_and_why_not():
    on = make_call("llm_filter", "Is {x} good?", cascade=0.9)
    assert policy.plan(make_call("llm_filter", "Is {x} good?"), 50_000).skipped == "off"
    small = policy.plan(on, policy.MIN_ROWS - 1)
    assert not small.applies and "where a proxy pays" in small.skipped
    # a map's own cascade is refused (make_call); a connection's default reaches it, and is skipped
    assert "free text" in policy.plan(make_call("llm_map", "Say {x}", options=CallOptions(cascade=0.9)), 50_000).skipped
    assert "sampled" in policy.plan(make_call("llm_filter", "Is {x} good?", cascade=0.9, temperature=0.7), 50_000).skipped
    big = policy.plan(on, 20_000)
    # 3% of 20,000 is 600 training rows (the most taken), 4% is 800 audit rows (within 600-1,000)
    assert big.applies and (big.train, big.audit) == (600, 800)
    # a smaller table takes the fewest of each: 3% of 5,000 is 150 (300 at least), 4% is 200 (600)
    assert (policy.plan(on, 5_000).train, policy.plan(on, 5_000).audit) == (300, 600)


def test_split_is_a_seeded_partition():
    a = split(1000, 40, 60, seed=5)
    assert len(a.train) == 40 and len(a.audit) == 60 and len(a.rest) == 900
    assert sorted(a.train + a.audit + a.rest) == list(range(1000))
    assert split(1000, 40, 60, seed=5) == a and split(1000, 40, 60, seed=6) != a


def test_row_texts_drop_the_template_around_the_rows():
    prompts = ["Is this good? Review: great pan\nAnswer yes or no.", "Is this good? Review: awful\nAnswer yes or no."]
    assert embedding.row_texts(prompts) == ["great pan", "awful"]
    # whole words only: "good value" and "bad value" share "d value", not the word
    assert embedding.row_texts(["x: good value", "x: bad value"]) == ["good", "bad"]
    assert embedding.row_texts(["only one"]) == ["only one"]


# -- a cascade over a scripted engine and embedder ----------------------------------------------


def good_rule(prompt, rq):
    return "yes" if "good" in prompt.split("Review:")[-1] else "no"


@pytest.fixture
def rule_embedder():
    e = RuleEmbedder()
    previous = embedding.use_embedder(e)
    yield e
    embedding.use_embedder(previous)


@pytest.mark.parametrize("overlap", [True, False])
def test_cascade_answers_the_rest_by_proxy_when_it_agrees(rule_embedder, overlap, monkeypatch):
    monkeypatch.setattr(prefetch, "OVERLAP", overlap)
    n = 4000
    eng = ScriptedEngine(answer=good_rule)
    call = make_call("llm_filter", "Is it worth it? Review: {r}", cascade=0.95)
    out = run_call(call, [reviews(n)], engine=eng, progress=False)
    plan = policy.plan(call, n)
    rep = out.cascade
    assert (rep.train, rep.audit) == (plan.train, plan.audit) == (300, 600)
    # the LLM answered the sample and audit as ONE relQuery, and nothing after: the proxy is
    # right on every audit row, so it answers every rest row
    assert [len(s) for s in eng.submitted] == [900]
    assert rep.proxy_rows == n - 900 and rep.remainder_rows == 0 and rep.llm_rows == 900
    assert rep.audit_wrong == 0 and rep.agreement == 1.0
    assert rep.agreement_low == pytest.approx(1 - (n - 900) * binomial.interval(0, 300, 0.05)[1] / n)
    assert out.values == [i % 3 == 0 for i in range(n)]
    assert out.errors == [None] * n
    # per-row details: who answered, and the proxy's confidence
    proxy_rows = [r for r in out.details if r.answered_by == PROXY]
    assert len(proxy_rows) == n - 900 and all(0.5 <= r.confidence <= 1.0 for r in proxy_rows)
    # the LLM's rows carry its own confidence (the label method's probability of the answer given)
    assert all(r.answered_by is None and 0.5 <= r.confidence <= 1.0 for r in out.details if r.answered_by != PROXY)
    if overlap:
        # every row embedded ahead, beside the sample's relQuery, a chunk at a time (the sample's
        # rows first); learning reads those vectors and embeds nothing more
        assert rule_embedder.calls == [1024, 1024, 1024, 928] and rep.prefetch_s > 0
    else:
        # embeddings: the sample's answered rows in one chunk, then the rest in chunks
        assert rule_embedder.calls == [900, 1024, 1024, 1024, 28] and rep.prefetch_s == 0


def test_cascade_falls_back_to_the_llm_when_the_proxy_is_poor():
    eng = ScriptedEngine(answer=good_rule)
    previous = embedding.use_embedder(RuleEmbedder(informative=False))
    try:
        call = make_call("llm_filter", "Is it worth it? Review: {r}", cascade=0.95)
        out = run_call(call, [reviews(3000)], engine=eng, progress=False)
    finally:
        embedding.use_embedder(previous)
    rep = out.cascade
    assert rep.threshold is None and rep.proxy_rows == 0 and "no threshold" in rep.fallback
    # every row answered by the LLM: the sample first, then every other row as one relQuery
    assert [len(s) for s in eng.submitted] == [900, 2100]
    assert out.values == [i % 3 == 0 for i in range(3000)]
    assert all(r.answered_by is None for r in out.details)


def test_small_relqueries_run_exactly_as_without_the_option(rule_embedder):
    rows = reviews(policy.MIN_ROWS - 1)
    plain, on = ScriptedEngine(answer=good_rule), ScriptedEngine(answer=good_rule)
    a = run_call(make_call("llm_filter", "Is it worth it? Review: {r}"), [rows], engine=plain, progress=False, cache=False)
    forget_all()  # the second call chooses its own examples, as the first did
    b = run_call(make_call("llm_filter", "Is it worth it? Review: {r}", cascade=0.95), [rows], engine=on, progress=False, cache=False)
    assert b.cascade is None and b.details is None and rule_embedder.calls == []
    assert plain.submitted == on.submitted and plain.first_passes == on.first_passes
    assert a.values == b.values


def test_classify_cascade_and_a_repeat_comes_from_the_result_cache(rule_embedder):
    def label(prompt, rq):
        return "good" if "good" in prompt.split("Review:")[-1] else "bad"

    eng = ScriptedEngine(answer=label)
    call = make_call("llm_classify", "Which? Review: {r}", labels=["good", "bad"], cascade=0.9)
    rows = reviews(3500)
    first = run_call(call, [rows], engine=eng, progress=False)
    assert first.cascade.proxy_rows == 3500 - 900 and first.values == [("good" if i % 3 == 0 else "bad") for i in range(3500)]
    again = run_call(call, [rows], engine=eng, progress=False)
    assert again.cascade is None and again.values == first.values and len(eng.submitted) == 1
    # the plain call never reads the cascade's answers
    plain = run_call(make_call("llm_classify", "Which? Review: {r}", labels=["good", "bad"]), [rows], engine=eng, progress=False)
    assert plain.cascade is None and len(eng.submitted) == 2 and len(eng.submitted[1]) == 3500


def sent_rows(prompts: list[str]) -> list[int]:
    """The row numbers of the prompts the engine got (each row's own text is 'item <n> is ...')."""
    return [int(re.search(r"item (\d+) ", p.split("Review:")[-1]).group(1)) for p in prompts]


def first_run(call, rows: list) -> tuple[list[int], int]:
    """A run that fails nothing: the rows the LLM answers first (the sample, by the call's seed),
    and one row the proxy answers."""
    clean = ScriptedEngine(answer=good_rule)
    out = run_call(call, [rows], engine=clean, progress=False, cache=False)
    return sent_rows(clean.submitted[0]), next(i for i, r in enumerate(out.details) if r.answered_by == PROXY)


def failing(*rows: int):
    def answer(prompt, rq):
        if any(f"item {i} " in prompt for i in rows):
            raise RuntimeError("engine: row too long")
        return good_rule(prompt, rq)

    return answer


def test_per_row_errors_stay_per_row(rule_embedder):
    rows = reviews(3200)
    rows[5] = None  # a NULL value: its row fails before anything runs
    call = make_call("llm_filter", "Is it worth it? Review: {r}", cascade=0.95)
    sample, far = first_run(call, rows)
    bad = min(sample)  # a row the LLM answers: the engine fails it; ``far`` never reaches the engine
    eng = ScriptedEngine(answer=failing(bad, far))
    out = run_call(call, [rows], engine=eng, progress=False, cache=False)
    assert [sent_rows(p) for p in eng.submitted] == [sample]  # the same sample (the call's seed), nothing after it
    assert out.values[5] is None and "NULL" in out.errors[5]
    assert out.values[bad] is None and out.errors[bad] == "llm_filter: engine: row too long" and out.details[bad].answered_by is None
    # the proxy's row is answered by the proxy, whatever the engine would have said
    assert out.details[far].answered_by == PROXY and out.errors[far] is None and out.values[far] == (far % 3 == 0)
    assert [i for i, e in enumerate(out.errors) if e is not None] == sorted([5, bad])
    assert all(out.values[i] == (i % 3 == 0) for i in range(3200) if i not in (5, bad))


def test_on_error_raise_fails_the_call_naming_the_row_the_engine_failed(rule_embedder):
    rows = reviews(3200)
    call = make_call("llm_filter", "Is it worth it? Review: {r}", cascade=0.95, on_error="raise")
    sample, far = first_run(call, rows)
    bad = max(sample)
    with pytest.raises(RowError, match=rf"^row {bad} .*: llm_filter: engine: row too long$"):
        run_call(call, [rows], engine=ScriptedEngine(answer=failing(bad)), progress=False, cache=False)
    # a row the proxy answers fails nothing: the call finishes
    out = run_call(call, [rows], engine=ScriptedEngine(answer=failing(far)), progress=False, cache=False)
    assert out.errors == [None] * 3200 and out.details[far].answered_by == PROXY


# -- PostgreSQL's side (no database: the Python the extension calls) ----------------------------


def test_postgres_settings_and_query_options_carry_the_cascade_and_its_figures_come_back_as_a_notice():
    from relserve.cascade.report import CascadeReport
    from relserve.postgres.calls import notice_cascade
    from relserve.postgres.errors import PgError
    from relserve.postgres.settings import Settings, call_request, settings_from_row

    got = call_request("llm_filter_query", Settings(), "filter", None, {"cascade": "0.95"})
    assert got.call.cascade == 0.95 and got.options["cascade"] == 0.95
    session = settings_from_row({"cascade": "0.9"})
    assert call_request("llm_filter", session, "filter").options["cascade"] == 0.9
    # the call's 0 is sent as 0 (off, over the session's and the server's default), not left out
    assert call_request("llm_filter_query", session, "filter", None, {"cascade": 0}).options["cascade"] == 0.0
    assert "cascade" not in call_request("llm_filter", Settings(), "filter").options
    expected = r"must be an agreement target between 0.5 and 0.999 \(0.95: 95% of the rows answered as the LLM would\), or 0 for off"
    with pytest.raises(PgError, match=rf"^llm_filter_query: option cascade {expected}; got 'high'$"):
        call_request("llm_filter_query", Settings(), "filter", None, {"cascade": "high"})
    with pytest.raises(PgError, match=rf"^relserve.cascade {expected}; got 0.3$"):
        settings_from_row({"cascade": "0.3"})

    class Plpy:
        def __init__(self):
            self.notices = []

        def notice(self, message):
            self.notices.append(message)

    plpy = Plpy()
    report = CascadeReport(0.95, 20_000, 600, 800, train_answered=600, audit_answered=800, threshold=0.9,
                           proxy_rows=15_000, remainder_rows=3_600, agreement=0.97, agreement_low=0.96,
                           agreement_high=0.98, chose_rows=400, estimate_rows=400, audit_covered=330, audit_wrong=9)
    notice_cascade(plpy, "llm_filter_query", {"rows": 20_000, "cascade": report.as_dict()})
    notice_cascade(plpy, "llm_filter_query", {"rows": 20, "cascade": {"target": 0.95, "skipped": "20 prompts"}})
    notice_cascade(plpy, "llm_filter_query", {"rows": 20})
    assert len(plpy.notices) == 1 and plpy.notices[0].startswith("llm_filter_query: model cascade\n")
    assert "proxy rows              15,000" in plpy.notices[0] and "96.00% - 98.00%" in plpy.notices[0]
    assert CascadeReport.from_dict(report.as_dict()) == report


@pytest.mark.parametrize("module", ["relserve.planner.cascade_runner", "relserve.planner.cascade_drive", "relserve.cascade"])
def test_each_cascade_module_imports_first_in_a_fresh_process(module):
    # the runner imports the planner's modules, whose package imports plan_and_run, which runs
    # cascades: imported first, a module must not meet itself half-initialised
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]


@pytest.mark.parametrize("targets", [{"cascade": 0.95}, {"cascade_recall": 0.9}], ids=["agreement", "recall"])
def test_a_cascade_whose_sample_answered_nothing_stops_embedding_its_rows(monkeypatch, targets):
    """With no sample row answered (a spent budget refuses them all) no proxy is trained, so
    the rows' vectors would be read by nobody: the background embedding stops then, instead of
    embedding every row on the server's CPU while the LLM refuses the rest, request after
    request (an audit, 7 Dec). The embedding's first chunk waits for the rest's relQuery, which
    waits for the embedding to end or to take a second chunk."""
    monkeypatch.setattr(prefetch, "OVERLAP", True)
    started: list[prefetch.Prefetched] = []
    start = prefetch.Prefetched.start
    monkeypatch.setattr(prefetch.Prefetched, "start", lambda self: started.append(self) or start(self))
    embedder = RuleEmbedder()

    def refused(prompt, rq):
        if len(eng.submitted) >= 2:  # the rest's relQuery, after the proxy gave up
            wait_until(lambda: len(embedder.calls) >= 2 or not started[0]._thread.is_alive(),
                       "the embedding to stop or go on", timeout=30)
        raise RowError("budget exceeded: the request's max_tokens_total 10 is reached")

    eng = ScriptedEngine(answer=refused)

    class WaitingEmbedder(RuleEmbedder):
        def embed(self, texts):
            wait_until(lambda: len(eng.submitted) >= 2, "the rest's relQuery", timeout=30)
            return embedder.embed(texts)

    previous = embedding.use_embedder(WaitingEmbedder())
    try:
        call = make_call("llm_filter", "Is it worth it? Review: {r}", **targets)
        out = run_call(call, [reviews(4000)], engine=eng, progress=False, cache=False)
    finally:
        embedding.use_embedder(previous)
    assert out.cascade.fallback.startswith("too few")
    assert out.errors == ["llm_filter: budget exceeded: the request's max_tokens_total 10 is reached"] * 4000
    started[0]._thread.join(30)
    # at most the chunk under way when the proxy gave up (none, if the thread had not begun one);
    # before, every row: [1024, 1024, 1024, 928]
    assert embedder.calls in ([], [1024]), embedder.calls
