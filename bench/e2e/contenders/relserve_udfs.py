"""DuckDB UDFs for the vLLM contenders that parse their arguments and render their prompts exactly
as relserve does, then hand the prompts to a backend (vLLM's server per row, or ``LLM.generate``
per statement). Token-identical prompts are what make the answers comparable.

These are the only relserve internals the benchmark uses, and on purpose: the contenders must
NOT get relserve's planner (no deduplication, no reordering, no result cache, no label scoring),
only its argument parser (``relserve.duckdb_ext.arguments``), its return types and Arrow
conversion (``relserve.duckdb_ext.udf``), its prompt text (``relserve.prompt_rendering``) and its
chat template (``relserve.engine.chat_template``). ``relserve.duckdb.install`` always plans.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from e2e.sessions import StatementAnswer, new_duckdb
from e2e.workload import Scheduled


class CallLimits(Protocol):
    """What a backend reads of a call: its answer limit and structured output."""

    max_tokens: int
    choices: Any
    json_schema: Any


#: prompts of one call site (None: a row that cannot run) -> answer texts (None: no answer)
PromptBackend = Callable[[CallLimits, list[str | None]], list[str | None]]


class Prompter:
    """Prompt text -> the token ids relserve's engine would send (its chat template)."""

    def __init__(self, model_path: str) -> None:
        from transformers import AutoTokenizer

        from relserve.engine.chat_template import ChatPrompter

        self._p = ChatPrompter(AutoTokenizer.from_pretrained(model_path))
        self._lock = threading.Lock()

    def ids(self, prompts: list[str]) -> list[list[int]]:
        with self._lock:  # HF fast tokenizers are not safe to call from many threads at once
            return self._p.token_ids(prompts)


class WarmUpCall:
    """The warm-up request every contender gets before its passes: two free-text tokens."""

    max_tokens = 2
    choices = None
    json_schema = None


def structured(call: CallLimits) -> dict | None:
    """vLLM's structured-output request for a call (the same constraint relserve's engine uses)."""
    if call.choices:
        return {"choice": list(call.choices)}
    if call.json_schema is not None:
        return {"json": call.json_schema}
    return None


class RowUDF:
    """An LLM function as a DuckDB UDF of a per-row or per-batch client: the arguments decoded by
    relserve's own parser and rendered to relserve's prompt text, then ``backend(call, prompts)``."""

    def __init__(self, fn: Any, backend: PromptBackend, counter: list[int]) -> None:
        self.fn = fn
        self.backend = backend
        self.counter = counter

    def __call__(self, *arrays):
        from relserve.duckdb_ext.arguments import decode_chunk
        from relserve.duckdb_ext.udf import to_arrow
        from relserve.errors import RowError
        from relserve.functions import CallOptions
        from relserve.prompt_rendering import Renderer, null_error

        # these contenders decode every label, so a label call is rendered as relserve renders a
        # decoded one (method 'generate', the chat shape), whatever RELSERVE_LABEL_METHOD says
        chunk = decode_chunk(self.fn, arrays, CallOptions(method="generate"))
        out: list[Any] = [None] * chunk.size
        for g in chunk.groups:
            render = Renderer(g.call)
            prompts = [None if null_error(g.call, v) else render(v) for v in g.values]
            self.counter[0] += len(prompts)
            texts = self.backend(g.call, prompts)
            for r, text in zip(g.rows, texts):
                try:
                    out[r] = g.call.convert(text) if text is not None else None
                except RowError:
                    out[r] = None
        return to_arrow(self.fn, out)


class UDFConnection:
    """A session's DuckDB connection with the UDFs, and how many rows they were called on."""

    def __init__(self, datasets: Path, sql_dir: Path, backend: PromptBackend) -> None:
        from relserve.duckdb_ext.arguments import options_macro_sql
        from relserve.duckdb_ext.udf import RETURN_TYPES
        from relserve.functions import FUNCTIONS

        self.con = new_duckdb(datasets, sql_dir)
        self.counter = [0]
        for fn in FUNCTIONS.values():
            self.con.create_function(fn.name, RowUDF(fn, backend, self.counter), None, RETURN_TYPES[fn.kind], type="arrow",
                                     null_handling="special", side_effects=True)
        self.con.execute(options_macro_sql())

    def execute(self, w: Scheduled) -> StatementAnswer:
        before = self.counter[0]
        rel = self.con.sql(w.sql)
        rows = rel.fetchall()
        return list(rel.columns), rows, self.counter[0] - before

    def close(self) -> None:
        self.con.close()
