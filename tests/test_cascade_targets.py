"""Recall and precision targets of a filter's cascade (relserve/cascade/targets.py, audit.py,
zones.py, hypergeometric.py; the runner relserve/planner/cascade_targets.py), without the engine
or the embedding model: scripted proxy scores and LLM answers for the statistics, a scripted
engine and embedder for the steps. The real engine and encoder: test_cascade_engine.py."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from cascade_doubles import RuleEmbedder
from engine_doubles import ScriptedEngine

from relserve.cascade import audit, calibration, embedding, hypergeometric, policy, zones
from relserve.cascade.audit import AuditDesign, Stratum
from relserve.cascade.targets import Targets
from relserve.errors import ConfigError
from relserve.functions import make_call
from relserve.planner.cascade_runner import PROXY
from relserve.planner.plan_and_run import analyzed, run_call


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))


# -- the hypergeometric bound -------------------------------------------------------------------


def exact_cdf(k, population, marked, draws):
    return sum(comb(marked, i) * comb(population - marked, draws - i) for i in range(k + 1)) / comb(population, draws)


@pytest.mark.parametrize("k, population, marked, draws", [(0, 1000, 10, 100), (3, 2000, 40, 150), (5, 50, 20, 10),
                                                          (2, 300, 30, 250), (0, 10, 0, 5)])
def test_hypergeometric_cdf_is_exact(k, population, marked, draws):
    assert hypergeometric.cdf(k, population, marked, draws) == pytest.approx(exact_cdf(k, population, marked, draws),
                                                                             rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("k, population, draws", [(0, 3000, 300), (2, 3000, 300), (7, 500, 480), (40, 18000, 1500)])
def test_upper_bound_is_the_largest_count_not_rejected(k, population, draws):
    ub = hypergeometric.upper_bound(k, population, draws, 0.05)
    assert exact_cdf(k, population, ub, draws) > 0.05 >= exact_cdf(k, population, ub + 1, draws)


def test_upper_bound_edges():
    # every row drawn: the count is known exactly
    assert hypergeometric.upper_bound(4, 100, 100, 0.05) == 4
    # nothing marked seen in 0 draws: anything is possible
    assert hypergeometric.upper_bound(0, 100, 0, 0.05) == 100
    # the rule of three: none seen in 1,000 draws of 100,000 rows -> about 3 / 1,000 of them
    assert 290 <= hypergeometric.upper_bound(0, 100_000, 1000, 0.05) <= 300
    with pytest.raises(ValueError):
        hypergeometric.upper_bound(5, 100, 4, 0.05)


# -- the zones on a crafted audit ---------------------------------------------------------------


def stratum(size: int, drawn: list[int]) -> Stratum:
    mask = np.zeros(size, dtype=bool)
    mask[drawn] = True
    return Stratum(np.arange(size), mask)


def test_recall_zone_is_the_last_step_of_the_fixed_sequence():
    # 1,000 'no' candidates (rising score), every 10th drawn (100 draws); the LLM's 'yes' rows among
    # the drawn ones sit at ranks 600 and 800. 300 kept 'yes' rows known (the census's): at
    # recall 0.9 the zone may hide at most 300 / 9 = 33.3 'yes' rows
    low = stratum(1000, list(range(0, 1000, 10)))
    answers = np.full(1000, zones.UNKNOWN)
    answers[low.drawn] = zones.NO
    answers[[600, 800]] = zones.YES
    census = np.arange(1000, 1300)
    answers = np.concatenate([answers, np.full(300, zones.YES)])
    design = AuditDesign(census, low, None, expected_kept=300.0, expected_missed=2.0)
    scores = np.concatenate([np.linspace(0.0, 0.4, 1000), np.full(300, 0.45)])
    got = zones.choose(design, scores, answers, train_positives=0, targets=Targets(0.9, None))
    ub = [hypergeometric.upper_bound(k, 1000, 100, 0.05) for k in (0, 1, 2)]
    assert ub[0] <= 300 / 9 < ub[1]  # one seen 'yes' row already lets 44 hide
    # so the zone stops below rank 600: 60% of the stratum (ranks 0..599), its 540 undrawn rows answered 'no'
    assert (got.no_rank, got.known_positives, got.misses_bound) == (600, 300, ub[0])
    assert got.recall_low == pytest.approx(300 / (300 + ub[0]))
    assert got.no_threshold == pytest.approx(scores[599])
    no, yes = zones.proxy_rows(design, got)
    assert len(no) == 540 and not len(yes) and not np.isin(no, np.arange(0, 600, 10)).any()


def test_a_failed_audit_row_counts_as_a_yes_and_ends_the_zone_sooner():
    low = stratum(1000, list(range(0, 1000, 10)))
    answers = np.full(1000, zones.UNKNOWN)
    answers[low.drawn] = zones.NO
    answers[400] = zones.UNKNOWN  # drawn, but the LLM failed the row
    design = AuditDesign(np.zeros(0, dtype=np.int64), low, None, 0.0, 0.0)
    got = zones.choose(design, np.linspace(0, 0.4, 1000), answers, train_positives=300, targets=Targets(0.9, None))
    assert got.no_rank == 400


def test_no_zone_when_too_few_kept_rows_are_known():
    low = stratum(1000, list(range(0, 1000, 10)))
    answers = np.where(low.drawn, zones.NO, zones.UNKNOWN)
    design = AuditDesign(np.zeros(0, dtype=np.int64), low, None, 0.0, 0.0)
    got = zones.choose(design, np.linspace(0, 0.4, 1000), answers, train_positives=20, targets=Targets(0.9, None))
    assert got.no_rank == 0 and got.recall_low is None and "allow 2" in got.recall_reason


def test_precision_zone_skips_candidates_that_cannot_pass_and_stops_at_the_first_failure():
    # 400 'yes' candidates (falling score), every other drawn (200); drawn rows from rank 300 on are
    # the LLM's 'no' (the proxy's least sure), the rest 'yes'
    high = stratum(400, list(range(0, 400, 2)))
    answers = np.where(high.drawn, zones.YES, zones.UNKNOWN)
    answers[300::2] = zones.NO
    design = AuditDesign(np.zeros(0, dtype=np.int64), None, high, 0.0, 0.0)
    got = zones.choose(design, np.linspace(1.0, 0.5, 400), answers, train_positives=0, targets=Targets(None, 0.9))
    floor = hypergeometric.upper_bound(0, 400, 200, 0.05)
    first = min(m for m in range(4, 401, 4) if floor <= 0.1 * m)  # the smallest zone that could pass
    assert first > 4  # the smallest zones are left out of the sequence, not failed
    # up to rank 300 nothing drawn is 'no'; past it each step of 4 rows adds 2 drawn 'no' rows
    passing = [m for m in range(first, 401, 4)
               if hypergeometric.upper_bound(max(0, (m - 300) // 2), 400, 200, 0.05) <= 0.1 * m]
    expected = max(m for m in passing if all(p in passing for p in range(first, m + 1, 4)))
    assert got.yes_rank == expected and 300 <= expected < 400
    assert got.precision_low == pytest.approx(1 - got.false_bound / expected)
    assert got.recall_reason is None and got.no_rank == 0


def test_precision_zone_ends_at_the_first_failure_even_if_a_larger_zone_would_pass():
    # 2,000 candidates, every other drawn; 30 drawn rows at ranks 400-458 are the LLM's 'no' (a
    # cluster the proxy was wrong about), every other drawn row 'yes'
    high = stratum(2000, list(range(0, 2000, 2)))
    answers = np.where(high.drawn, zones.YES, zones.UNKNOWN)
    answers[400:460:2] = zones.NO
    design = AuditDesign(np.zeros(0, dtype=np.int64), None, high, 0.0, 0.0)
    got = zones.choose(design, np.linspace(1.0, 0.5, 2000), answers, train_positives=0, targets=Targets(None, 0.9))

    def passes(m: int) -> bool:
        false = int(((answers[:m] == zones.NO) & high.drawn[:m]).sum())
        return hypergeometric.upper_bound(false, 2000, 1000, 0.05) <= 0.1 * m

    ranks = range(20, 2001, 20)
    first_failure = min(m for m in ranks if m > 400 and not passes(m))
    assert passes(2000)  # the whole stratum would pass on its own...
    # ...but the sequence stopped at its first failure
    assert got.yes_rank == first_failure - 20 and passes(got.yes_rank) and 400 <= got.yes_rank < 460


# -- coverage over seeds ------------------------------------------------------------------------


def rare_world(seed: int, n: int = 20_000, prevalence: float = 0.02, separation: float = 3.0):
    """Scripted LLM answers (``prevalence`` of them 'yes') and proxy scores: a calibrated
    logistic score of a feature whose 'yes' rows sit ``separation`` standard deviations higher."""
    rng = np.random.default_rng(10_000 + seed)
    yes = rng.uniform(size=n) < prevalence
    z = rng.normal(size=n) + separation * yes
    logit = separation * z - separation**2 / 2 + np.log(prevalence / (1 - prevalence))
    return yes, 1 / (1 + np.exp(-logit))


def cascade_over(yes: np.ndarray, scores: np.ndarray, targets: Targets, seed: int, train: int = 600):
    """The cascade's statistics on one seeded split: (recall, precision, LLM rows)."""
    n = len(yes)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    tr, rest = order[:train], order[train:]
    positives = int(yes[tr].sum())
    design = audit.design(scores[rest], targets, train_positives=positives, train_rows=train,
                          rng=np.random.default_rng([seed, 1]), max_draws=int(0.15 * n))
    got = np.full(len(rest), zones.UNKNOWN)
    audited = design.audited()
    got[audited] = np.where(yes[rest][audited], zones.YES, zones.NO)
    choice = zones.choose(design, scores[rest], got, train_positives=positives, targets=targets)
    no, kept = zones.proxy_rows(design, choice)
    final = yes.copy()
    final[rest[no]] = False
    final[rest[kept]] = True
    tp = int((final & yes).sum())
    return tp / yes.sum(), tp / final.sum(), n - len(no) - len(kept)


