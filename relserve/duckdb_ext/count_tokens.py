"""``llm_count_tokens``: a row's prompt tokens as the engine will see them, before running.

    llm_count_tokens(template, value, ... [, llm_options(...)])              -- as llm_map's prompt
    llm_count_tokens('llm_filter', template, value, ... [, llm_options(...)]) -- as that function's
    llm_count_tokens('llm_classify', template, labels, value, ...)
    llm_count_tokens('llm_extract', template, json_schema, value, ...)

The arguments after the function name are the function's own, bound the same way; the count is
the engine's (chat template, system message, the line stating the answer format, and for a
filter or classify the scoring layout it runs in: relserve/estimate/prompt_tokens.py). One row
at a time: EXPLAIN gives a whole call's tokens after deduplication, the result cache and the
examples a first pass chooses. On a connection to a server the server counts with its tokenizer.
A row that cannot run (a NULL placeholder value) counts NULL and is logged like a failed call.
"""

from __future__ import annotations

import re

import pyarrow as pa

from relserve.call_fields import CallFields, jsonable_row
from relserve.duckdb_ext.arguments import decode_chunk
from relserve.duckdb_ext.remote import HttpRunner
from relserve.duckdb_ext.session import LocalRunner, Session
from relserve.duckdb_ext.udf import settle_chunk_errors
from relserve.errors import ConfigError, RelServeError
from relserve.estimate.prompt_tokens import count_row_tokens, prompt_tokenizer
from relserve.functions import FUNCTIONS, LLM_MAP, LLMCall, LLMFunction
from relserve.planner.engine_ref import EngineRef

NAME = "llm_count_tokens"


class CountTokens:
    """The UDF: arrays of one chunk in, one INTEGER array out."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        fn, arrays = _function_of(list(arrays))
        try:
            chunk = decode_chunk(fn, arrays, self.session.defaults)
        except RelServeError as e:
            # the arguments are the counted function's own: say whose prompt was being counted
            raise type(e)(f"{NAME} (counting {fn.name}'s prompt): {e}") from None
        settle_chunk_errors(fn, chunk, self.session, f"{NAME}: ")
        out: list[int | None] = [None] * chunk.size
        for group in chunk.groups:
            counts = self._count(group.call, group.values)
            errors: list[str | None] = []
            for r, n in zip(group.rows, counts):
                out[r] = n if isinstance(n, int) else None
                errors.append(None if isinstance(n, int) else n)
            self.session.record_failures(group.call, group.values, errors)
        return pa.array(out, type=pa.int64())

    def _count(self, call: LLMCall, values: list[tuple]) -> list[int | str | None]:
        runner = self.session.runner
        if isinstance(runner, HttpRunner):
            rows = [jsonable_row(call.template.columns, v) for v in values]
            return runner.client.count_tokens(call.template.source, rows, CallFields.of_call(call)).per_row()
        engine = runner.engine if isinstance(runner, LocalRunner) else None
        running = EngineRef(engine, call.options.model).peek()
        return count_row_tokens(call, values, prompt_tokenizer(running, call.options.model))


def _function_of(arrays: list[pa.Array]) -> tuple[LLMFunction, list[pa.Array]]:
    """(the function whose prompt is counted, its own arguments): a first argument naming an
    LLM function ('llm_filter'), or llm_map's prompt when the first argument is the template."""
    if len(arrays) > 1 and (pa.types.is_string(arrays[0].type) or pa.types.is_large_string(arrays[0].type)):
        first = arrays[0]
        names = {v.lower() for v in first.to_pylist() if isinstance(v, str)}
        if len(names) == 1:
            name = names.pop()
            if name in FUNCTIONS:
                return FUNCTIONS[name], arrays[1:]
            if re.fullmatch(r"llm_\w+", name):
                # not a template (it has no placeholder): it names a function relserve does not have
                raise ConfigError(f"{NAME}: unknown function {name!r}; expected one of {', '.join(FUNCTIONS)}")
    return LLM_MAP, arrays
