"""The seconds a call or a statement will take, from the simulator (relserve/sim/) running the
engine's own policy code with the calibrated step-cost model of this machine and model.

Work is given as chains (``Chain``): a call's stages (probes, a first pass, its rows), a
statement's sites one after another. A stage starts when the stage before it has finished (plus
the host's time between them, ``gaps``), which a replay decided in advance cannot know: so the
replay is run again with each next stage arriving when the last replay finished the one before
(a deterministic replay repeats itself exactly up to there). ``idle`` replays the work alone on
an empty engine; ``behind`` replays it after the engine's queue of the moment
(relserve/estimate/snapshot.py), which the same policy interleaves with it. Both start with the
prompt blocks the engine's prefix cache holds now (``cached``: relserve/estimate/prefix_cache.py).

What an estimate costs is bounded whatever the queue (issue 63): the replay holds at most
``snapshot.MAX_REPLAYED_REQUESTS`` queued requests (a sample; the rest summed up as tokens and
added as seconds at the engine's full throughput, in the share of the sampled waiting requests
the policy admitted before the call's own), and it stops once the call's last relQuery has
finished. The call's prompts are hashed in the caller's prefix-cache namespace (``salt``), the
queue's each in its own, so a replay finds another tenant's blocks no more than the engine does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.block_hashes import BlockHash, block_hashes
from relserve.calibration import load_policy_settings, machine_cost_model
from relserve.estimate.call_work import RelQueryWork
from relserve.estimate.snapshot import Background, Unreplayed
from relserve.policy import CostModel, Limits, PolicySettings, make_policy
from relserve.sim.engine import EngineSim, SimulationError, relquery_of
from relserve.sim.prepared_trace import PreparedRelQuery

#: bytes of KV cache per token of SmolLM2-135M (30 layers x K and V x 3 heads x 64 x float32), to
#: size the cache of an engine not started yet (a running one says its own)
KV_BYTES_PER_TOKEN = 46_080


@dataclass(frozen=True)
class Machine:
    """The engine a replay imitates: its policy and settings, step-cost model and limits."""

    policy: str
    settings: PolicySettings
    #: the step times the replay takes (the engine's cost model, plus its host's time per step)
    cost: CostModel
    limits: Limits
    #: the cost model the engine's policy decides with (None: ``cost``)
    policy_cost: CostModel | None = None

    @property
    def cost_source(self) -> str:
        return self.cost.source


def machine_of(engine, model_id: str) -> Machine:
    """``engine``'s policy, cost model and limits; with no engine, those an engine started now
    with the default settings would have (the stored calibration of this machine and model, else
    the preset for its dtype). A running engine's replay takes its steps' times from the cost
    model scaled by how long the engine's recent steps took against it (``with_measured_scale``),
    and pays, per step, what the engine measured its busy steps to take beyond their model runs
    (the host's scheduling and output handling, when the model was fitted on model runs alone)."""
    from relserve.engine.settings import EngineSettings

    if engine is not None and getattr(engine, "settings", None) is not None:
        s = engine.settings
        kv = getattr(engine, "kv_capacity_tokens", None) or int(s.kv_cache_gb * (1 << 30)) // KV_BYTES_PER_TOKEN
        limits = Limits(s.max_num_batched_tokens, s.max_num_seqs, kv, kv, engine.block_size)
        settings = getattr(engine, "policy_settings", None) or s.policy_settings
        cost = engine.cost_model
        steps = with_measured_scale(cost, getattr(engine, "step_scale", None))
        return Machine(engine.policy, settings, with_host_gap(steps, getattr(engine, "step_gap_s", None)), limits, cost)
    s = EngineSettings()
    kv = int(s.kv_cache_gb * (1 << 30)) // KV_BYTES_PER_TOKEN
    limits = Limits(s.max_num_batched_tokens, s.max_num_seqs, kv, kv, s.block_size)
    settings = load_policy_settings(model_id, s.resolved_dtype, s.policy_settings) or s.policy_settings
    return Machine(s.policy, settings, s.cost_model or machine_cost_model(model_id, s.resolved_dtype), limits)


#: a measured scale this close to 1 leaves the cost model as it is (the step times' own noise)
SCALE_TOLERANCE = 0.05


def with_measured_scale(cost: CostModel, scale: float | None) -> CostModel:
    """``cost`` with every term times ``scale``: the engine's recent busy steps took ``scale``
    times what ``cost`` predicts for them (relserve/engine/step_measures.py, ``StepScale``). A preset
    fitted on another CPU, another dtype's calibration or a machine that others now share
    otherwise misstates every estimate by that factor. Unchanged within ``SCALE_TOLERANCE``."""
    if not isinstance(scale, (int, float)) or not scale > 0 or abs(scale - 1.0) <= SCALE_TOLERANCE:
        return cost
    update = {term: value * scale for term, value in cost.model_dump().items() if isinstance(value, float)}
    return cost.model_copy(update={**update, "source": f"{cost.source}, times {scale:.2f} as this engine's steps measured"})


#: the cost models fitted on steps' model runs alone (the preset): the replay adds the host's time
#: per step the engine measured. A calibration fits each step's period from one scheduling call
#: to the next (relserve/engine/calibrate.py), which holds that time already.
MODEL_RUN_FITS = ("preset ",)


def with_host_gap(cost: CostModel, gap: float | None) -> CostModel:
    """``cost`` with ``gap`` seconds added to every step's fixed cost when it was fitted on model
    runs alone (``MODEL_RUN_FITS``): the host's time of a busy step besides its model run, as the
    engine measured it (relserve/engine/scheduler.py, ``StepGap``). Else ``cost`` as it is."""
    if not gap or not isinstance(gap, (int, float)) or not cost.source.startswith(MODEL_RUN_FITS):
        return cost
    return cost.model_copy(update={
        "beta_p": max(cost.beta_p + gap, 0.0), "beta_d": max(cost.beta_d + gap, 0.0),
        "beta_m": max(cost.beta_m + gap, 0.0) if cost.beta_m is not None else None,
        "source": f"{cost.source}, plus {gap * 1000:.0f} ms a step of the host's as this engine measured it",
    })


@dataclass
class Chain:
    """Stages of relQueries that run one after another (a call, or a statement's sites)."""

    name: str
    stages: list[list[RelQueryWork]]
    #: host seconds before each stage starts (after the previous one finished, or from now)
    gaps: list[float] = field(default_factory=list)
    #: chains (by name) that must have finished before this one starts (a statement's later site)
    after: tuple[str, ...] = ()

    def gap(self, stage: int) -> float:
        return self.gaps[stage] if stage < len(self.gaps) else 0.0


@dataclass(frozen=True)
class ChainTimes:
    #: seconds from now until each stage finished
    stage_ends: list[float]

    @property
    def seconds(self) -> float:
        return self.stage_ends[-1] if self.stage_ends else 0.0


@dataclass(frozen=True)
class Replay:
    """What a replay found: each chain's stage ends, and the engine's work in it."""

    chains: dict[str, ChainTimes]
    #: prompt tokens the replayed steps computed, and how many of those the prefix cache held
    prefill_tokens: int = 0
    cached_tokens: int = 0
    steps: int = 0
    #: seconds added to every end for the queued work the replay left out (``Unreplayed``)
    unreplayed_s: float = 0.0


def prepared(work: RelQueryWork, rel_id: str, arrival: float, block_size: int, salt: str | None = None) -> PreparedRelQuery:
    """``work`` as the simulator's relQuery: one request per row and suffix (a scored row's
    label-trie nodes), each with its prompt's block hashes (in the namespace of ``salt``) and
    the answer tokens expected."""
    lens, hashes, outs = [], [], []
    for ids, answer in zip(work.prompt_ids, work.answer_tokens):
        for suffix in work.suffixes:
            full = ids + list(suffix) if suffix else ids
            lens.append(len(full))
            hashes.append(block_hashes(full, block_size, salt))
            outs.append(max(1, min(answer, work.max_tokens)))
    return PreparedRelQuery(rel_id, arrival, work.max_tokens, tuple(lens), tuple(hashes), tuple(outs), work.call_key)


def unreplayed_seconds(rest: Unreplayed, machine: Machine) -> float:
    """The seconds of the queued requests a replay leaves out, with the engine's step-cost model:
    their prompts prefilled in steps of ``max_num_batched_tokens``, then decoded in waves of as
    many requests as ``max_num_seqs`` and the KV cache hold (each wave's context growing as it
    answers), none of it cached or overlapped."""
    if not rest.requests:
        return 0.0
    cost, limits = machine.cost, machine.limits
    n = rest.requests
    prompt = rest.prompt_tokens / n
    answer = max(1.0, rest.answer_tokens / n)
    steps = -(-rest.prompt_tokens // max(limits.max_num_batched_tokens, 1))
    prefill = cost.alpha_p * rest.prompt_tokens + cost.gamma_p * n * prompt * prompt / 2 + cost.beta_p * max(steps, 1)
    wave = max(1, min(n, limits.max_num_seqs, int(limits.kv_capacity_tokens // max(prompt + answer, 1.0))))
    waves, last = divmod(n, wave)
    decode = waves * cost.decode_run(wave, wave * prompt, answer)
    if last:
        decode += cost.decode_run(last, last * prompt, answer)
    return prefill + decode


def ahead_share(sim: EngineSim, background: Background, call: set[str]) -> float:
    """The share of the sampled waiting requests the policy admitted no later than the call's
    last request: the sample stands for the queue, so the same share of the requests it leaves
    out runs before the call too (all of them first come first served; few of them when the
    policy puts a small call first)."""
    if not background.sampled_waiting:
        return 0.0
    times = [t for t, rid in sim.admissions if relquery_of(rid) in call]
    if not times:
        return 0.0
    last = max(times)
    ahead = sum(1 for t, rid in sim.admissions if t <= last and rid in background.sampled_waiting)
    return ahead / len(background.sampled_waiting)


def replay(chains: Sequence[Chain], machine: Machine, background: Background | None = None,
           cached: Sequence[tuple[BlockHash, ...]] = (), salt: str | None = None) -> Replay:
    """When each chain's stages end, replayed on ``machine`` after ``background`` with the blocks
    ``cached`` in the prefix cache, the chains' prompts in the namespace of ``salt`` (see the
    module docstring). Raises SimulationError for work the engine could never hold."""
    block = machine.limits.block_size
    index = {chain.name: c for c, chain in enumerate(chains)}
    base: dict[tuple[int, int], list[PreparedRelQuery]] = {}
    for c, chain in enumerate(chains):
        for s, stage in enumerate(chain.stages):
            base[(c, s)] = [prepared(w, f"{c}/{s}/{k}", 0.0, block, salt) for k, w in enumerate(stage) if w.requests]
    ends: dict[tuple[int, int], float] = {}
    starts: dict[tuple[int, int], float] = {}
    sim = None
    # each replay may move the ends that later stages start from: replay until the starts hold
    for _ in range(4 * max(1, len(base))):
        wanted = _starts(chains, index, ends)
        if sim is not None and wanted.keys() == starts.keys() and all(abs(wanted[k] - starts[k]) < 1e-9 for k in wanted):
            break
        starts = wanted
        placed = [q.at(starts[key]) for key in starts for q in base[key]]
        sim = _run(machine, background, cached, placed, until_done=[q.id for q in placed])
        finish = {log.id: log.finish for log in sim.logs}
        ends = {key: max((finish[q.id] for q in base[key]), default=start) for key, start in starts.items()}
    extra = 0.0
    if sim is not None and background is not None and background.rest.requests:
        extra = ahead_share(sim, background, {q.id for q in placed}) * unreplayed_seconds(background.rest, machine)
    times = {chain.name: ChainTimes([ends[(c, s)] + extra for s in range(len(chain.stages))]) for c, chain in enumerate(chains)}
    if sim is None:
        return Replay(times)
    stats = sim.stats
    return Replay(times, stats.prefill_tokens, stats.cached_tokens, sum(stats.steps.values()), extra)


def _starts(chains: Sequence[Chain], index: dict[str, int], ends: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """When each stage starts that can be placed given the ``ends`` known: a chain's first stage
    after the chains it waits for, each next stage after the one before (plus the gaps)."""
    out: dict[tuple[int, int], float] = {}
    for c, chain in enumerate(chains):
        before = [_end(chains, ends, index[name]) for name in chain.after]
        if not chain.stages or any(b is None for b in before):
            continue
        out[(c, 0)] = max(before, default=0.0) + chain.gap(0)  # type: ignore[type-var]
        for s in range(1, len(chain.stages)):
            if (c, s - 1) not in ends:
                break
            out[(c, s)] = ends[(c, s - 1)] + chain.gap(s)
    return out


def _end(chains: Sequence[Chain], ends: dict[tuple[int, int], float], c: int) -> float | None:
    """When chain ``c`` finished (0 for a chain of no stages), None while it has not."""
    n = len(chains[c].stages)
    return 0.0 if n == 0 else ends.get((c, n - 1))


def _run(machine: Machine, background: Background | None, cached: Sequence[tuple[BlockHash, ...]],
         relqueries: list[PreparedRelQuery], until_done: Sequence[str] = ()) -> EngineSim:
    """The simulator over the queue and ``relqueries``; it stops once every relQuery of
    ``until_done`` has finished (the rest of the queue would change no end the estimate reads)."""
    queue = list(background.relqueries) if background is not None else []
    policy = make_policy(machine.policy, machine.policy_cost or machine.cost, machine.settings)
    limits = dataclasses.replace(machine.limits, kv_free_tokens=machine.limits.kv_capacity_tokens)
    sim = EngineSim(policy, machine.cost, limits, queue + relqueries, until_done=until_done)
    # the running requests' blocks last (the least recently used go first when the pool is full):
    # the engine holds those for sure, the finished work's only until it evicts them
    _warm(sim, [*cached, *(background.cached if background is not None else ())])
    sim.run()
    return sim


def _warm(sim: EngineSim, cached: Sequence[tuple[BlockHash, ...]]) -> None:
    """Put prompt blocks the engine holds now in the replay's prefix cache (the running requests'
    computed ones, and the call's the prefix cache kept from earlier work), so the replay resumes
    after them instead of computing them again."""
    pool = sim.pool
    for hashes in cached:
        for h in hashes:
            if h in pool.refs:
                continue
            if not pool.take(1):
                return
            pool.publish(h)
            pool.release([h], 0)


__all__ = ["Chain", "ChainTimes", "Machine", "Replay", "SimulationError", "machine_of", "prepared", "replay"]
