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
from dataclasses import replace

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.engine.handle import RelQueryHandle
from relserve.functions import FILTER_CHOICES, SchedulingHints
from relserve.labels.answer_fields import resolved
from relserve.labels.interface import LabelContext, LabelRun
from relserve.labels.means import MIN_BATCH_ROWS
from relserve.labels.methods import method_and_pool, method_of, start_run
from relserve.planner.planned_rows import PlannedRows
from relserve.progress import progress_bar
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
        #: the label method this relQuery runs (relserve/labels/methods.py; ``batch``
        #: falls back to ``prior`` when small and the call has no pooled means yet: decided again
        #: by ``submit``, which knows the engine)
        self.label_method = method_of(self.call, len(rows.prompts))
        #: the label method's run of this relQuery (None: the call decodes its answers)
        self.labels: LabelRun | None = None
        #: rows the label method holds until every row is scored
        self._held: list[RowResult] = []
        self._seen = 0
        #: rows answered without the engine (bootstrap's examples taken from this relQuery's rows)
        self._answered: list[RowResult] = []
        #: the engine's row index -> the relQuery's prompt index (None: the same)
        self._engine_index: list[int] | None = None

    def submit(self, engine: Backend) -> RelQueryHandle:
        """Send the prompts as one relQuery; returns the engine's handle. Blocks (tokenizing, a
        label method's first pass or probes): a server calls it in a worker thread."""
        if self.prefix:
            # (under the shaped layouts the engine's prompts have no chat template in front,
            # so these warmed blocks do not serve them; the rows share their prefix anyway)
            # prefill the shared prefix once, before the rows, instead of in every row of the
            # first batch (the engine skips prefixes shorter than one KV block)
            engine.warm_prefix(self.prefix)
        # the call as the engine scores it: ``answer_field := 'auto'`` named (answer_fields.py);
        # the result cache keeps the call as planned, whose key says "auto"
        call = resolved(self.call, engine, self.model_id)
        if len(self.rows.prompts) < MIN_BATCH_ROWS:
            # too few rows for a mean of their own: the call's earlier relQueries may have enough
            self.label_method, _ = method_and_pool(call, engine, self.model_id, len(self.rows.prompts))
        # on_error "null": each row's error comes back to the caller, who decides
        options = dict(**call.engine_options(), on_error="null", priority=self.hints.priority)
        if self.budget is not None:  # every relQuery of the call spends from it, a first pass too
            options["budget"] = self.budget
        prompts = self.rows.prompts
        if self.label_method not in (None, "generate"):
            self.labels = start_run(self.label_method, LabelContext(
                call, engine, self.model_id, self.rows.prompts, self.rows.values, self.rel_id, options,
                [min(t) for t in self.rows.targets], self.rows.label_scope))
            started = time.monotonic()
            request = self.labels.request()
            prompts = request.prompts
            options.update(request.options)
            self._engine_index = request.engine_index
            self._answered = [RowResult(i, text=label) for i, label in sorted(request.answered.items())]
            if self._engine_index is None and prompts and len(request.scored) == len(prompts):
                # (a small relQuery's first pass scored every row as this relQuery would: sent
                # again, the prefix cache would save all but each row's last KV block)
                rows = [request.scored[i] for i in range(len(prompts))]
                self.handle = RelQueryHandle.answered(self.rel_id or uuid.uuid4().hex[:8], rows, time.monotonic() - started)
                return self.handle
        rq = RelQuery.from_prompts(prompts, **options, rel_id=self.rel_id, deadline_s=self._deadline_left())
        self.handle = engine.submit(rq)
        if self.labels is not None:
            try:
                self.labels.submitted(self.handle)
            except BaseException:
                self.handle.cancel()
                raise
        return self.handle

    def _deadline_left(self) -> float | None:
        # the engine counts from its own submission: take off the time spent before it
        # (planning, a server's queue, the label prior's probes)
        if self.hints.deadline_s is None:
            return None
        return max(self.hints.deadline_s - (time.monotonic() - self.received), 1e-3)

    def answer(self, row: RowResult) -> list[RowResult]:
        """One engine row as the call's rows that get it: the value in the call's type, the error
        (an engine error, or an answer that does not fit the type) named.

        A label method that reads the whole relQuery (``LabelRun.holds``: batch means, two
        crowds) has its scored rows held (``[]``) until the relQuery's last row arrives; that
        call returns every held row with its label (relserve/labels/)."""
        if self._engine_index is not None:
            row = replace(row, index=self._engine_index[row.index])
        scored = row.error is None and row.label_logprobs is not None
        if self.labels is None or not self.labels.holds:
            if self.labels is not None and scored:
                row = self.labels.decide([row])[0]
            return self._answer_one(row)
        self._seen += 1
        last = self._seen >= self.engine_rows
        if scored:
            self._held.append(row)
            return self._release() if last else []
        return self._answer_one(row) + (self._release() if last else [])

    @property
    def engine_rows(self) -> int:
        """How many rows the engine scores or generates for this relQuery."""
        return len(self.rows.prompts) if self._engine_index is None else len(self._engine_index)

    def _release(self) -> list[RowResult]:
        held, self._held = self._held, []
        answered, self._answered = self._answered, []
        out = [o for r in answered for o in self._answer_one(r)]
        if held:
            out += [o for r in self.labels.decide(held) for o in self._answer_one(r)]
        return out

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
        return self.rows.cache.put_many(self.model_id, self.call.sampling_settings(), self._answers,
                                        warning=self.labels_warning)

    def run(self, engine: Backend, *, progress: bool = False, fail_fast: bool = False) -> list[RowResult]:
        """Synchronously: every row of the relQuery, fanned out (a progress bar while it runs).
        With ``fail_fast`` the first failed row cancels the rest (they come back 'cancelled')."""
        handle = self.submit(engine)
        with progress_bar(self.engine_rows, self.call.function.name, show=progress) as bar:
            for row in handle:
                bar.update(1)
                if fail_fast and row.error is not None:
                    handle.cancel()
                    break
        result = handle.result()
        self.stats = result.stats
        out = [r for row in result.rows for r in self.answer(row)]
        self.write_cache()
        return out
