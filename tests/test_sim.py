"""The simulator on tiny traces whose timelines are worked out by hand.

Prompts are written as space-separated words; the default ``word_tokenizer`` makes each word one
token, so a row "a1 a2 a3" is a 3-token prompt and rows sharing leading words share blocks.
Step costs: prefill(u) = 0.001 u + 0.01, decode(n) = 0.002 n + 0.02,
mixed(u, n) = 0.001 u + 0.002 n + 0.02 (when u > 0).
"""

from __future__ import annotations

import json

import pytest

from relserve.policy import CostModel, Limits, PolicySettings, make_policy
from relserve.sim import (
    BlockPool,
    EngineSim,
    SimulationError,
    SweepPoint,
    block_hashes,
    choose_threshold,
    prepare_trace,
    simulate,
    simulate_many,
    sweep_starvation,
    word_tokenizer,
    write_results,
)
from relserve.workloads import TraceQuery, generate_trace

COST = CostModel(alpha_p=0.001, beta_p=0.01, alpha_d=0.002, beta_d=0.02)
EXACT = dict(rel=0, abs=1e-12)


def limits(mnbt=1000, seqs=10, kv=1024, bs=4) -> Limits:
    return Limits(max_num_batched_tokens=mnbt, max_num_seqs=seqs, kv_capacity_tokens=kv, kv_free_tokens=kv, block_size=bs)


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def rq(rel_id: str, arrival: float, prompts: list[str], max_tokens: int) -> TraceQuery:
    return TraceQuery(id=rel_id, arrival_s=arrival, template="{x}", max_tokens=max_tokens, rows=[{"x": p} for p in prompts])


def timing(result, rel_id):
    (t,) = [t for t in result.relqueries if t.id == rel_id]
    return t


def run_engine(trace, policy, lim, **kw):
    prepared = prepare_trace(trace, block_size=lim.block_size, **kw)
    engine = EngineSim(make_policy(policy, COST, PolicySettings(starvation_threshold=None)), COST, lim, prepared.relqueries)
    engine.run()
    return engine


# -- tokens and the block pool --------------------------------------------------------------------


def test_word_tokenizer_is_deterministic_words_and_punctuation():
    assert len(word_tokenizer("Is it good? Answer yes.")) == 7
    assert word_tokenizer("same words") == word_tokenizer("same  words")
    assert word_tokenizer("a b")[0] != word_tokenizer("b a")[0]


def test_block_hashes_chain_the_prefix():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    b = block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)
    c = block_hashes([0, 2, 3, 4, 5, 6, 7, 8], 4)
    assert len(a) == 2 and a == b  # only full blocks
    assert c[1] != a[1]  # same second block, different parent


def test_pool_evicts_least_recently_released_tail_first():
    pool = BlockPool(num_blocks=4, block_size=4)
    x, y = (11, 12), (21, 22)
    for hs in (x, y):
        assert pool.take(2)
        for h in hs:
            pool.publish(h)
        pool.release(hs, 0)
    assert pool.available == 4 and pool.num_free == 0
    assert pool.hit_blocks(x, 9) == 2
    assert pool.take(1)  # evicts x's tail block, released first
    assert pool.hit_blocks(x, 9) == 1 and pool.hit_blocks(y, 9) == 2
    assert pool.take(1)
    assert pool.hit_blocks(x, 9) == 0 and pool.hit_blocks(y, 9) == 2
    assert pool.evictions == 2
    assert not pool.take(3)


def test_hit_is_capped_one_token_short_of_the_prompt():
    pool = BlockPool(num_blocks=8, block_size=4)
    hs = (1, 2)
    pool.take(2)
    for h in hs:
        pool.publish(h)
    assert pool.hit_blocks(hs, 8) == 1  # an 8-token prompt fully cached still recomputes a block
    assert pool.hit_blocks(hs, 9) == 2


# -- exact timelines ------------------------------------------------------------------------------


