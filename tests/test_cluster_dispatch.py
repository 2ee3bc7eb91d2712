"""The dispatchers (plain Python) and the simulated replicas behind them: fast, no engine."""

from __future__ import annotations

import pytest

from relserve.block_hashes import block_hashes
from relserve.cluster.dispatch import Work, make_dispatcher
from relserve.errors import ConfigError
from relserve.policy import CostModel
from relserve.sim import simulate
from relserve.sim.cluster import simulate_cluster
from relserve.workloads import generate_trace

BS = 32


def work(rel_id: str, rows: int, prefix: int = 0, row_len: int = 64, out: int = 8, seed: int = 0) -> Work:
    """``rows`` prompts sharing a ``prefix``-token static prefix, each with its own tail."""
    toks = [list(range(10_000, 10_000 + prefix)) + [seed * 1_000_000 + i * 1000 + k for k in range(row_len)] for i in range(rows)]
    return Work(rel_id, [len(t) for t in toks], [block_hashes(t, BS) for t in toks], out)


def test_round_robin_cycles_and_skips_a_dead_replica():
    d = make_dispatcher("round-robin", 3)
    assert [d.place(work(f"q{i}", 2), 0.0)[0].replica for i in range(4)] == [0, 1, 2, 0]
    d.mark_dead(1)
    assert [d.place(work(f"r{i}", 2), 0.0)[0].replica for i in range(3)] == [2, 0, 2]


def test_least_loaded_and_power_of_two_pick_fewest_outstanding_rows():
    for name in ("least-loaded", "power-of-two"):
        d = make_dispatcher(name, 2)
        assert d.place(work("big", 50), 0.0)[0].replica == 0
        # two replicas: power-of-two samples both, so it must pick the idle one too
        assert d.place(work("small", 2), 0.0)[0].replica == 1, name


def test_every_row_is_placed_exactly_once_and_books_count_it():
    d = make_dispatcher("relquery", 4)
    w = work("q", 200)
    parts = d.place(w, 0.0)
    rows = sorted(r for p in parts for r in p.rows)
    assert rows == list(range(200))
    assert len(parts) > 1  # 200 rows on four idle replicas: splitting finishes sooner
    assert sum(len(b.held) for b in d.books) == len(parts)


def test_small_relquery_is_not_split():
    d = make_dispatcher("relquery", 4)
    assert len(d.place(work("q", 20), 0.0)) == 1


def test_relquery_aware_goes_where_the_template_prefix_is_cached():
    d = make_dispatcher("relquery", 3, max_split=1)
    d.mark_dead(0)
    assert d.place(work("a", 4, prefix=512, seed=1), 0.0)[0].replica == 1
    d.mark_alive(0)
    # much later (the first is long done): the same template goes back to the replica caching it
    assert d.place(work("b", 4, prefix=512, seed=2), 100.0)[0].replica == 1
    # another template has no affinity: the lowest-index idle replica
    assert d.place(Work("c", [64] * 4, [()] * 4, 8), 200.0)[0].replica == 0


def test_relquery_aware_leaves_the_cached_replica_when_its_queue_costs_more():
    d = make_dispatcher("relquery", 2, max_split=1)
    home = d.place(work("a", 4, prefix=256, seed=1), 0.0)[0].replica
    d.place(work("long", 400, seed=9), 0.0)  # lands on the other, idle replica
    d.books[home].held.clear()
    other = 1 - home
    d.mark_dead(other)  # now pile work on the caching replica, the only one alive
    for k in range(4):
        assert d.place(work(f"pile{k}", 300, seed=20 + k), 0.0)[0].replica == home
    d.mark_alive(other)  # idle again: its books went with it
    assert d.place(work("b", 4, prefix=256, seed=2), 0.0)[0].replica == other


def test_measured_speed_slows_a_replica_down_in_the_books():
    d = make_dispatcher("relquery", 2, max_split=1)
    assert d.place(work("q0", 10, seed=0), 0.0)[0].replica == 0  # both idle: the lower index
    predicted = d.books[0].held["q0"].predicted
    d.finished(0, "q0", 10 * predicted)  # it took ten times what the books predicted
    assert d.books[0].speed == pytest.approx(0.8 + 0.2 * 10) and d.books[1].speed == 1.0
    # both idle again, but replica 0 computes slower: the next relQuery goes to 1
    assert d.place(work("q1", 10, seed=1), 100.0)[0].replica == 1


def test_no_live_replica_is_a_clear_error():
    d = make_dispatcher("least-loaded", 2)
    d.mark_dead(0)
    d.mark_dead(1)
    with pytest.raises(ConfigError, match="no replica is alive"):
        d.place(work("q", 1), 0.0)
    with pytest.raises(ConfigError, match="unknown dispatcher 'nope'"):
        make_dispatcher("nope", 2)


def test_one_simulated_replica_is_the_single_engine_simulator():
    trace = generate_trace("beer_reviews", 30, 0.2, seed=3)
    one = simulate_cluster(trace, 1, "relquery")
    ref = simulate(trace, "relserve", isolated=False).summary
    assert one.num_split == 0
    assert one.mean_latency_s == pytest.approx(ref.mean_latency, rel=1e-9)


def test_simulated_replicas_scale_at_saturation():
    # arrivals far above what a replica serves, scaled with N: throughput per replica vs one replica
    n = 8
    base = simulate_cluster(generate_trace("beer_reviews", 40, 1.0, seed=5), 1, "relquery")
    aware = simulate_cluster(generate_trace("beer_reviews", 40 * n, 1.0 * n, seed=5), n, "relquery")
    assert aware.throughput_per_replica / base.throughput >= 0.9


def test_relquery_aware_beats_round_robin_and_power_of_two_on_latency():
    # the step costs this load was chosen for (a 2-core Xeon: prefill 2.4x faster than AMD EPYC's)
    xeon = CostModel(alpha_p=8.55e-4, beta_p=0.018, alpha_d=1.68e-3, beta_d=0.0475)
    n = 8
    trace = generate_trace("beer_reviews", 20 * n, 0.12 * n, seed=1)
    got = {d: simulate_cluster(trace, n, d, cost=xeon).mean_latency_s for d in ("relquery", "round-robin", "power-of-two")}
    assert got["relquery"] < 0.9 * got["round-robin"]
    assert got["relquery"] < 0.9 * got["power-of-two"]


def test_serve_rejects_an_unknown_dispatcher_before_starting_anything():
    from typer.testing import CliRunner

    from relserve.cli import app

    res = CliRunner().invoke(app, ["serve", "--replicas", "2", "--dispatcher", "nope"])
    assert res.exit_code == 2
    assert "unknown dispatcher 'nope'" in res.output


def test_replicas_setting_must_be_a_number(monkeypatch):
    from relserve.backend.registry import new_backend as _new_default

    monkeypatch.setenv("RELSERVE_REPLICAS", "two")
    with pytest.raises(ConfigError, match="RELSERVE_REPLICAS must be a whole number of engine replicas, got 'two'"):
        _new_default({})