@pytest.mark.parametrize("targets", [Targets(0.9, None), Targets(None, 0.9), Targets(0.9, 0.9)],
                         ids=["recall", "precision", "both"])
def test_targets_hold_over_seeds_on_a_rare_filter(targets):
    # the case: 20,000 rows, 2% of them the LLM's 'yes', recall 0.9 / precision 0.9 at
    # failure 0.05: each target must hold in at least 19 of 20 seeds (here: every one of 40) and
    # the recall cascade must save LLM rows
    yes, scores = rare_world(0)
    runs = [cascade_over(yes, scores, targets, seed) for seed in range(40)]
    recall = np.array([r[0] for r in runs])
    precision = np.array([r[1] for r in runs])
    llm = np.array([r[2] for r in runs])
    if targets.recall is not None:
        assert (recall >= 0.9).sum() >= 38
        assert llm.mean() < 8000  # more than half the LLM rows saved
    if targets.precision is not None:
        assert (precision >= 0.9).sum() >= 38


def test_recall_bound_holds_where_the_point_estimate_fails():
    # a tight world: the zone's candidate 'yes' rows are spread evenly through the low stratum, so
    # the misses allowed (400 known / 9 = 44) are reached two thirds of the way up. Choosing the
    # zone by the sample's point estimate misses the target about half the time; the bound at
    # failure 0.05 may miss it in at most 5% of the seeds (allowing for the 200 seeds' noise: 8%)
    size, hidden, known = 18_000, 66, 400
    design_rows = np.arange(size)
    truth = np.zeros(size, dtype=bool)
    truth[np.linspace(0, size - 1, hidden).astype(int)] = True
    missed, naive_missed = 0, 0
    for seed in range(200):
        drawn = np.zeros(size, dtype=bool)
        drawn[np.random.default_rng(seed).choice(size, 3000, replace=False)] = True
        low = Stratum(design_rows, drawn)
        answers = np.where(drawn, np.where(truth, zones.YES, zones.NO), zones.UNKNOWN)
        design = AuditDesign(np.zeros(0, dtype=np.int64), low, None, 0.0, 0.0)
        got = zones.choose(design, np.linspace(0, 0.3, size), answers, train_positives=known, targets=Targets(0.9, None))
        m = got.no_rank
        recall = (known + hidden - (truth[:m] & ~drawn[:m]).sum()) / (known + hidden)
        missed += recall < 0.9
        # the point estimate: the sample's share of 'yes' rows below each candidate, scaled up
        seen = np.cumsum(drawn & truth) * size / 3000
        ok = [r for r in zones._ranks(size, zones.GRID) if seen[r - 1] <= known / 9]
        naive = max(ok) if ok else 0
        naive_missed += (known + hidden - (truth[:naive] & ~drawn[:naive]).sum()) / (known + hidden) < 0.9
    assert missed <= 16
    assert naive_missed >= 40  # the bound matters: without it the target is missed often