def test_fcfs_two_relqueries_exact():
    trace = [rq("A", 0.0, [words("a", 10), words("b", 10)], 3), rq("B", 0.05, [words("c", 20)], 2)]
    res = simulate(trace, "fcfs", COST, limits())
    # t=0     prefill A0+A1 (20 tok)   0.030 -> 0.030
    # t=0.030 decode 2                 0.024 -> 0.054   (B not yet arrived)
    # t=0.054 prefill B0 (20 tok)      0.030 -> 0.084
    # t=0.084 decode 3                 0.026 -> 0.110   everyone done
    a, b = timing(res, "A"), timing(res, "B")
    assert (a.first_prefill_start, a.last_prefill_end, a.finish) == pytest.approx((0.0, 0.030, 0.110), **EXACT)
    assert (a.waiting, a.core, a.tail, a.latency) == pytest.approx((0.0, 0.030, 0.080, 0.110), **EXACT)
    assert (b.first_prefill_start, b.last_prefill_end, b.finish) == pytest.approx((0.054, 0.084, 0.110), **EXACT)
    assert (b.waiting, b.core, b.tail, b.latency) == pytest.approx((0.004, 0.030, 0.026, 0.060), **EXACT)
    s = res.summary
    assert s.steps == {"idle": 0, "prefill": 2, "decode": 2, "mixed": 0}
    assert s.mean_latency == pytest.approx(0.085, **EXACT)
    assert s.max_latency == pytest.approx(0.110, **EXACT)
    assert s.simulated_seconds == pytest.approx(0.110, **EXACT)
    assert s.throughput_requests_per_s == pytest.approx(3 / 0.110, **EXACT)
    assert s.output_tokens == 3 + 3 + 2
    # isolated: A alone = prefill(20) + 2 decodes of 2 = 0.078; B alone = prefill(20) + decode(1) = 0.052
    assert (a.isolated, b.isolated) == pytest.approx((0.078, 0.052), **EXACT)
    assert b.slowdown == pytest.approx(0.060 / 0.052, **EXACT)


SMALL_AFTER_BIG = [rq("A", 0.0, [words("a", 10), words("b", 10), words("c", 10)], 4), rq("B", 0.01, [words("d", 10)], 2)]


def test_fcfs_small_after_big_exact():
    res = simulate(SMALL_AFTER_BIG, "fcfs", COST, limits(mnbt=10), isolated=False)
    # one 10-token request per prefill (0.02 each): A0, A1, A2, B0 end at 0.08; decode 4 (0.028)
    # -> 0.108 (B done); decode 3 twice (0.026) -> 0.160 (A done)
    a, b = timing(res, "A"), timing(res, "B")
    assert (a.last_prefill_end, a.finish) == pytest.approx((0.060, 0.160), **EXACT)
    assert (b.first_prefill_start, b.last_prefill_end, b.finish, b.latency) == pytest.approx((0.060, 0.080, 0.108, 0.098), **EXACT)


def test_relserve_small_after_big_exact():
    pol = make_policy("relserve", COST, PolicySettings(starvation_threshold=None))
    res = simulate(SMALL_AFTER_BIG, pol, COST, limits(mnbt=10), isolated=False)
    # t=0     only-prefill A0                      -> 0.020
    # t=0.020 Prio(B)=0.064 < Prio(A)=0.136: preempt, prefill B0 -> 0.040
    # t=0.040 transitional (A waits, B running): Delta+ = 0.020 + 0.002*1*1, Delta- = 1*0.02*1,
    #         Delta = +0.002 -> decode A0,B0 (0.024) -> 0.064, B done
    # t=0.064 internal: prefill A1 -> 0.084, prefill A2 -> 0.104
    # decode 3 (0.026) twice -> 0.156, A0 done; decode 2 (0.024) -> 0.180, A done
    a, b = timing(res, "A"), timing(res, "B")
    assert (b.first_prefill_start, b.last_prefill_end, b.finish, b.latency) == pytest.approx((0.020, 0.040, 0.064, 0.054), **EXACT)
    assert (a.first_prefill_start, a.last_prefill_end, a.finish) == pytest.approx((0.0, 0.104, 0.180), **EXACT)
    assert (a.core, a.tail) == pytest.approx((0.104, 0.076), **EXACT)
    assert res.summary.steps == {"idle": 0, "prefill": 4, "decode": 4, "mixed": 0}
    assert pol.aba.last_delta == pytest.approx((0.002, 0.022, 0.020), **EXACT)
    assert res.summary.mean_latency < simulate(SMALL_AFTER_BIG, "fcfs", COST, limits(mnbt=10), isolated=False).summary.mean_latency


@pytest.mark.parametrize("policy,lim,settings", [
    ("vllm", limits(mnbt=16), None),
    ("sarathi", limits(mnbt=1000), PolicySettings(sarathi_chunk_tokens=16)),
])
def test_mixed_step_chunks_the_prefill(policy, lim, settings):
    trace = [rq("A", 0.0, [words("a", 10), words("b", 10)], 2)]
    res = simulate(trace, policy, COST, lim, settings=settings, isolated=False)
    # t=0     A0 takes 10 tokens, A1 the 6 left of the budget, nothing decodes: prefill(16) = 0.026
    # t=0.026 A0 decodes (1), A1 finishes its prompt (4): mixed(4, 1) = 0.004 + 0.002 + max(0.01, 0.02)
    #         = 0.026 -> 0.052, A0 done
    # t=0.052 A1 decodes alone: decode(1) = 0.022 -> 0.074
    a = timing(res, "A")
    assert (a.first_prefill_start, a.last_prefill_end, a.finish) == pytest.approx((0.0, 0.052, 0.074), **EXACT)
    assert res.summary.steps["mixed"] == 3
    assert res.summary.output_tokens == 4


