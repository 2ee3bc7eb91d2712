"""Measuring the step-time model on a running engine.

A grid of probes, each a relQuery whose steps the scheduler plug-in logs (size, context,
duration):

* prefill probes: unique prompts of several lengths, batches from a quarter of the step's token
  budget to all of it, with no and with a large prefix-cached share (``max_tokens=1``, FCFS, so
  every step is a pure prefill);
* decode probes: b rows that each generate exactly ``decode_steps`` tokens (``ignore_eos``) over
  a context of c tokens. The context is a shared prefix, so the probe prefills it once and its
  decode steps still attend to all c tokens of every request;
* mixed probes: prompts arriving while a batch decodes, under Sarathi's chunked prefill.

``relserve.policy.step_fit`` fits one model to all of them (every fourth probe held out) and
says how well each term explains the steps and how far it misses on the held-out probes.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from relserve.policy.step_fit import StepFit, StepSample, fit_steps, split_by_probe
from relserve.relquery import RelQuery


@dataclass(frozen=True)
class ProbeGrid:
    """What ``calibrate`` measures. The defaults take about five minutes on 2 CPU cores."""

    prefill_lengths: tuple[int, ...] = (48, 192, 640)
    prefill_fractions: tuple[float, ...] = (0.25, 1.0)
    cached_fractions: tuple[float, ...] = (0.0, 0.75)
    decode_sizes: tuple[int, ...] = (1, 8, 32, 96, 192)
    decode_contexts: tuple[int, ...] = (64, 512, 1024)
    decode_steps: int = 24
    mixed_sizes: tuple[int, ...] = (4, 32)
    mixed_contexts: tuple[int, ...] = (64, 512)
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
            held_out_every=3,
        )


@dataclass
class Calibration:
    fit: StepFit
    samples: list[StepSample]
    held_out: list[StepSample]
    probes: list[dict] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def cost_model(self):
        return self.fit.cost_model(source=self.source)

    source: str = "calibrated"


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(n))


def _text_of(engine, rng: random.Random, tokens: int, prefix: str = "") -> str:
    """``prefix`` plus random words, so that the chat-templated prompt has about ``tokens`` tokens."""
    text = prefix + _words(rng, max(1, (tokens - len(engine.prompt_token_ids(prefix)) if prefix else tokens) // 3))
    while len(engine.prompt_token_ids(text)) < tokens:
        text += " " + _words(rng, max(1, (tokens - len(engine.prompt_token_ids(text))) // 3))
    return text


def _samples(step_log: list[dict], probe: int) -> list[StepSample]:
    out = []
    for s in step_log:
        if not (s.get("prefill_tokens") or s.get("decode_reqs")) or "duration" not in s:
            continue
        out.append(
            StepSample(
                utok=s["prefill_tokens"],
                pairs=s.get("prefill_pairs", 0.0),
                reqs=s["decode_reqs"],
                ctx=s.get("decode_context", 0),
                seconds=s["duration"],
                probe=probe,
            )
        )
    return out


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

    def mixed(size: int, context: int) -> Callable[[], None]:
        def run() -> None:
            shared = _text_of(engine, rng, max(context - 16, 8)) + "\n"
            decoding = engine.submit(
                RelQuery("{text}", [{"text": shared + _words(rng, 4)} for _ in range(size)], max_tokens=40, ignore_eos=True)
            )
            for m in (1, 3, 6):
                time.sleep(0.3)
                rows = [{"text": _text_of(engine, rng, context)} for _ in range(m)]
                engine.run(RelQuery("{text}", rows, max_tokens=1))
            decoding.result()

        return run

    for length in grid.prefill_lengths:
        for fraction in grid.prefill_fractions:
            for cached in grid.cached_fractions:
                out.append(("prefill", {"prompt": length, "fraction": fraction, "cached": cached}, prefill(length, fraction, cached)))
    for size in grid.decode_sizes:
        for context in grid.decode_contexts:
            if size <= seqs and size * (context + grid.decode_steps + 32) <= cap:
                out.append(("decode", {"batch": size, "context": context}, decode(size, context)))
    for size in grid.mixed_sizes:
        for context in grid.mixed_contexts:
            if size * (context + 72) <= cap:
                out.append(("mixed", {"batch": size, "context": context}, mixed(size, context)))
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
    samples: list[StepSample] = []
    described: list[dict] = []
    try:
        engine.set_policy("fcfs")  # pure prefill or pure decode steps
        # warm-up: the first steps of a fresh engine are slower than the rest
        engine.run(RelQuery("{text}", [{"text": _words(rng, 40)} for _ in range(4)], max_tokens=4))
        for i, (kind, params, run) in enumerate(probes):
            engine.set_policy("sarathi" if kind == "mixed" else "fcfs")
            engine.reset_prefix_cache()
            engine.scheduler_stats(clear=True)
            run()
            steps = _samples(engine.scheduler_stats(steps=True, clear=True)["step_log"], i)
            samples += steps
            described.append({"probe": i, "kind": kind, **params, "steps": len(steps), "seconds": sum(s.seconds for s in steps)})
            if progress:
                progress(len(probes))
    finally:
        engine.set_policy(previous)
    fitted, held = split_by_probe(samples, grid.held_out_every)
    for d in described:
        d["held_out"] = d["probe"] % grid.held_out_every == grid.held_out_every - 1
    fit = fit_steps(fitted, held)
    return Calibration(fit, fitted, held, described, time.monotonic() - t0, source=f"calibrated on {engine.model_id}")