def test_precision_bound_holds_where_the_point_estimate_fails():
    # 3,000 'yes' candidates whose LLM 'no' share rises with rank, crossing 10% of the zone about
    # two thirds of the way down; 300 drawn
    size = 3000
    rank = np.arange(size)
    false = np.random.default_rng(7).uniform(size=size) < 0.3 * rank / size
    missed, naive_missed = 0, 0
    for seed in range(200):
        drawn = np.zeros(size, dtype=bool)
        drawn[np.random.default_rng(seed).choice(size, 300, replace=False)] = True
        high = Stratum(rank, drawn)
        answers = np.where(drawn, np.where(false, zones.NO, zones.YES), zones.UNKNOWN)
        design = AuditDesign(np.zeros(0, dtype=np.int64), None, high, 0.0, 0.0)
        got = zones.choose(design, np.linspace(1, 0.5, size), answers, train_positives=0, targets=Targets(None, 0.9))
        m = got.yes_rank
        missed += m and false[:m].mean() > 0.1
        seen = np.cumsum(drawn & false) * size / 300
        ok = [r for r in zones._ranks(size, zones.GRID) if seen[r - 1] <= 0.1 * r]
        naive = max(ok) if ok else 0
        naive_missed += naive and false[:naive].mean() > 0.1
    assert missed <= 16
    assert naive_missed >= 40