def test_prompt_over_the_token_budget_is_chunked_across_prefill_and_decode_steps():
    res = simulate([rq("A", 0.0, [words("a", 20)], 2)], "fcfs", COST, limits(mnbt=16), isolated=False)
    # t=0     PREFILL computes 16 of 20 tokens under the budget: prefill(16) = 0.026, no token yet
    # t=0.026 DECODE carries the last 4 prompt tokens (as vLLM's running loop does), nothing else
    #         runs: prefill(4) = 0.014
    # t=0.040 decode(1) = 0.022 -> 0.062
    a = timing(res, "A")
    assert (a.first_prefill_start, a.last_prefill_end, a.finish) == pytest.approx((0.0, 0.040, 0.062), **EXACT)
    assert res.summary.steps == {"idle": 0, "prefill": 1, "decode": 2, "mixed": 0}


def test_output_lengths_shorten_requests():
    trace = [rq("A", 0.0, [words("a", 10), words("b", 10)], 3), rq("B", 0.05, [words("c", 20)], 2)]
    res = simulate(trace, "fcfs", COST, limits(), output_lengths={"A": [1, 2]}, isolated=False)
    # prefill A (0.030): A0 done; decode A1 (0.022) -> 0.052, A done; B: prefill 0.052..0.082, decode -> 0.104
    a, b = timing(res, "A"), timing(res, "B")
    assert (a.last_prefill_end, a.finish) == pytest.approx((0.030, 0.052), **EXACT)
    assert (b.first_prefill_start, b.finish) == pytest.approx((0.052, 0.104), **EXACT)
    by_function = simulate(trace, "fcfs", COST, limits(), output_lengths=lambda q, i: [1, 2][i] if q.id == "A" else 99, isolated=False)
    assert [t.finish for t in by_function.relqueries] == [t.finish for t in res.relqueries]


# -- prefix cache in the engine ---------------------------------------------------------------------


def test_second_request_hits_the_shared_two_block_prefix_in_the_same_step():
    shared = words("p", 8)  # exactly 2 blocks of 4
    trace = [rq("A", 0.0, [shared + " x1 x2 x3", shared + " y1 y2 y3"], 1)]
    res = simulate(trace, "fcfs", COST, limits(bs=4), isolated=False)
    s = res.summary
    assert s.cached_tokens == 2 * 4
    assert s.prefill_tokens == 22
    assert s.prefix_hit_rate == pytest.approx(8 / 22, **EXACT)
    # one prefill step of 11 + 3 uncached tokens; output length 1 finishes at its end
    assert timing(res, "A").finish == pytest.approx(COST.prefill(14), **EXACT)


def test_probe_reports_cached_tokens_to_the_policy():
    seen = []

    class Spy:
        name = "spy"
        settings = PolicySettings()
        overhead_seconds = 0.0

        def __init__(self):
            self.inner = make_policy("fcfs", COST)

        def schedule(self, view):
            seen.append([view.cached_tokens(r) for r in view.waiting])
            return self.inner.schedule(view)

    shared = words("p", 8)
    trace = [rq("A", 0.0, [shared + " x1"], 1), rq("B", 1.0, [shared + " y1", shared], 1)]
    prepared = prepare_trace(trace, block_size=4)
    EngineSim(Spy(), COST, limits(bs=4), prepared.relqueries).run()
    # A: nothing cached; B's rows: 2 blocks, and 1 block for the 8-token prompt (hit capped at 7 tokens)
    assert seen == [[0], [8, 4]]


# kv=16 (4 blocks): B evicts A's tail block; C hits A's head and evicts 2 of B's blocks for the rest
@pytest.mark.parametrize("kv,expected_hit,evictions", [(1024, 8, 0), (16, 4, 3)])
def test_finished_blocks_stay_cached_until_lru_eviction(kv, expected_hit, evictions):
    a = words("a", 8)
    trace = [
        rq("A", 0.0, [a], 1),  # 2 blocks, cached after A finishes
        rq("B", 1.0, [words("b", 12)], 1),  # 3 blocks: with 4 blocks in all, evicts A's tail block
        rq("C", 2.0, [a + " c1"], 1),  # 9 tokens: may hit both of A's blocks
    ]
    engine = run_engine(trace, "fcfs", limits(kv=kv, bs=4))
    assert engine.stats.cached_tokens == expected_hit
    assert engine.stats.evictions == evictions


