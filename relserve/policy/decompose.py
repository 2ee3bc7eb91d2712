"""Batch decomposition of a relQuery (paper Algorithm 1) and the Priority Estimation Model (Eq. 10).

The decomposition replays how the engine would run the relQuery alone: prefill batches filled up
to ``max_num_batched_tokens``; when the KV capacity or ``max_num_seqs`` would be exceeded, the
requests admitted so far decode to completion (``OL`` decode steps) and the cache is free again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.policy.cost_model import CostModel


@dataclass
class Decomposition:
    #: uncached tokens of each prefill batch
    prefill_batches: list[float] = field(default_factory=list)
    #: request count of each decode batch (one entry per decode step)
    decode_batches: list[int] = field(default_factory=list)

    def duration(self, cost: CostModel) -> float:
        """PEM (Eq. 10): the sum of the predicted batch durations."""
        return sum(cost.prefill(u) for u in self.prefill_batches) + sum(cost.decode(n) for n in self.decode_batches)


def batch_decompose(
    utoks: Sequence[float],
    output_len: int,
    *,
    cap: float,
    max_num_seqs: int,
    max_num_batched_tokens: float,
) -> Decomposition:
    """Algorithm 1 over the not-yet-prefilled requests of one relQuery.

    ``utoks`` holds the uncached prompt tokens of each request (already-prefilled requests are
    left out, as the paper does). ``accum`` restarts at 0 after a decode-to-completion, because
    the KV space is free again at that point (the paper's listing never resets it).
    """
    out = Decomposition()
    p_tokens = 0.0
    p_count = 0  # requests in the current prefill batch p
    d_count = 0  # requests in the current decode batch d
    accum = 0.0
    for u in utoks:
        if d_count and (u + accum > cap or d_count + 1 > max_num_seqs):
            if p_count:
                out.prefill_batches.append(p_tokens)
            out.decode_batches.extend([d_count] * output_len)
            p_tokens, p_count, d_count, accum = 0.0, 0, 0, 0.0
        if p_count and u + p_tokens > max_num_batched_tokens:
            out.prefill_batches.append(p_tokens)
            p_tokens, p_count = 0.0, 0
        p_tokens += u
        p_count += 1
        d_count += 1
        accum += u
    if p_count:
        out.prefill_batches.append(p_tokens)
    if d_count:
        out.decode_batches.extend([d_count] * output_len)
    return out
