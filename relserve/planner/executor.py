"""The one executor of a planned call: submit its distinct prompts as ONE relQuery, fan every
answer out to the rows that share its prompt, collect new answers for the result cache, and
report rows as they finish.

Two drivers use it: ``run`` for the synchronous surfaces (DuckDB, polars, through
``relserve.planner.plan_and_run.run_call``), and the server's jobs, which call ``submit`` in a worker
thread, pass each row the engine streams to ``answer`` on their event loop, and end with
``write_cache``. What is the server's own (tenants, cancel reasons, streaming) stays there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.engine.handle import RelQueryHandle
from relserve.functions import FILTER_CHOICES, SchedulingHints
from relserve.labels.answer_fields import resolved
from relserve.labels.interface import LabelContext, LabelRun
from relserve.labels.methods import LabelResolution, start_run
from relserve.planner.planned_rows import PlannedRows
from relserve.progress import progress_bar
from relserve.prompt_shapes import CHAT_SHAPES
from relserve.relquery import RelQuery
from relserve.results import RelQueryStats, RowResult


class CallExecutor:
    """Runs one ``PlannedRows`` (a call's prompts left to run, each with its target rows)."""

    def __init__(
        self,
        rows: PlannedRows,
        *,
        model_id: str,
        hints: SchedulingHints = SchedulingHints(),
        rel_id: str | None = None,
        prefix: str = "",
        error_prefix: str = "",
        received: float | None = None,
        budget: Allowance | None = None,
    ) -> None:
        self.rows = rows
        self.call = rows.call
        self.model_id = model_id
        self.hints = hints
        self.rel_id = rel_id
        #: text every prompt starts with, prefilled once before the rows ("" : none)
        self.prefix = prefix
        #: put before an engine error (the synchronous surfaces name their function there)
        self.error_prefix = error_prefix
        #: when the call arrived (time.monotonic()): its deadline counts from then
        self.received = time.monotonic() if received is None else received
        #: issue 47: the budget every relQuery of the call spends from (its first pass too)
        self.budget = budget
        self.handle: RelQueryHandle | None = None
        self.stats: RelQueryStats | None = None
        self._answers: list[tuple[str, str]] = []
        #: the label method and plan the planner resolved for these rows (relserve/labels/methods.py)
        self.resolution: LabelResolution = rows.labels or LabelResolution(None)
        #: the label method's run of this relQuery (None: the call decodes its answers)
        self.labels: LabelRun | None = None
        #: the engine's row index -> the relQuery's prompt index (None: the same)
        self._engine_index: list[int] | None = None
        #: seconds the label method's first pass (or probes) took before the rows were sent: the
        #: statement trace names it (relserve/duckdb_ext/trace.py); None when no plan was made
        self.first_pass_s: float | None = None

    def submit(self, engine: Backend) -> RelQueryHandle:
        """Send the prompts as one relQuery; returns the engine's handle. Blocks (tokenizing, a
        label method's first pass or probes): a server calls it in a worker thread."""
        # the call as the engine scores it: ``answer_field := 'auto'`` named (answer_fields.py);
        # the result cache keeps the call as planned, whose key says "auto"
        call = resolved(self.call, engine, self.model_id, self.resolution.memory, self.budget)
        # on_error "null": each row's error comes back to the caller, who decides
        options = dict(**call.engine_options(), on_error="null", priority=self.hints.priority)
        if self.budget is not None:  # every relQuery of the call spends from it, a first pass too
            options["budget"] = self.budget
        prompts = self.rows.prompts
        if self.resolution.scoring:
            self.resolution.apply_action()
            self.labels = start_run(self.resolution, LabelContext(
                call, engine, self.model_id, self.rows.prompts, self.rows.values, self.rel_id, options,
                [min(t) for t in self.rows.targets], self.rows.label_scope, self.resolution))
            started = time.monotonic()
            makes_plan = self.resolution.makes_plan
            request = self.labels.request()  # makes the call's label plan first when it has none
            if makes_plan:
                self.first_pass_s = time.monotonic() - started
            prompts = request.prompts
            options.update(request.options)
            self._engine_index = request.engine_index
            if self._engine_index is None and request.scored:
                # rows the plan's sample scored as this relQuery would (same layout, examples and
                # labels): their scores are the rows'; the engine scores the others
                return self._submit_rest(engine, prompts, options, request.scored, time.monotonic() - started)
        rq = RelQuery.from_prompts(prompts, **options, rel_id=self.rel_id, deadline_s=self._deadline_left())
        self._warm(engine, rq)
        self.handle = engine.submit(rq)
        if self.labels is not None:
            try:
                self.labels.submitted(self.handle)
            except BaseException:
                self.handle.cancel()
                raise
        return self.handle

    def _submit_rest(self, engine: Backend, prompts: list[str], options: dict, scored: dict[int, RowResult],
                     seconds: float) -> RelQueryHandle:
        rel_id = self.rel_id or uuid.uuid4().hex[:8]
        ready = [replace(r, index=i) for i, r in sorted(scored.items())]
        rest = [i for i in range(len(prompts)) if i not in scored]
        if not rest:
            self.handle = RelQueryHandle.answered(rel_id, ready, seconds)
            return self.handle
        rq = RelQuery.from_prompts([prompts[i] for i in rest], **options, rel_id=self.rel_id,
                                   deadline_s=self._deadline_left())
        self._warm(engine, rq)
        self.handle = RelQueryHandle.joined(rel_id, ready, engine.submit(rq), rest, seconds)
        return self.handle

    def _warm(self, engine: Backend, rq: RelQuery) -> None:
        """Prefill the rows' shared prefix once, before them, instead of in every row of the
        first batch (the engine skips prefixes shorter than a KV block or cached already). Only
        prompts behind the chat template start with it: a scoring layout puts the row's values
        first with no template in front, and warming those would fill blocks no row reads. Under
        a token budget there is no warm-up: its tokens are in no row's reservation, so a call
        whose budget is spent would still get its prefix prefilled."""
        if not self.prefix or rq.prompt_shape not in CHAT_SHAPES:
            return
        if self.budget is not None and self.budget.left() is not None:
            return
        engine.warm_prefix(self.prefix, rq.system)

    def _deadline_left(self) -> float | None:
        # the engine counts from its own submission: take off the time spent before it
        # (planning, a server's queue, the label prior's probes)
        if self.hints.deadline_s is None:
            return None
        return max(self.hints.deadline_s - (time.monotonic() - self.received), 1e-3)

    def answer(self, row: RowResult) -> list[RowResult]:
        """One engine row as the call's rows that get it: its label decided from its scores and
        the call's plan (relserve/labels/), the value in the call's type, the error (an engine
        error, or an answer that does not fit the type) named."""
        if self._engine_index is not None:
            row = replace(row, index=self._engine_index[row.index])
        if self.labels is not None and row.error is None and row.label_logprobs is not None:
            row = self.labels.decide([row])[0]
        return self._answer_one(row)

    @property
    def engine_rows(self) -> int:
        """How many rows the engine scores or generates for this relQuery."""
        return len(self.rows.prompts) if self._engine_index is None else len(self._engine_index)

    @property
    def plan_id(self) -> str | None:
        """The id of the label plan the rows were decided with, once known (the result cache keys
        their answers by it)."""
        if self.labels is not None and self.labels.plan is not None:
            return self.labels.plan.id if self.labels.plan_kept else None
        return self.resolution.plan_id

    def _answer_one(self, row: RowResult) -> list[RowResult]:
        value, error = None, row.error
        if self.call.scores and error is None and row.text in FILTER_CHOICES:
            # llm_score: the probability of "yes" is the answer (and what the result cache keeps)
            sure = row.confidence if row.confidence is not None else 1.0
            # (every digit: rows near 0 or 1 differ past the sixth, and ORDER BY ranks them)
            row = replace(row, text=repr(sure if row.text == 'yes' else 1 - sure))
        if error is None and row.text is not None:
            self._answers.append((self.rows.prompts[row.index], row.text))
            value, error = self.call.answer(row.text)
        else:
            error = self.error_prefix + (error or "no answer")
        return [replace(row, index=target, value=value, error=error) for target in self.rows.targets[row.index]]

    @property
    def label_report(self):
        """What the label method learned about this relQuery (EXPLAIN ANALYZE; None: nothing)."""
        return self.labels.report if self.labels is not None else None

    @property
    def warning(self) -> str | None:
        """Why this call's labels are close to guesses: this relQuery's own, else the one kept
        with the answers that came from the result cache (None: neither, or nothing says)."""
        return self.labels_warning or self.rows.cached_warning

    @property
    def labels_warning(self) -> str | None:
        """Why this relQuery's labels are close to guesses (None: they are not, or nothing says)."""
        if self.labels is None:
            return None
        return self.labels.warning(self.call.function.name, self.call.template.source)

    @property
    def has_cache_writes(self) -> bool:
        """Whether ``write_cache`` has anything to store (greedy calls with new answers)."""
        return self.rows.cache is not None and self.call.deterministic and bool(self._answers)

    def write_cache(self) -> int:
        """Store the answers of this run (greedy calls only); returns how many were written."""
        if not self.has_cache_writes:
            return 0
        return self.rows.cache.put_many(self.model_id, self.cache_settings(), self._answers,
                                        warning=self.labels_warning)

    def cache_settings(self) -> dict[str, object]:
        """The result-cache key of this relQuery's answers: the call's settings with the label plan
        they were decided with."""
        call = replace(self.call, plan_id=self.plan_id) if self.resolution.key is not None else self.call
        return call.sampling_settings()

    def run(self, engine: Backend, *, progress: bool = False, fail_fast: bool = False,
            until: Callable[[list[RowResult]], bool] | None = None) -> list[RowResult]:
        """Synchronously: every row of the relQuery, fanned out (a progress bar while it runs).
        With ``fail_fast`` the first failed row cancels the rest (they come back 'cancelled');
        ``until`` is given the caller's rows as they are answered and cancels the rest once it
        returns True (a statement that needs only some rows: ``LIMIT``)."""
        handle = self.submit(engine)
        out: list[RowResult] = []
        done: set[int] = set()
        with progress_bar(self.engine_rows, self.call.function.name, show=progress) as bar:
            for row in handle:
                bar.update(1)
                answered = self.answer(row)
                done.add(row.index)
                out += answered
                if fail_fast and row.error is not None:
                    handle.cancel()
                    break
                if until is not None and until(answered):
                    handle.cancel()
                    break
        result = handle.result()
        self.stats = result.stats
        # the rows that did not stream before a cancel come back from the result ('cancelled')
        out += [r for row in result.rows if row.index not in done for r in self.answer(row)]
        self.write_cache()
        return out