# -- the audit's design -------------------------------------------------------------------------


def test_design_partitions_the_rest_rows_and_is_seeded():
    yes, scores = rare_world(1, n=10_000)
    t = Targets(0.9, 0.9)
    d = audit.design(scores, t, train_positives=6, train_rows=300, rng=np.random.default_rng(3))
    strata = [d.census, d.low.rows, d.high.rows]
    assert sorted(np.concatenate(strata).tolist()) == list(range(10_000))
    assert (scores[d.high.rows] >= audit.YES_CUT).all() and (scores[d.census] < audit.YES_CUT).all()
    assert scores[d.low.rows].max() <= scores[d.census].min()
    assert np.all(np.diff(scores[d.low.rows]) >= 0) and np.all(np.diff(scores[d.high.rows]) <= 0)
    # the census holds at least twice the 'yes' rows the training share (6 / 300) predicts
    assert len(d.census) + d.high.size >= audit.CENSUS_FACTOR * 6 / 300 * 10_000
    assert audit.MIN_DRAWS <= d.low.draws < d.low.size and 0 < d.high.draws <= d.high.size
    again = audit.design(scores, t, train_positives=6, train_rows=300, rng=np.random.default_rng(3))
    assert np.array_equal(again.audited(), d.audited())
    only_precision = audit.design(scores, Targets(None, 0.9), train_positives=6, train_rows=300,
                                  rng=np.random.default_rng(3))
    assert only_precision.low is None and not len(only_precision.census)


