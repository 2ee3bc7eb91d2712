"""Measuring the step-time model on a running engine.

A grid of probes, each a relQuery whose steps the scheduler plug-in logs (size, context,
duration), covering the shapes of step every policy takes:

* prefill probes: unique prompts of several lengths, batches from a quarter of the step's token
  budget to all of it, with no and with a large prefix-cached share (``max_tokens=1``, FCFS, so
  every step is a pure prefill: relserve's and the paper's baselines' prefill steps);
* decode probes: b rows (up to the engine's running limit) that each generate exactly
  ``decode_steps`` tokens (``ignore_eos``) over a context of c tokens. The context is a shared
  prefix, so the probe prefills it once and its decode steps still attend to all c tokens of
  every request;
* mixed probes: prompts filling a share of the step's whole token budget arriving while a batch
  of b rows decodes, under continuous batching with that budget (the steps stock vLLM, Sarathi
  and relserve's mixed candidate take), and small arrivals under Sarathi's chunk.

A step costs the engine more than its model run: vLLM's scheduling call (the policy's decision
in it) comes before, and handing the outputs to the front end after. What is fitted is a step's
*period*, from the start of its scheduling call to the start of the next one while the engine has
work, less the policy's own decision time (``period_of``): the time the next step waits.

``relserve.policy.step_fit`` fits one model to all of them (every ``held_out_every``-th probe
held out) and says how well each term explains the steps and how far it misses on the held-out
probes, per shape of step.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from relserve.engine.step_record import StepRecord
from relserve.policy import PolicySettings
from relserve.policy.step_fit import StepFit, StepSample, fit_steps, split_by_probe
from relserve.relquery import RelQuery

#: the step-log fields kept with a calibration
_RAW = ("kind", "prefill_tokens", "prefill_pairs", "decode_reqs", "decode_context", "duration", "schedule_s", "policy_s", "entered")

#: a pause longer than this between one step's end and the next step's start means the engine
#: waited for work (a probe's end), not that it was busy handing out outputs
IDLE_GAP_S = 0.05


@dataclass(frozen=True)
class ProbeGrid:
    """What ``calibrate`` measures. The defaults take about five minutes on 2 CPU cores."""

    prefill_lengths: tuple[int, ...] = (48, 192, 640)
    prefill_fractions: tuple[float, ...] = (0.25, 1.0)
    cached_fractions: tuple[float, ...] = (0.0, 0.75)
    #: decode batches; sizes above the engine's running limit are left out, and the limit itself
    #: is added (the largest decode step a policy can take)
    decode_sizes: tuple[int, ...] = (1, 8, 32, 96, 192)
    decode_contexts: tuple[int, ...] = (64, 512, 1024)
    decode_steps: int = 24
    #: mixed probes: b rows decoding over a context of c tokens while prompts of c tokens arrive
    #: that fill each share of the step's token budget
    mixed_sizes: tuple[int, ...] = (4, 32, 128)
    mixed_contexts: tuple[int, ...] = (64, 512)
    mixed_fill: tuple[float, ...] = (0.25, 1.0)
    #: every ``held_out_every``-th probe is kept out of the fit to measure its error
    held_out_every: int = 4
    #: a probe may fill at most this share of the KV cache
    kv_share: float = 0.7

    def small(self) -> ProbeGrid:
        """A quick grid for tests and smoke runs (about a minute)."""
        return ProbeGrid(
            prefill_lengths=(48, 256),
            prefill_fractions=(0.5,),
            cached_fractions=(0.0, 0.75),
            decode_sizes=(1, 16),
            decode_contexts=(64, 384),
            decode_steps=8,
            mixed_sizes=(8,),
            mixed_contexts=(64,),
            mixed_fill=(1.0,),
            held_out_every=3,
        )


@dataclass
class ShapeError:
    """How far the fitted model misses on the held-out probes of one shape of step."""

    shape: str
    probes: int
    steps: int
    #: median |predicted - measured| / measured over the shape's held-out steps
    median_step_error: float
    #: (predicted - measured) / measured of the shape's held-out steps' total time
    total_error: float


@dataclass
class Calibration:
    fit: StepFit
    samples: list[StepSample]
    held_out: list[StepSample]
    probes: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    source: str = "calibrated"
    #: the fit's error on held-out probes, per shape of step ("prefill cold", "decode", ...)
    by_shape: list[ShapeError] = field(default_factory=list)
    #: every probed step as the plug-in logged it (its probe, work, model run, scheduling call,
    #: policy time): what a fit on another definition of a step's time can be redone from
    steps: list[dict] = field(default_factory=list)

    @property
    def cost_model(self):
        return self.fit.cost_model(source=self.source)


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(n))


def _text_of(engine, rng: random.Random, tokens: int, prefix: str = "") -> str:
    """``prefix`` plus random words, so that the chat-templated prompt has about ``tokens`` tokens."""
    text = prefix + _words(rng, max(1, (tokens - len(engine.prompt_token_ids(prefix)) if prefix else tokens) // 3))
    while len(engine.prompt_token_ids(text)) < tokens:
        text += " " + _words(rng, max(1, (tokens - len(engine.prompt_token_ids(text))) // 3))
    return text


def period_of(step: StepRecord, following: StepRecord | None) -> float:
    """What a step cost the engine: from the start of its scheduling call to the start of the
    next step's while the engine had work (the model run, vLLM's scheduling and output handling),
    less the policy's own decision time; without a next step at once, its scheduling call and
    model run plus nothing more."""
    own = step.schedule_s + (step.duration or 0.0)
    if following is not None and step.entered is not None and following.entered is not None:
        gap = following.entered - step.entered
        if own <= gap <= own + IDLE_GAP_S:
            own = gap
    return max(own - step.policy_s, 1e-6)


def steps_as_samples(step_log: Iterable[StepRecord], probe: int = 0) -> list[StepSample]:
    """The step log's working steps as the fit's samples (``period_of`` each)."""
    steps = [s for s in step_log if s.works and s.duration is not None]
    out = []
    for i, s in enumerate(steps):
        out.append(
            StepSample(
                utok=s.prefill_tokens,
                pairs=s.prefill_pairs,
                reqs=s.decode_reqs,
                ctx=s.decode_context,
                seconds=period_of(s, steps[i + 1] if i + 1 < len(steps) else None),
                probe=probe,
            )
        )
    return out


def shape_of(kind: str, params: dict) -> str:
    """The shape of step a probe measures, for the per-shape errors."""
    if kind == "prefill":
        return "prefill cached" if params.get("cached") else "prefill cold"
    if kind == "decode":
        return "decode large" if params["batch"] >= 96 else "decode"
    return "mixed full budget" if params.get("fill", 0) >= 0.5 else "mixed"


def _probes(engine, grid: ProbeGrid, rng: random.Random) -> list[tuple[str, dict, Callable[[], None]]]:
    """The grid as (kind, parameters, run) triples, in a fixed order."""
    budget = engine.settings.max_num_batched_tokens
    cap = (engine.kv_capacity_tokens or 40_000) * grid.kv_share
    seqs = engine.settings.max_num_seqs
    out: list[tuple[str, dict, Callable[[], None]]] = []

    def prefill(length: int, fraction: float, cached: float) -> Callable[[], None]:
        def run() -> None:
            n = max(1, int(budget * fraction) // length)
            prefix = _text_of(engine, rng, int(length * cached)) + "\n" if cached else ""
            if prefix:
                engine.run(RelQuery("{text}", [{"text": prefix}], max_tokens=1))  # warm the shared part
            rows = [{"text": _text_of(engine, rng, length, prefix)} for _ in range(n)]
            engine.run(RelQuery("{text}", rows, max_tokens=1))

        return run

    def decode(size: int, context: int) -> Callable[[], None]:
        def run() -> None:
            shared = _text_of(engine, rng, max(context - 16, 8)) + "\n"
            rows = [{"text": shared + _words(rng, 4)} for _ in range(size)]
            engine.run(RelQuery("{text}", rows, max_tokens=grid.decode_steps, ignore_eos=True))

        return run

    def mixed(size: int, context: int, fill: float) -> Callable[[], None]:
        def run() -> None:
            shared = _text_of(engine, rng, max(context - 16, 8)) + "\n"
            decoding = engine.submit(
                RelQuery("{text}", [{"text": shared + _words(rng, 4)} for _ in range(size)], max_tokens=40, ignore_eos=True)
            )
            n = max(1, int(budget * fill) // context)
            for _ in range(2):
                rows = [{"text": _text_of(engine, rng, context)} for _ in range(n)]
                time.sleep(0.3)
                engine.run(RelQuery("{text}", rows, max_tokens=1))
            decoding.result()

        return run

    for length in grid.prefill_lengths:
        for fraction in grid.prefill_fractions:
            for cached in grid.cached_fractions:
                out.append(("prefill", {"prompt": length, "fraction": fraction, "cached": cached}, prefill(length, fraction, cached)))
    sizes = sorted({s for s in grid.decode_sizes if s <= seqs} | ({seqs} if max(grid.decode_sizes) > seqs else set()))
    for size in sizes:
        for context in grid.decode_contexts:
            if size * (context + grid.decode_steps + 32) <= cap:
                out.append(("decode", {"batch": size, "context": context}, decode(size, context)))
    for size in grid.mixed_sizes:
        for context in grid.mixed_contexts:
            for fill in grid.mixed_fill:
                if size <= seqs and size * (context + 72) + budget * fill <= cap:
                    out.append(("mixed", {"batch": size, "context": context, "fill": fill}, mixed(size, context, fill)))
    return out


def shape_errors(fit: StepFit, held: list[StepSample], probes: list[dict]) -> list[ShapeError]:
    """The fit's error on the held-out probes, shape by shape."""
    shape = {p["probe"]: p["shape"] for p in probes}
    groups: dict[str, list[StepSample]] = {}
    for s in held:
        groups.setdefault(shape[s.probe], []).append(s)
    out = []
    for name, steps in sorted(groups.items()):
        errs = sorted(abs(fit.predict(s) - s.seconds) / max(s.seconds, 1e-6) for s in steps)
        measured = sum(s.seconds for s in steps)
        out.append(ShapeError(name, len({s.probe for s in steps}), len(steps), errs[len(errs) // 2],
                              (sum(fit.predict(s) for s in steps) - measured) / measured))
    return out


def calibrate(engine, grid: ProbeGrid | None = None, seed: int = 0, progress: Callable[[int], None] | None = None) -> Calibration:
    """Run the probe grid on ``engine`` and fit the step model.

    ``progress(total)`` is called after each probe with the number of probes in all.
    """
    grid = grid or ProbeGrid()
    rng = random.Random(seed)
    t0 = time.monotonic()
    probes = _probes(engine, grid, rng)
    previous = engine.policy
    # continuous batching with the step's whole budget: stock vLLM's step shape, in the plug-in
    whole_budget = PolicySettings(sarathi_chunk_tokens=engine.settings.max_num_batched_tokens)
    samples: list[StepSample] = []
    described: list[dict] = []
    raw_steps: list[dict] = []
    try:
        engine.set_policy("fcfs")  # pure prefill or pure decode steps
        # warm-up: the first steps of a fresh engine are slower than the rest
        engine.run(RelQuery("{text}", [{"text": _words(rng, 40)} for _ in range(4)], max_tokens=4))
        for i, (kind, params, run) in enumerate(probes):
            if kind == "mixed":
                engine.set_policy("sarathi", whole_budget if params["fill"] >= 0.5 else None)
            else:
                engine.set_policy("fcfs")
            engine.reset_prefix_cache()
            engine.scheduler_stats(clear=True)
            run()
            log = engine.scheduler_stats(steps=True, clear=True).step_log
            raw_steps += [{"probe": i, **{k: getattr(s, k) for k in _RAW}} for s in log]
            steps = steps_as_samples(log, i)
            samples += steps
            described.append({"probe": i, "kind": kind, "shape": shape_of(kind, params), **params,
                              "steps": len(steps), "seconds": sum(s.seconds for s in steps)})
            if progress:
                progress(len(probes))
    finally:
        engine.set_policy(previous)
    fitted, held = split_by_probe(samples, grid.held_out_every)
    for d in described:
        d["held_out"] = d["probe"] % grid.held_out_every == grid.held_out_every - 1
    fit = fit_steps(fitted, held)
    return Calibration(fit, fitted, held, described, time.monotonic() - t0, source=f"calibrated on {engine.model_id}",
                       by_shape=shape_errors(fit, held, described), steps=raw_steps)