def test_tight_kv_preempts_and_recomputes():
    # 3 blocks of 4 tokens; two 4-token prompts that each generate 6 tokens
    trace = [rq("A", 0.0, [words("a", 4), words("b", 4)], 6)]
    engine = run_engine(trace, "vllm", limits(kv=12, bs=4))
    st = engine.stats
    # t=0 both prefill (8 tokens, no decode: prefill(8) = 0.018); at t=0.018 A1 finds no block and
    # preempts itself; A0 decodes alone (0.022 each) to t=0.128, evicting A1's cached block on the
    # way; A1 then recomputes its prompt plus its first token (prefill(5) = 0.015, to 0.143) and
    # decodes 4 more tokens (to 0.231)
    assert st.preemptions == 1
    assert st.evictions == 2
    assert st.prefill_tokens == 4 + 4 + 5
    assert st.output_tokens == 12
    assert st.steps["mixed"] == 11
    (log,) = engine.logs
    assert (log.last_prefill_end, log.finish) == pytest.approx((0.143, 0.231), **EXACT)


def test_request_larger_than_kv_cache_is_an_error():
    with pytest.raises(SimulationError, match="kv_capacity_tokens"):
        simulate([rq("A", 0.0, [words("a", 30)], 5)], "fcfs", COST, limits(kv=16, bs=4), isolated=False)


# -- whole runs -----------------------------------------------------------------------------------


def small_trace():
    return generate_trace("beer_reviews", 12, 2.0, rows=(1, 12), seed=7)


def test_all_policies_finish_every_request_and_repeat_exactly(tmp_path):
    trace = small_trace()
    lim = limits(mnbt=512, seqs=32, kv=8192, bs=16)
    results = simulate_many(trace, ["vllm", "fcfs", "sarathi", "sp", "relserve", "relserve-pp", "relserve-dp"], COST, lim)
    again = simulate_many(trace, ["relserve"], COST, lim)
    n_req = sum(len(q.rows) for q in trace)
    for name, res in results.items():
        s = res.summary
        assert s.relqueries == 12 and s.requests == n_req, name
        assert s.output_tokens == sum(len(q.rows) * q.max_tokens for q in trace), name
        for t in res.relqueries:
            assert t.waiting + t.core + t.tail == pytest.approx(t.latency, abs=1e-9)
            assert t.waiting >= 0 and t.core > 0 and t.tail >= 0
            assert t.slowdown >= 1 - 1e-9 or name in ("vllm", "sarathi")  # chunking can beat the FCFS reference
    assert [t.finish for t in again["relserve"].relqueries] == [t.finish for t in results["relserve"].relqueries]
    write_results(results, tmp_path / "r.json", tmp_path / "r.md")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert set(doc["policies"]) == set(results)
    assert len(doc["policies"]["fcfs"]["relqueries"]) == 12
    md = (tmp_path / "r.md").read_text()
    lines = md.strip().splitlines()
    assert len(lines) == 2 + 7
    assert [c.strip() for c in lines[0].strip("|").split("|")][:3] == ["policy", "mean (s)", "P50"]
    for line, (name, res) in zip(lines[2:], results.items()):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 15 and cells[0] == name
        # the mean latency, worked out here from the relQueries' own arrival and finish times
        mean = sum(t.finish - t.arrival for t in res.relqueries) / len(res.relqueries)
        assert float(cells[1]) == pytest.approx(mean, abs=0.006), name
        assert float(cells[4]) == pytest.approx(max(t.latency for t in res.relqueries), abs=0.006), name


def test_choose_threshold_rule():
    pts = [
        SweepPoint(threshold=0.5, mean_latency=12.0, p95_latency=0, max_latency=20.0, starved_boosts=0),
        SweepPoint(threshold=1.0, mean_latency=10.4, p95_latency=0, max_latency=30.0, starved_boosts=0),
        SweepPoint(threshold=2.0, mean_latency=10.0, p95_latency=0, max_latency=40.0, starved_boosts=0),
        SweepPoint(threshold=None, mean_latency=10.1, p95_latency=0, max_latency=30.0, starved_boosts=0),
    ]
    # within 5% of 10.0: 1.0, 2.0, None; smallest max 30 is shared by 1.0 and None; smaller mean wins
    assert choose_threshold(pts, 0.05).threshold is None
    assert choose_threshold(pts, 0.25).threshold == 0.5
    assert choose_threshold(pts, 0.0).threshold == 2.0


def test_sweep_runs_each_threshold():
    sweep = sweep_starvation(small_trace(), [0.01, 1.0, None], COST, limits(mnbt=512, seqs=32, kv=8192, bs=16))
    assert [p.threshold for p in sweep.points] == [0.01, 1.0, None]
    assert sweep.chosen in sweep.points
    assert sweep.points[2].starved_boosts == 0 and sweep.points[0].starved_boosts > 0