def test_platt_scaling_undoes_an_overconfident_score():
    rng = np.random.default_rng(0)
    truth = rng.uniform(size=20_000)
    y = rng.uniform(size=20_000) < truth
    logit = np.log(truth / (1 - truth))
    overconfident = 1 / (1 + np.exp(-3 * logit))
    fitted = calibration.fit_platt(overconfident, y)
    assert fitted.slope == pytest.approx(1 / 3, abs=0.03) and fitted.intercept == pytest.approx(0, abs=0.05)
    assert np.abs(fitted(overconfident) - truth).max() < 0.03


# -- the options --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cascade_recall", "cascade_precision", "cascade_failure"])
@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, float("nan"), float("inf"), "high", True])
def test_bad_values_name_the_option(name, bad):
    with pytest.raises(ConfigError, match=rf"^{name} must be a number strictly between 0 and 1"):
        make_call("llm_filter", "Is {x} good?", **{"cascade_recall": 0.9, name: bad})


def test_targets_are_a_filters_and_a_failure_needs_a_target():
    with pytest.raises(ConfigError, match=r"^cascade_recall applies to llm_filter only .* not to llm_classify"):
        make_call("llm_classify", "Which {x}?", labels=["a", "b"], cascade_recall=0.9)
    with pytest.raises(ConfigError, match=r"^cascade_precision applies to llm_filter only .* not to llm_score"):
        make_call("llm_score", "Is {x} good?", cascade_precision=0.9)
    with pytest.raises(ConfigError, match=r"^cascade_failure is the probability that a cascade misses its target"):
        make_call("llm_filter", "Is {x} good?", cascade_failure=0.1)
    # with an agreement target it sets the agreement's confidence
    call = make_call("llm_classify", "Which {x}?", labels=["a", "b"], cascade=0.95, cascade_failure=0.1)
    assert policy.plan(call, 5000).confidence == 0.9


def test_targets_key_the_result_cache_and_plan():
    plain = make_call("llm_filter", "Is {x} good?", cascade=0.95)
    kept = make_call("llm_filter", "Is {x} good?", cascade_recall=0.9, cascade_failure=0.01)
    assert "cascade_recall" not in plain.sampling_settings()
    s = kept.sampling_settings()
    assert (s["cascade"], s["cascade_recall"], s["cascade_failure"]) == (None, 0.9, 0.01) and "cascade_precision" not in s
    p = policy.plan(kept, 20_000)
    assert p.applies and p.targets == Targets(0.9, None, 0.01) and (p.train, p.audit) == (600, 3000)
    assert "recall 0.9 of the 'yes' rows, failure probability 0.01" in p.describe()
    both = policy.plan(make_call("llm_filter", "Is {x}?", cascade=0.95, cascade_precision=0.8), 20_000)
    assert both.targets == Targets(None, 0.8) and "the agreement target 0.95 does not apply" in both.describe()
    assert not policy.plan(kept, 2999).applies and policy.plan(kept, 2999).on


def test_postgres_per_call_options_carry_the_targets_and_name_bad_ones():
    from relserve.postgres.errors import PgError
    from relserve.postgres.settings import SETTING_NAMES, Settings, call_request

    got = call_request("llm_filter_query", Settings(), "filter", None, {"cascade_recall": "0.9", "cascade_failure": 0.01})
    assert (got.call.cascade_recall, got.call.cascade_failure) == (0.9, 0.01)
    assert got.options["cascade_recall"] == 0.9
    assert "cascade_recall" not in SETTING_NAMES  # a call's, not a session's
    with pytest.raises(PgError, match=r"^llm_filter_query: option cascade_precision must be a number strictly between 0 "
                                      r"and 1 .*got 2.0$"):
        call_request("llm_filter_query", Settings(), "filter", None, {"cascade_precision": 2})
    with pytest.raises(PgError, match=r"^llm_classify_query: option cascade_recall applies to llm_filter only"):
        call_request("llm_classify_query", Settings(), "classify", ["a", "b"], {"cascade_recall": 0.9})


