"""Measuring the step-time predictors (paper Eq. 9) on a running engine.

Prefill probes: relQueries of unique prompts with ``max_tokens=1`` on a cold prefix cache, so
every step is a prefill of known uncached tokens. Decode probes: relQueries of b rows that each
generate exactly ``decode_steps`` tokens, so decode steps run at batch size b. The scheduler
plug-in logs every step's size and duration; least squares fits each line.
"""

from __future__ import annotations

import random
import string
import time
from dataclasses import dataclass

from relserve.policy import CostModel
from relserve.policy.cost_model import LinearFit, PlaneFit, fit_line_robust, fit_plane
from relserve.relquery import RelQuery


@dataclass
class Calibration:
    cost_model: CostModel
    prefill: LinearFit
    decode: LinearFit
    prefill_points: list[tuple[float, float]]
    decode_points: list[tuple[float, float]]
    mixed: PlaneFit | None = None
    mixed_points: list[tuple[float, float, float]] | None = None


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(n))


def _prompt_of(engine, rng: random.Random, tokens: int) -> str:
    """Random words whose chat-templated prompt has about ``tokens`` tokens."""
    words = max(1, tokens // 3)
    text = _words(rng, words)
    while len(engine.prompt_token_ids(text)) < tokens:
        text += " " + _words(rng, max(1, (tokens - len(engine.prompt_token_ids(text))) // 3))
    return text


def calibrate(
    engine,
    prompt_tokens=(64, 128, 256),
    batch_fractions=(0.1, 0.25, 0.5, 0.75, 1.0),
    decode_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 192),
    decode_steps: int = 16,
    decode_context: int = 160,
    repeats: int = 2,
    mixed: bool = True,
    seed: int = 0,
    progress=None,
) -> Calibration:
    """Fit the predictors over the engine's own range: prefill batches of prompts of typical
    lengths (attention makes a long prompt dearer per token) up to the step's token budget, and
    decode batches whose requests hold a typical context (``decode_context`` prompt tokens).

    ``progress(total)`` is called after each probe with the number of probes in all."""
    rng = random.Random(seed)
    sizes = [b for b in decode_sizes if b <= engine.settings.max_num_seqs]
    total = len(batch_fractions) + len(sizes) + (len(_MIXED_DECODE_SIZES) if mixed else 0)
    tick = (lambda: progress(total)) if progress else None
    previous = engine.policy
    engine.set_policy("fcfs")  # pure prefill or pure decode steps
    budget = engine.settings.max_num_batched_tokens
    try:
        # warm-up: the first steps of a fresh engine are slower than the rest
        engine.run(RelQuery("{text}", [{"text": _words(rng, 40)} for _ in range(4)], max_tokens=4))
        engine.scheduler_stats(clear=True)
        for fraction in batch_fractions:
            for length in prompt_tokens:
                n = max(1, int(budget * fraction) // length)
                for _ in range(repeats):
                    engine.reset_prefix_cache()
                    rows = [{"text": _prompt_of(engine, rng, length)} for _ in range(n)]
                    engine.run(RelQuery("{text}", rows, max_tokens=1))
            if tick:
                tick()
        prefill_log = engine.scheduler_stats(steps=True, clear=True)["step_log"]
        for b in sizes:
            for _ in range(repeats):
                # decode reads every cached token of its request: give it a typical context
                rows = [{"text": _prompt_of(engine, rng, decode_context)} for _ in range(b)]
                engine.run(RelQuery("{text}", rows, max_tokens=decode_steps, ignore_eos=True))
            if tick:
                tick()
        decode_log = engine.scheduler_stats(steps=True, clear=True)["step_log"]
        mixed_log = _mixed_probes(engine, rng, decode_context, tick) if mixed else []
    finally:
        engine.set_policy(previous)
    pre = [(s["prefill_tokens"], s["duration"]) for s in prefill_log if s["kind"] == "prefill" and s["decode_reqs"] == 0 and s["prefill_tokens"]]
    dec = [(s["decode_reqs"], s["duration"]) for s in decode_log if s["kind"] == "decode" and s["decode_reqs"]]
    fp = fit_line_robust([x for x, _ in pre], [y for _, y in pre])
    fd = fit_line_robust([x for x, _ in dec], [y for _, y in dec])
    if fp.intercept < 0:
        # a line through the origin rather than a negative fixed cost
        fp = _through_origin(pre, fp)
    cost = CostModel(
        alpha_p=max(fp.slope, 0.0),
        beta_p=max(fp.intercept, 0.0),
        alpha_d=max(fd.slope, 0.0),
        beta_d=max(fd.intercept, 0.0),
        source=f"calibrated on {engine.model_id}",
    )
    mix = [(s["prefill_tokens"], s["decode_reqs"], s["duration"]) for s in mixed_log if s["kind"] == "mixed" and s["prefill_tokens"] and s["decode_reqs"]]
    fm = None
    if len(mix) >= 8:
        fm = fit_plane([u for u, _, _ in mix], [n for _, n, _ in mix], [t for _, _, t in mix])
        if min(fm.a, fm.b, fm.c) >= 0:
            cost = cost.model_copy(update={"alpha_mp": fm.a, "alpha_md": fm.b, "beta_m": fm.c})
    return Calibration(cost, fp, fd, pre, dec, fm, mix)


#: decode batch sizes of the mixed-step probes
_MIXED_DECODE_SIZES = (4, 16, 48, 96)


def _mixed_probes(engine, rng: random.Random, context: int, tick) -> list[dict]:
    """Steps that prefill and decode at once: prompts arriving while a batch decodes, under
    Sarathi's chunked prefill (stock vLLM and Sarathi run such steps)."""
    engine.set_policy("sarathi")
    engine.scheduler_stats(clear=True)
    for b in _MIXED_DECODE_SIZES:
        decoding = engine.submit(
            RelQuery("{text}", [{"text": _prompt_of(engine, rng, context)} for _ in range(b)], max_tokens=40, ignore_eos=True)
        )
        for m in (1, 3, 6):
            time.sleep(0.3)
            rows = [{"text": _prompt_of(engine, rng, context)} for _ in range(m)]
            engine.run(RelQuery("{text}", rows, max_tokens=1))
        decoding.result()
        if tick:
            tick()
    return engine.scheduler_stats(steps=True, clear=True)["step_log"]


def _through_origin(points: list[tuple[float, float]], fit: LinearFit) -> LinearFit:
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    my = sum(ys) / len(ys)
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - slope * x) ** 2 for x, y in zip(xs, ys))
    return LinearFit(slope, 0.0, 1 - ss_res / ss_tot if ss_tot else 1.0, len(xs), fit.dropped)
