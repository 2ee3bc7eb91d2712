"""Batch decomposition of a relQuery (paper Algorithm 1) and the Priority Estimation Model (Eq. 10).

The decomposition replays how the engine would run the relQuery alone: prefill batches filled up
to ``max_num_batched_tokens``; when the KV capacity or ``max_num_seqs`` would be exceeded, the
requests admitted so far decode to completion (``OL`` decode steps) and the cache is free again.
Each batch also carries the context it attends to (prefill attention pairs, the decode batch's
prompt tokens), so the step-time model can charge long prompts and long answers what they cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.policy.cost_model import CostModel


@dataclass
class DecodeWave:
    """A batch decoding to completion: ``steps`` steps of ``size`` requests whose prompts hold
    ``context`` tokens in all when the wave starts."""

    size: int
    context: float
    steps: int


@dataclass
class Decomposition:
    #: uncached tokens of each prefill batch
    prefill_batches: list[float] = field(default_factory=list)
    #: attention pairs of each prefill batch (same order)
    prefill_pairs: list[float] = field(default_factory=list)
    waves: list[DecodeWave] = field(default_factory=list)

    @property
    def decode_batches(self) -> list[int]:
        """Request count of each decode step, one entry per step (Algorithm 1's list D)."""
        return [w.size for w in self.waves for _ in range(w.steps)]

    def duration(self, cost: CostModel) -> float:
        """PEM (Eq. 10): the sum of the predicted batch durations."""
        t = sum(cost.prefill(u, a) for u, a in zip(self.prefill_batches, self.prefill_pairs))
        return t + sum(cost.decode_run(w.size, w.context, w.steps) for w in self.waves)


def batch_decompose(
    utoks: Sequence[float],
    output_len: int,
    *,
    cap: float,
    max_num_seqs: int,
    max_num_batched_tokens: float,
    prompts: Sequence[float] | None = None,
) -> Decomposition:
    """Algorithm 1 over the not-yet-prefilled requests of one relQuery.

    ``utoks`` holds the uncached prompt tokens of each request (already-prefilled requests are
    left out, as the paper does); ``prompts`` their whole prompt lengths (default: ``utoks``,
    nothing cached). ``accum`` restarts at 0 after a decode-to-completion, because the KV space
    is free again at that point (the paper's listing never resets it).
    """
    out = Decomposition()
    if prompts is None:
        prompts = utoks
    p_tokens = p_pairs = 0.0
    p_count = 0  # requests in the current prefill batch p
    d_count = 0  # requests in the current decode batch d
    d_context = 0.0
    accum = 0.0
    for u, prompt in zip(utoks, prompts):
        if d_count and (u + accum > cap or d_count + 1 > max_num_seqs):
            if p_count:
                out.prefill_batches.append(p_tokens)
                out.prefill_pairs.append(p_pairs)
            out.waves.append(DecodeWave(d_count, d_context, output_len))
            p_tokens, p_pairs, p_count, d_count, d_context, accum = 0.0, 0.0, 0, 0, 0.0, 0.0
        if p_count and u + p_tokens > max_num_batched_tokens:
            out.prefill_batches.append(p_tokens)
            out.prefill_pairs.append(p_pairs)
            p_tokens, p_pairs, p_count = 0.0, 0.0, 0
        p_tokens += u
        p_pairs += u * (prompt - u + (u + 1) / 2)
        p_count += 1
        d_count += 1
        d_context += prompt
        accum += u
    if p_count:
        out.prefill_batches.append(p_tokens)
        out.prefill_pairs.append(p_pairs)
    if d_count and output_len > 0:
        out.waves.append(DecodeWave(d_count, d_context, output_len))
    return out