# -- the steps on a scripted engine and embedder ------------------------------------------------


def rare_rule(prompt, rq):
    return "yes" if "good" in prompt.split("Review:")[-1] else "no"


def rare_reviews(n: int) -> list[str]:
    """Rows whose every 50th one (2%) is 'good'."""
    return [f"item {i} is {'good' if i % 50 == 0 else 'bad'} value" for i in range(n)]


@pytest.fixture
def rule_embedder():
    e = RuleEmbedder()
    previous = embedding.use_embedder(e)
    yield e
    embedding.use_embedder(previous)


def test_recall_cascade_runs_three_relqueries_and_answers_no_where_sure(rule_embedder):
    n = 20_000
    eng = ScriptedEngine(answer=rare_rule)
    call = make_call("llm_filter", "Is it worth it? Review: {r}", cascade_recall=0.9, seed=4)
    out = run_call(call, [rare_reviews(n)], engine=eng, progress=False, cache=False)
    rep, t = out.cascade, out.cascade.targets
    # training rows, then the audit (census + drawn 'no' candidates), and nothing after: the
    # proxy is right everywhere, so its 'no' zone is every undrawn candidate
    assert [len(s) for s in eng.submitted] == [600, t.census + t.low_drawn]
    assert t.known_positives == n // 50 and t.high_drawn == 0  # every 'yes' row is in training or the census
    assert t.no_rows == t.low_rows - t.low_drawn == rep.proxy_rows and rep.remainder_rows == 0
    assert rep.llm_rows == 600 + t.census + t.low_drawn < 4000
    assert out.values == [i % 50 == 0 for i in range(n)] and out.errors == [None] * n
    proxy = [r for r in out.details if r.answered_by == PROXY]
    assert len(proxy) == t.no_rows and all(r.value is False and r.confidence > 0.99 for r in proxy)
    assert t.recall_low >= 0.9 and t.known_positives >= 390
    text = str(analyzed(call, out))
    assert "recall 0.9 of the 'yes' rows against the LLM's own answers, with probability >= 95%" in text
    assert f"'no' zone           {t.no_rows:>10,}   answered 'no' by the proxy" in text


def test_precision_cascade_answers_yes_where_sure(rule_embedder):
    n = 5000
    eng = ScriptedEngine(answer=lambda p, rq: "yes" if "good" in p.split("Review:")[-1] else "no")
    rows = [f"item {i} is {'good' if i % 2 == 0 else 'bad'} value" for i in range(n)]
    out = run_call(make_call("llm_filter", "Is it worth it? Review: {r}", cascade_precision=0.9), [rows], engine=eng,
                   progress=False, cache=False)
    t = out.cascade.targets
    assert t.census == 0 and t.low_rows == 0 and t.yes_rows == t.high_rows - t.high_drawn > 2000
    # training, the drawn 'yes' candidates, then every other row (no 'no' zone without a recall target)
    assert [len(s) for s in eng.submitted] == [300, t.high_drawn, n - 300 - t.high_rows]
    assert out.values == [i % 2 == 0 for i in range(n)]


