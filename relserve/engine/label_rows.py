"""A ``score_labels`` relQuery's rows on the engine: each row's label-trie requests sent to vLLM,
their log-probabilities read back into the row's label scores (relserve/engine/label_scoring.py
holds the trie and the arithmetic, vLLM-free; relserve/engine/engine.py the process and the
relQueries in flight).

Each row sends ``asks(trie, MAX_LOGPROBS)``: one one-token request per trie node the label norm
reads, all on the row's prompt (the prefix cache prefills it once), then picks the best label
after the call's prior."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from relserve.engine.handle import RelQueryHandle
from relserve.engine.label_scoring import FREE_FORMS_ONLY, LabelTrie, pick
from relserve.engine.request_meta import RequestMeta
from relserve.errors import EngineError
from relserve.relquery import RelQuery
from relserve.results import RowResult


class ScoredRelQuery(Protocol):
    """What scoring a row needs of its relQuery in flight (the engine's book-keeping)."""

    rq: RelQuery
    handle: RelQueryHandle
    request_ids: dict[str, int]
    times: dict[int, tuple[float, float, float]]
    cancel_reason: str | None

    def prompt(self, ids: list[int]) -> object: ...

    def request_meta(self, rel_size: int) -> RequestMeta: ...


#: vLLM's ``generate``: (prompt, sampling params, request id) -> its outputs as they come
Generate = Callable[[object, object, str], AsyncIterator]


#: label tries an engine keeps, the least recently used dropped first. A call reads a few label
#: sets (its labels with and without an answer field's space; an adaptive call's layouts and
#: concept too), so this holds those of many more calls than run at once: a normal workload
#: never rebuilds one, and a tenant sending ever new label sets (the server builds a trie to
#: book a request, even one it then refuses) replaces old tries instead of growing the memory.
MAX_LABEL_TRIES = 256

_Key = tuple[tuple[str, ...], str]


class LabelTries:
    """The requests that score a label set on one tokenizer, built once per label set and kept
    for the ``limit`` label sets used last."""

    def __init__(self, tokenizer, limit: int = MAX_LABEL_TRIES) -> None:
        self.tokenizer = tokenizer
        self.limit = limit
        self._tries: OrderedDict[_Key, LabelTrie] = OrderedDict()
        # the engine's scheduler and the server's booking (worker threads) read it at once
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tries)

    def __contains__(self, key: _Key) -> bool:
        """Whether the trie of ``(labels, space)`` is kept (without using it)."""
        return key in self._tries

    def get(self, labels: tuple[str, ...], space: str = "") -> LabelTrie:
        """The trie of ``labels`` (``space``: what comes before a label, " " after an answer field)."""
        key = (labels, space)
        with self._lock:
            trie = self._tries.get(key)
            if trie is not None:
                self._tries.move_to_end(key)
                return trie
        # after an answer field the label follows a space (" yes"), which BPE tokenizers
        # fold into the label's first token
        encode = lambda text: self.tokenizer(space + text, add_special_tokens=False)["input_ids"]  # noqa: E731
        # (a capitalised spelling of several tokens costs a request per inner node; built outside
        # the lock, so a large label set does not hold up the others)
        trie = LabelTrie.build(labels, encode, self.tokenizer.eos_token_id, free_forms_only=FREE_FORMS_ONLY and space == " ")
        with self._lock:
            self._tries[key] = self._tries.get(key, trie)
            self._tries.move_to_end(key)
            while len(self._tries) > self.limit:
                self._tries.popitem(last=False)
            return self._tries[key]


async def score_row(generate: Generate, running: ScoredRelQuery, index: int, ids: list[int], trie: LabelTrie,
                    row_asks: list[tuple[tuple[int, ...], tuple[int, ...]]], rows: int,
                    row_error: Callable[[Exception], str]) -> None:
    """One row of a ``score_labels`` relQuery: ``row_asks``, one one-token request per trie node
    the label norm reads (``label_scoring.asks``), all sharing the row's prompt (prefix cache),
    then the best label after the prior; the row's result (or its error, ``row_error``) goes to
    the relQuery's handle."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    rq = running.rq
    handle = running.handle
    extra_args = running.request_meta(rows * len(row_asks)).to_extra_args()

    async def node(n: int, prefix: tuple[int, ...], wanted: tuple[int, ...]):
        sp = SamplingParams(
            max_tokens=1,
            temperature=0.0,
            logprob_token_ids=list(wanted),
            output_kind=RequestOutputKind.FINAL_ONLY,
            extra_args=extra_args,
        )
        request_id = f"{rq.rel_id}-{index}-{n}"
        running.request_ids[request_id] = index
        final = None
        async for out in generate(running.prompt(ids + list(prefix)), sp, request_id):
            final = out
        if final is None or not final.outputs or final.outputs[0].logprobs is None:
            raise EngineError("the engine returned no log-probabilities")
        c = final.outputs[0]
        if c.finish_reason == "abort":
            raise asyncio.CancelledError
        got = {t: lp.logprob for t, lp in c.logprobs[0].items()}
        return prefix, {t: got[t] for t in wanted}, final

    try:
        outs = await asyncio.gather(*(node(n, p, w) for n, (p, w) in enumerate(row_asks)))
        node_lps: dict[tuple[int, ...], dict[int, float]] = {}
        for p, lps, _ in outs:
            node_lps.setdefault(p, {}).update(lps)
        label_lps, label_mass = trie.scores(node_lps)
        finals = [f for _, _, f in outs]
        times = [(f.metrics.scheduled_ts, f.metrics.first_token_ts, f.metrics.last_token_ts) for f in finals
                 if f.metrics is not None and f.metrics.scheduled_ts]
        if times:
            running.times[index] = (min(t[0] for t in times), max(t[1] for t in times), max(t[2] for t in times))
        handle.row_done(
            RowResult(
                index,
                text=pick(label_lps, rq.label_prior),
                prompt_tokens=len(ids),
                output_tokens=len(finals),
                # the row's prompt, counted once: the prefix cache serves its other requests
                cached_tokens=min((f.num_cached_tokens or 0) for f in finals),
                finish_reason="scored",
                label_logprobs=label_lps,
                label_mass=label_mass,
            )
        )
    except asyncio.CancelledError:
        handle.row_done(RowResult(index, error=running.cancel_reason or "cancelled", prompt_tokens=len(ids)))
    except Exception as e:
        handle.row_done(RowResult(index, error=row_error(e), prompt_tokens=len(ids)))
