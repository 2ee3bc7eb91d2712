"""Running a trace through the simulated engine under one or several policies."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from relserve.errors import ConfigError
from relserve.policy import POLICY_NAMES, CostModel, Limits, Policy, PolicySettings, make_policy
from relserve.sim.clairvoyant import Limit, the_limit
from relserve.sim.engine import EngineSim
from relserve.sim.metrics import SimResult, relquery_timings, summarize
from relserve.sim.prepared_trace import OutputLengths, PreparedTrace, Renderer, Tokenizer, prepare_trace
from relserve.workloads.traces import TraceQuery, read_trace

#: vLLM-CPU's defaults on this machine (LLM class: 4096 batched tokens, 256 sequences, blocks of
#: 32 tokens) and a KV cache of 64k tokens; pass the engine's own figures for calibrated runs.
DEFAULT_LIMITS = Limits(
    max_num_batched_tokens=4096,
    max_num_seqs=256,
    kv_capacity_tokens=65_536,
    kv_free_tokens=65_536,
    block_size=32,
)

#: the reference for the slowdown metric: each relQuery alone on an empty engine under FCFS
#: prefill-first (the same for every policy, so slowdowns compare across policies)
ISOLATED_POLICY = "fcfs"

TraceInput = Sequence[TraceQuery] | PreparedTrace | str | os.PathLike[str]


def default_limits(**overrides: int) -> Limits:
    limits = dataclasses.replace(DEFAULT_LIMITS, **overrides)
    if "kv_free_tokens" not in overrides:
        limits = dataclasses.replace(limits, kv_free_tokens=limits.kv_capacity_tokens)
    return limits


def as_prepared(
    trace: TraceInput,
    limits: Limits,
    *,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
) -> PreparedTrace:
    """A prepared trace for ``limits.block_size`` from a trace, a trace file or a prepared trace."""
    if isinstance(trace, PreparedTrace):
        if trace.block_size != limits.block_size:
            raise ConfigError(f"trace was prepared for block size {trace.block_size}, limits say {limits.block_size}")
        return trace
    if isinstance(trace, (str, os.PathLike)):
        trace = read_trace(Path(trace))
    return prepare_trace(trace, block_size=limits.block_size, tokenize=tokenize, render=render, output_lengths=output_lengths)


def _prepared_run(
    trace: TraceInput,
    cost: CostModel | None,
    limits: Limits | None,
    tokenize: Tokenizer | None,
    render: Renderer | None,
    output_lengths: OutputLengths | None,
) -> tuple[CostModel, Limits, PreparedTrace]:
    """What every entry point below starts from: the default cost model and limits where none
    are given, and the trace prepared for those limits' block size."""
    cost = cost or CostModel()
    limits = limits or DEFAULT_LIMITS
    return cost, limits, as_prepared(trace, limits, tokenize=tokenize, render=render, output_lengths=output_lengths)


def _policy(policy: str | Policy, cost: CostModel, settings: PolicySettings | None) -> Policy:
    if isinstance(policy, Policy):
        return policy
    return make_policy(policy, cost, settings)


def isolated_latencies(
    trace: TraceInput,
    cost: CostModel | None = None,
    limits: Limits | None = None,
    *,
    policy: str = ISOLATED_POLICY,
    settings: PolicySettings | None = None,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
) -> dict[str, float]:
    """Latency of each relQuery run alone on an empty engine (empty prefix cache)."""
    cost, limits, prepared = _prepared_run(trace, cost, limits, tokenize, render, output_lengths)
    out: dict[str, float] = {}
    for q in prepared.relqueries:
        engine = EngineSim(make_policy(policy, cost, settings), cost, limits, [q.at(0.0)])
        engine.run()
        out[q.id] = engine.logs[0].finish
    return out


def simulate(
    trace: TraceInput,
    policy: str | Policy = "relserve",
    cost: CostModel | None = None,
    limits: Limits | None = None,
    *,
    settings: PolicySettings | None = None,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
    isolated: bool | Mapping[str, float] = True,
) -> SimResult:
    """Replay ``trace`` on one simulated engine under ``policy``.

    ``cost`` gives the step times (and the policy's predictions when ``policy`` is a name; pass a
    ``Policy`` object to let the policy believe another cost model than the simulated truth).
    ``isolated``: True computes each relQuery's isolated latency (FCFS, alone) for the slowdown
    metric, a mapping supplies them, False skips them.
    """
    cost, limits, prepared = _prepared_run(trace, cost, limits, tokenize, render, output_lengths)
    pol = _policy(policy, cost, settings)
    t0 = time.perf_counter()
    engine = EngineSim(pol, cost, limits, prepared.relqueries)
    stats = engine.run()
    wall = time.perf_counter() - t0
    if isolated is True:
        iso: Mapping[str, float] | None = isolated_latencies(prepared, cost, limits)
    elif isolated is False:
        iso = None
    else:
        iso = isolated
    timings = relquery_timings(engine.logs, iso)
    summary = summarize(pol.name, timings, stats, overhead_seconds=pol.overhead_seconds, wall_seconds=wall)
    return SimResult(
        summary=summary,
        settings=pol.settings.model_dump(),
        cost=cost.model_dump(),
        limits=dataclasses.asdict(limits),
        relqueries=timings,
    )


def simulate_many(
    trace: TraceInput,
    policies: Sequence[str] = POLICY_NAMES,
    cost: CostModel | None = None,
    limits: Limits | None = None,
    *,
    settings: PolicySettings | None = None,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
    isolated: bool = True,
) -> dict[str, SimResult]:
    """The same trace under several policies: {policy name: result}. Prompts are prepared once
    and the isolated latencies computed once."""
    cost, limits, prepared = _prepared_run(trace, cost, limits, tokenize, render, output_lengths)
    iso: bool | Mapping[str, float] = isolated_latencies(prepared, cost, limits) if isolated else False
    return {name: simulate(prepared, name, cost, limits, settings=settings, isolated=iso) for name in policies}


def limit_of(
    trace: TraceInput,
    cost: CostModel | None = None,
    limits: Limits | None = None,
    *,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
    clairvoyant: bool = True,
) -> Limit:
    """The trace's provable lower bound on mean relQuery latency and (unless ``clairvoyant`` is
    False) its best clairvoyant schedule: what every table's ratio columns divide by."""
    cost, limits, prepared = _prepared_run(trace, cost, limits, tokenize, render, output_lengths)
    return the_limit(prepared, cost, limits, with_clairvoyant=clairvoyant)