def test_an_uninformative_proxy_audits_almost_every_row():
    # scores that say nothing: the census and the draws the audit needs to bound the misses cover
    # nearly the whole table, and the few rows left are answered 'no' only as far as the bound allows
    eng = ScriptedEngine(answer=rare_rule)
    previous = embedding.use_embedder(RuleEmbedder(informative=False))
    try:
        out = run_call(make_call("llm_filter", "Is it worth it? Review: {r}", cascade_recall=0.9),
                       [rare_reviews(5000)], engine=eng, progress=False, cache=False)
    finally:
        embedding.use_embedder(previous)
    rep, t = out.cascade, out.cascade.targets
    assert [len(s) for s in eng.submitted] == [300, rep.audit] + ([rep.remainder_rows] if rep.remainder_rows else [])
    assert rep.llm_rows == 5000 - t.no_rows and t.no_rows < 0.05 * 5000
    truth = [i % 50 == 0 for i in range(5000)]
    kept = sum(bool(v) and y for v, y in zip(out.values, truth))
    assert kept >= 0.9 * sum(truth) and all(v == y for v, y, r in zip(out.values, truth, out.details)
                                            if r.answered_by != PROXY)


# -- the embedding beside the sample ------------------------------------------------------------


def test_prefetched_vectors_are_the_inner_embedders():
    from relserve.cascade.prefetch import Prefetched

    inner = RuleEmbedder()
    texts = [f"item {i} is {'good' if i % 3 == 0 else 'bad'} value" for i in range(2500)]
    ahead = Prefetched(inner, texts, limit=2000, threads=None).start()
    got = ahead.embed(texts[1990:2010] + ["never seen"])
    want = RuleEmbedder().embed(texts[1990:2010] + ["never seen"])
    # held as float16; the 10 rows past the limit and the unknown text are embedded when asked
    assert np.allclose(got, want, atol=1e-2) and got.dtype == np.float32
    assert inner.calls == [1024, 976, 11] and ahead.seconds > 0
    stopped = Prefetched(RuleEmbedder(), texts, threads=None)
    stopped.stop()
    assert np.allclose(stopped.start().embed(texts[:3]), RuleEmbedder().embed(texts[:3]))


# -- the server ---------------------------------------------------------------------------------


def test_server_job_runs_the_audit_as_its_own_relquery(tmp_path, rule_embedder):
    import httpx
    from cascade_doubles import RuleEngine
    from server_fixtures import running_server

    n = 5000  # every 10th row 'good': at 2% the 5,000 rows' audit could not bound the misses low enough
    rows = [f"item {i} is {'good' if i % 10 == 0 else 'bad'} value" for i in range(n)]
    body = {"template": "Is it worth it? Review: {review}", "rows": [{"review": r} for r in rows],
            "function": "filter", "cascade_recall": 0.9, "seed": 2}
    eng = RuleEngine()
    with running_server(eng, cache=False) as srv:
        plan = httpx.post(srv.url + "/v1/relqueries/plan", json=body, timeout=60).json()
        job = httpx.post(srv.url + "/v1/relqueries", json=body, timeout=60).json()["id"]
        out = httpx.get(srv.url + f"/v1/relqueries/{job}/result", params={"timeout": 120}, timeout=120).json()
        bad = httpx.post(srv.url + "/v1/relqueries", json={**body, "cascade_recall": 1.2}, timeout=60)
        classify = httpx.post(srv.url + "/v1/relqueries", json={**body, "function": "classify", "labels": ["a", "b"]},
                              timeout=60)
    assert plan["cascade"]["recall"] == 0.9 and plan["cascade"]["target"] is None and plan["cascade"]["applies"]
    assert out["status"] == "finished"
    c = out["stats"]["cascade"]
    t = c["targets"]
    assert eng.rel_ids[:2] == [job, job + "-audit"] and [len(p) for p in eng.submitted[:2]] == [300, c["audit"]]
    assert c["llm_rows"] + c["proxy_rows"] == n and c["proxy_rows"] == t["no_rows"] > 0
    assert [r["value"] for r in out["rows"]] == [i % 10 == 0 for i in range(n)]
    assert all(r["value"] is False for r in out["rows"] if r["answered_by"] == PROXY)
    assert bad.status_code == 400 and "cascade_recall must be a number strictly between 0 and 1" in bad.text
    assert classify.status_code == 400 and "cascade_recall applies to llm_filter only" in classify.text
