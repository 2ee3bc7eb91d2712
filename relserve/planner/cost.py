"""Run-time estimate of a relQuery from the engine's step-time cost model.

Prefill: the uncached prompt tokens, in steps of at most ``token_budget`` tokens.
Decode: rows in waves of ``max_seqs``, each wave decoding ``output_tokens`` steps.
A coarse figure, meant to compare plans (original vs planned) rather than to promise a time.
"""

from __future__ import annotations

import math

from relserve.backend.protocol import Backend
from relserve.engine.settings import EngineSettings
from relserve.policy.cost_model import CostModel

# the engine's own defaults: an estimate without an engine assumes the engine it would start
DEFAULT_MAX_SEQS: int = EngineSettings.model_fields["max_num_seqs"].default
DEFAULT_TOKEN_BUDGET: int = EngineSettings.model_fields["max_num_batched_tokens"].default


def cost_model_of(engine: Backend | None, model_id: str | None = None) -> CostModel:
    """The engine's cost model; before an engine starts, the one an engine of ``model_id`` would
    load (the calibration of this machine, else the preset: ``relserve.calibration``)."""
    model = getattr(engine, "cost_model", None) if engine is not None else None
    if model is None:
        from relserve.calibration import machine_cost_model

        model = machine_cost_model(model_id, EngineSettings().resolved_dtype) if model_id else CostModel()
    return model


def expected_output_tokens(max_tokens: int, constrained_choices: bool) -> int:
    # a label or yes/no ends after a couple of tokens; free text may run to max_tokens
    return min(max_tokens, 2) if constrained_choices else max_tokens


def estimate_seconds(
    cost_model: CostModel,
    rows: int,
    uncached_tokens: int,
    output_tokens: int,
    *,
    max_seqs: int = DEFAULT_MAX_SEQS,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> float:
    if rows <= 0:
        return 0.0
    prefill_steps = max(1, math.ceil(uncached_tokens / token_budget))
    prefill = cost_model.alpha_p * uncached_tokens + cost_model.beta_p * prefill_steps
    waves = math.ceil(rows / max_seqs)
    per_wave = min(rows, max_seqs)
    decode = waves * output_tokens * cost_model.decode(per_wave)
    return prefill + decode


def engine_limits(engine: Backend | None) -> tuple[int, int]:
    """(max concurrent sequences, prefill token budget per step) of the engine, or defaults."""
    settings = getattr(engine, "settings", None)
    seqs = getattr(settings, "max_num_seqs", None) or DEFAULT_MAX_SEQS
    budget = getattr(settings, "max_num_batched_tokens", None) or DEFAULT_TOKEN_BUDGET
    return int(seqs), int(budget)
