"""What an engine (one ``Engine``, or a Ray ``Cluster``) does first with a submitted relQuery:
render and tokenize its rows, answer at once the rows that cannot run (a prompt that is not valid
text, one too long for the model's context), and hand back the rest with their token ids."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relserve.engine.backend_base import BackendBase
from relserve.engine.handle import RelQueryHandle
from relserve.errors import ConfigError, EngineError, RowError
from relserve.relquery import RelQuery
from relserve.results import RowResult


@dataclass
class Admitted:
    arrival: float
    #: every row's prompt, or the RowError it has
    prompts: list[str | RowError]
    handle: RelQueryHandle
    #: (row index, token ids) of the rows to run
    rows: list[tuple[int, list[int]]]


def layout_token_ids(tokenizer: object, prompter: object, prompts: Sequence[str], system: str | None, shape: str = "chat",
                     answer_field: str = "Answer:") -> list[list[int]]:
    """The token ids the engine computes for ``prompts``: the chat template around each (with
    ``system``), or a scoring layout of issue 22 (relserve/prompt_shapes.py). ``prompter`` is the
    ``ChatPrompter`` of ``system``. Token counts before running (relserve/estimate/) use this
    function too, so they are the engine's own."""
    if not prompts:
        return []
    if shape == "chat":
        return prompter.token_ids(list(prompts))
    from relserve.prompt_shapes import engine_texts

    texts = engine_texts(prompter, prompts, system, shape, answer_field)
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def admit(engine: BackendBase, rq: object, cancel: Callable[[], None]) -> Admitted:
    """``engine`` has ``dead_reason``, ``max_model_len`` and ``_prompter`` (``ChatTokenizing``)."""
    if not isinstance(rq, RelQuery):
        raise ConfigError(f"submit() takes a RelQuery, got {type(rq).__name__}")
    dead = engine.dead_reason
    if dead is not None:
        raise EngineError(dead)
    arrival = time.monotonic()
    prompts = rq.render()
    good = [i for i, p in enumerate(prompts) if not isinstance(p, RowError)]
    ids = layout_token_ids(engine.tokenizer, engine._prompter(rq.system), [prompts[i] for i in good], rq.system,
                           getattr(rq, "prompt_shape", "chat"), rq.answer_field)
    handle = RelQueryHandle(rq.rel_id, len(prompts), rq.on_error, cancel)
    rows: list[tuple[int, list[int]]] = []
    for i, p in enumerate(prompts):
        if isinstance(p, RowError):
            handle.row_done(RowResult(i, error=str(p)))
    for i, tok in zip(good, ids):
        if len(tok) + rq.max_tokens > engine.max_model_len:
            handle.row_done(RowResult(
                i, error=f"prompt has {len(tok)} tokens; with max_tokens={rq.max_tokens} it exceeds "
                f"the model's context of {engine.max_model_len} tokens", prompt_tokens=len(tok),
            ))
        else:
            rows.append((i, tok))
    if rq.on_error == "raise":  # fail fast: the caller learns of the first bad row at once
        failed = next((r for r in map(handle.row, range(len(prompts))) if r is not None and r.error), None)
        if failed is not None:
            raise RowError(f"row {failed.index}: {failed.error}")
    return Admitted(arrival, prompts, handle, rows)
