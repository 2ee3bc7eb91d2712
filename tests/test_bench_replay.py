"""A short trace replayed on the real engine under every policy: every row of every relQuery
comes back with an answer, and the summaries add up."""

from __future__ import annotations

import pytest

from relserve import Engine
from relserve.benchmark import replay, summarize
from relserve.policy import POLICY_NAMES, policy_class
from relserve.workloads import generate_trace

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def trace():
    # 4 relQueries of 1-3 rows over two tables, arriving about 4 per second, short answers only
    return generate_trace(["rotten_tomatoes", "beer_ratings"], 4, 4.0, rows=(1, 3), types=["filtering", "rating"], seed=7)


def _check(run, trace):
    by_id = {r.id: r for r in run.records}
    assert sorted(by_id) == sorted(q.id for q in trace)
    for q in trace:
        rec = by_id[q.id]
        assert rec.rows == len(q.rows) and rec.errors == 0
        assert len(rec.output_lengths) == len(q.rows) and all(n >= 1 for n in rec.output_lengths)
        # the parts sum to the last token's time less the arrival, both on CLOCK_MONOTONIC (one
        # clock for the engine core's process and this one), and the latency ends after that
        # token: no slack for the machine's speed
        assert rec.latency_s > 0 and rec.waiting_s + rec.core_s + rec.tail_s <= rec.latency_s


@pytest.mark.parametrize("policy", [p for p in POLICY_NAMES if policy_class(p).uses_plugin])
def test_every_plugin_policy_completes_every_row(engine, with_policy, trace, policy):
    with with_policy(policy):
        run = replay(engine, trace)
    _check(run, trace)
    assert run.steps > 0 and run.policy_seconds is not None
    s = summarize(policy, 1.0, 4.0, run, None)
    assert s.relqueries == 4 and s.rows == sum(len(q.rows) for q in trace) and s.errors == 0
    assert s.p50_latency <= s.p95_latency <= s.max_latency


def test_stock_vllm_completes_every_row(trace):
    from conftest import TEST_ENGINE_OPTIONS

    with Engine(**{**TEST_ENGINE_OPTIONS, "policy": "vllm"}) as stock:
        assert not stock.uses_plugin
        run = replay(stock, trace)
    _check(run, trace)
    assert run.policy_seconds is None
