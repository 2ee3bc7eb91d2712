"""N simulated engine replicas behind one dispatcher (``relserve.cluster.dispatch``).

A wrapper around the single-engine simulator: the dispatcher places every relQuery (or splits
it) at its arrival from its own books, exactly as the real cluster does; then each replica's
share of the trace runs on its own ``EngineSim`` with the same in-engine policy. A relQuery
finishes when its last part does. The dispatcher sees no simulated truth, only its estimates
(the real cluster also feeds back finished rows; here the estimates age with time instead).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from relserve.cluster.dispatch import Dispatcher, Work, make_dispatcher
from relserve.policy import CostModel, Limits, PolicySettings, make_policy
from relserve.sim.engine import EngineSim
from relserve.sim.prepared_trace import PreparedRelQuery, PreparedTrace
from relserve.sim.run import DEFAULT_LIMITS, TraceInput, as_prepared


@dataclass(frozen=True)
class ClusterSimResult:
    dispatcher: str
    replicas: int
    num_relqueries: int
    num_requests: int
    mean_latency_s: float
    p95_latency_s: float
    #: requests per second from the first arrival to the last finish
    throughput: float
    #: relQueries placed on more than one replica
    num_split: int
    #: share of prompt tokens the replicas' prefix caches served
    prefix_hit_rate: float
    #: requests per replica, fewest and most
    load_min: int
    load_max: int
    wall_s: float

    @property
    def throughput_per_replica(self) -> float:
        return self.throughput / self.replicas


def work_of(q: PreparedRelQuery) -> Work:
    # the dispatcher knows max_tokens, not the lengths the rows will really produce
    return Work(q.id, q.prompt_tokens, q.hashes, q.max_tokens)


def _part(q: PreparedRelQuery, rows: Sequence[int]) -> PreparedRelQuery:
    return PreparedRelQuery(
        q.id, q.arrival, q.max_tokens,
        tuple(q.prompt_tokens[i] for i in rows), tuple(q.hashes[i] for i in rows), tuple(q.output_tokens[i] for i in rows),
        q.call_key,
    )


def simulate_cluster(
    trace: TraceInput,
    replicas: int,
    dispatcher: str | Dispatcher = "relquery",
    policy: str = "relserve",
    cost: CostModel | None = None,
    limits: Limits | None = None,
    *,
    settings: PolicySettings | None = None,
    dispatcher_options: dict | None = None,
) -> ClusterSimResult:
    """Replay ``trace`` on ``replicas`` simulated engines, each running ``policy``."""
    cost = cost or CostModel()
    limits = limits or DEFAULT_LIMITS
    prepared: PreparedTrace = as_prepared(trace, limits)
    t0 = time.perf_counter()
    if isinstance(dispatcher, Dispatcher):
        disp = dispatcher
    else:
        opts = {
            "block_size": limits.block_size,
            "cache_blocks": limits.kv_capacity_tokens // limits.block_size,
            "kv_capacity_tokens": limits.kv_capacity_tokens,
            "max_num_seqs": limits.max_num_seqs,
            "max_num_batched_tokens": limits.max_num_batched_tokens,
        }
        opts.update(dispatcher_options or {})
        disp = make_dispatcher(dispatcher, replicas, cost, **opts)
    shares: dict[int, list[PreparedRelQuery]] = defaultdict(list)
    num_split = 0
    for q in prepared.relqueries:
        parts = disp.place(work_of(q), q.arrival)
        num_split += len(parts) > 1
        for p in parts:
            shares[p.replica].append(_part(q, p.rows))
    finish: dict[str, float] = {}
    prompt = cached = 0
    for qs in shares.values():
        sim = EngineSim(make_policy(policy, cost, settings), cost, limits, qs)
        stats = sim.run()
        prompt += stats.prefill_tokens
        cached += stats.cached_tokens
        for log in sim.logs:
            finish[log.id] = max(finish.get(log.id, 0.0), log.finish)
    arrival = {q.id: q.arrival for q in prepared.relqueries}
    lat = sorted(finish[i] - arrival[i] for i in finish)
    loads = [sum(q.size for q in shares.get(r, ())) for r in range(replicas)]
    span = max(finish.values()) - min(arrival.values()) if finish else 0.0
    return ClusterSimResult(
        dispatcher=disp.name,
        replicas=replicas,
        num_relqueries=len(prepared.relqueries),
        num_requests=prepared.num_requests,
        mean_latency_s=sum(lat) / len(lat) if lat else 0.0,
        p95_latency_s=lat[min(int(0.95 * len(lat)), len(lat) - 1)] if lat else 0.0,
        throughput=prepared.num_requests / span if span > 0 else 0.0,
        num_split=num_split,
        prefix_hit_rate=cached / prompt if prompt else 0.0,
        load_min=min(loads),
        load_max=max(loads),
        wall_s=time.perf_counter() - t0,
    )
