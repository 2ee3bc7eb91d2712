"""What a DuckDB connection's LLM functions share: the call defaults, where calls run (a runner:
an engine in this process, ``LocalRunner``, or a relserve server, ``remote.HttpRunner``) and the
log of rows that failed. ``connections.install`` attaches one to a connection."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.duckdb_ext.remote import HttpRunner, RemoteCall
from relserve.functions import CallOptions, LLMCall, LLMFunction
from relserve.labels.keys import namespace_of
from relserve.planner.cache import ResultCache, shared_cache
from relserve.planner.engine_ref import EngineRef
from relserve.planner.plan_and_run import CallOutcome, cached_values, run_rows
from relserve.results import RowResult

MAX_LOGGED_ERRORS = 10_000


class CallRunner(Protocol):
    """Where a session's calls run: every input row's value and error, in input order."""

    progress: bool

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False,
            budget: Allowance | None = None, until: Callable[[list[RowResult]], bool] | None = None) -> CallOutcome:
        """Plan and run ``call`` over ``values``; ``until``: see ``plan_and_run.run_rows``."""
        ...

    def cached(self, call: LLMCall, values: list[tuple]) -> dict[int, tuple[Any, str | None]]:
        """Answers known without running, by position in ``values``."""
        ...


@dataclass
class LocalRunner:
    """Calls planned and run on an engine in this process (None: the default engine)."""

    engine: Backend | None = None
    #: None or True: the shared result cache; False: none
    cache: ResultCache | bool | None = None
    #: order rows (and fields, where allowed) for prefix sharing
    optimize: bool = True
    progress: bool = True

    def _engine_for(self, call: LLMCall) -> EngineRef:
        return EngineRef(self.engine, call.options.model)

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False,
            budget: Allowance | None = None, until: Callable[[list[RowResult]], bool] | None = None) -> CallOutcome:
        return run_rows(
            call,
            values,
            engine=self._engine_for(call),
            cache=self.cache if self.cache is not None else True,
            optimize=self.optimize,
            progress=self.progress,
            explain_only=explain_only,
            budget=budget,
            until=until,
        )

    def cached(self, call: LLMCall, values: list[tuple]) -> dict[int, tuple[Any, str | None]]:
        # True/None mean the shared cache, False none (as for run_rows)
        cache = shared_cache() if self.cache is None or self.cache is True else (None if self.cache is False else self.cache)
        ref = self._engine_for(call)
        return cached_values(call, values, model_id=ref.model_id, cache=cache, namespace=namespace_of(ref.peek()))


@dataclass(frozen=True)
class RowFailure:
    function: str
    template: str
    #: the row's placeholder values, as JSON text
    arguments: str
    error: str


@dataclass
class Session:
    """What ``install`` attaches to a connection: defaults, the runner and the error log."""

    defaults: CallOptions
    runner: CallRunner = field(default_factory=LocalRunner)
    failures: deque = field(default_factory=lambda: deque(maxlen=MAX_LOGGED_ERRORS))
    #: record of the last planned statement (``relserve.duckdb_ext.planned.StatementRun``)
    last_run: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: the budget of the statement running (``sql(..., max_tokens_total=...)``; issue 47)
    budget: Allowance | None = None
    #: run the AND-ed llm filters of a WHERE cheapest first (False: in the order written)
    order_filters: bool = True

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False,
            until: Callable[[list[RowResult]], bool] | None = None) -> CallOutcome:
        return self.runner.run(call, values, explain_only=explain_only, budget=None if explain_only else self.budget,
                               until=until)

    def cached(self, call: LLMCall, values: list[tuple]) -> dict[int, tuple[Any, str | None]]:
        """Answers already in the result cache, by position in ``values``."""
        return self.runner.cached(call, values)

    @property
    def plans_locally(self) -> bool:
        """Whether this session's calls keep their label plans in this process's home (not a
        server's)."""
        return isinstance(self.runner, LocalRunner)

    def kept_plan(self, call: LLMCall):
        """The label plan kept for ``call`` where this session runs it (None: none yet, or kept by
        a server)."""
        if not isinstance(self.runner, LocalRunner):
            return None
        from relserve.labels.memory import process_memory
        from relserve.labels.resolution import resolve

        ref = self.runner._engine_for(call)
        return resolve(call, 1, memory=process_memory(), namespace=namespace_of(ref.peek()), model_id=ref.model_id).plan

    @property
    def engine(self) -> Any:
        """The engine in this process that calls run on (None: the default one; on a connection
        to a server the operators llm_reduce and llm_topk run on the default one)."""
        return self.runner.engine if isinstance(self.runner, LocalRunner) else None

    @property
    def progress(self) -> bool:
        return self.runner.progress

    @property
    def calls(self) -> list[RemoteCall]:
        """What each call sent to a server cost (empty when calls run in this process)."""
        return self.runner.calls if isinstance(self.runner, HttpRunner) else []

    def record_failures(self, call: LLMCall, values: list[tuple], errors: list[str | None]) -> None:
        names = call.template.columns
        with self.lock:
            for vals, err in zip(values, errors):
                if err is not None:
                    args = json.dumps(dict(zip(names, vals)), ensure_ascii=False, default=str)
                    self.failures.append(RowFailure(call.function.name, call.template.source, args, err))

    def record_chunk_errors(self, fn: LLMFunction, errors: dict[int, str]) -> None:
        with self.lock:
            for err in errors.values():
                self.failures.append(RowFailure(fn.name, "", "{}", err))
