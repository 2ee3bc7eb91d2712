"""Building a prefill batch from an ordered waiting queue within the host's limits."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from relserve.policy.types import Req, StepView


def blocks(tokens: int, block_size: int) -> int:
    """Whole KV blocks holding ``tokens`` tokens (vLLM allocates nothing smaller)."""
    return -(-tokens // block_size)


def kv_headroom(view: StepView, output_left: Callable[[Req], int] | None = None) -> int:
    """KV blocks left for new requests once running requests have blocks to finish decoding.

    A running request holds the blocks of its computed tokens and will need those of its whole
    sequence (prompt plus ``max_tokens``; plus ``output_left(r)`` when the host knows better,
    as the clairvoyant simulation does).
    """
    bs = view.limits.block_size
    reserve = sum(
        max(blocks(r.prompt_tokens + (r.max_tokens if output_left is None else output_left(r)), bs) - blocks(r.computed_tokens, bs), 0)
        for r in view.running
    )
    return view.limits.kv_free_blocks - reserve


def fill_prefill_batch(queue: Iterable[Req], view: StepView) -> tuple[list[Req], int]:
    """``prefill_candidate`` without the attention pairs: the batch and its uncached tokens."""
    batch, tokens, _ = prefill_candidate(queue, view)
    return batch, tokens


def prefill_candidate(
    queue: Iterable[Req],
    view: StepView,
    *,
    token_budget: int | None = None,
    output_left: Callable[[Req], int] | None = None,
    headroom: int | None = None,
) -> tuple[list[Req], int, float]:
    """Take requests from the front of ``queue`` while they fit; stop at the first that does not.

    Limits: ``max_num_batched_tokens`` on uncached prompt tokens, ``max_num_seqs`` on running plus
    admitted requests, and the KV cache in whole blocks, as vLLM allocates them: blocks for the
    request's whole sequence (prompt plus room for ``max_tokens``) less the prefix-cached ones,
    keeping the watermark free once anything runs beside it. Returns the batch, its uncached
    token count and the attention pairs those tokens compute (``cost_model.prefill_pairs``). Stopping at the first misfit keeps the queue's order, as vLLM does
    (head-of-line semantics).

    ``token_budget`` replaces ``max_num_batched_tokens`` (a chunk of a mixed step);
    ``output_left`` gives each request's output still to come in place of ``max_tokens`` (see
    ``kv_headroom``); ``headroom`` is ``kv_headroom(view)`` when the caller has it already (it
    sums over every running request, and an arranger builds several candidates a step).
    """
    lim = view.limits
    bs = lim.block_size
    budget = lim.max_num_batched_tokens if token_budget is None else token_budget
    slots = lim.max_num_seqs - len(view.running)
    kv_left = kv_headroom(view, output_left) if headroom is None else headroom
    batch: list[Req] = []
    tokens = 0
    pairs = 0.0
    for req in queue:
        if len(batch) >= slots:
            break
        cached = max(view.cached_tokens(req), req.computed_tokens)
        u = max(req.prompt_tokens - cached, 0)
        if batch and tokens + u > budget:
            break
        left = req.remaining_output if output_left is None else output_left(req)
        need = blocks(req.prompt_tokens + left, bs) - min(cached, req.prompt_tokens) // bs
        if (batch or view.running) and need + lim.watermark_blocks > kv_left:
            # An empty engine still admits one request: vLLM decides whether it really fits.
            break
        batch.append(req)
        tokens += u
        pairs += u * (min(cached, req.prompt_tokens) + (u + 1) / 2)
        kv_left -= need
    return batch, tokens, pairs
