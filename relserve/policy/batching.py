"""Building a prefill batch from an ordered waiting queue within the host's limits."""

from __future__ import annotations

from collections.abc import Iterable

from relserve.policy.dpu import uncached_tokens
from relserve.policy.types import Req, StepView


def kv_headroom(view: StepView) -> int:
    """KV tokens left for new requests once running requests have room to finish decoding."""
    reserve = sum(r.remaining_output for r in view.running)
    return view.limits.kv_free_tokens - reserve


def fill_prefill_batch(queue: Iterable[Req], view: StepView) -> tuple[list[Req], int]:
    """Take requests from the front of ``queue`` while they fit; stop at the first that does not.

    Limits: ``max_num_batched_tokens`` on uncached prompt tokens, ``max_num_seqs`` on running plus
    admitted requests, and the KV cache (prompt plus room for ``max_tokens`` per request).
    Returns the batch and its uncached token count. Stopping at the first misfit keeps the queue's
    order, as vLLM does (head-of-line semantics).
    """
    lim = view.limits
    slots = lim.max_num_seqs - len(view.running)
    kv_left = kv_headroom(view)
    batch: list[Req] = []
    tokens = 0
    for req in queue:
        if len(batch) >= slots:
            break
        u = uncached_tokens(req, view)
        if batch and tokens + u > lim.max_num_batched_tokens:
            break
        need = req.prompt_tokens + req.remaining_output
        if need > kv_left and (batch or view.running):
            # An empty engine still admits one request: vLLM decides whether it really fits.
            break
        batch.append(req)
        tokens += u
        kv_left -= need
    return batch, tokens
