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
from dataclasses import replace

from relserve.backend.protocol import Backend
from relserve.engine.handle import RelQueryHandle
from relserve.engine.label_scoring import pick
from relserve.functions import BATCH_METHODS, SchedulingHints
from relserve.planner.answer_fields import resolved
from relserve.planner.label_bootstrap import examples_for, method_and_pool
from relserve.planner.label_calibration import MIN_BATCH_ROWS, method_of
from relserve.planner.label_history import means_key, pooled_picks
from relserve.planner.label_prior import label_options, prior_from, submit_probes
from relserve.planner.labels.adaptive import AdaptiveRun
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
        self.handle: RelQueryHandle | None = None
        self.stats: RelQueryStats | None = None
        self._answers: list[tuple[str, str]] = []
        #: the label method this relQuery runs (``batch`` falls back to ``calibrate`` when small
        #: and the call has no pooled means yet: decided again by ``submit``, which knows the engine)
        self.label_method = method_of(self.call, len(rows.prompts))
        #: batch calibration: the engine's rows held until every row is scored
        self._held: list[RowResult] = []
        self._seen = 0
        #: whose label means this relQuery's pick pools with (label_history.py; set by submit)
        self._means_key: tuple | None = None
        #: ``calibrate`` whose prior was measured beside the rows: the executor picks with it
        self._prior: dict[str, float] | None = None
        #: rows answered without the engine (bootstrap's examples taken from this relQuery's rows)
        self._answered: list[RowResult] = []
        #: the engine's row index -> the relQuery's prompt index (None: the same)
        self._engine_index: list[int] | None = None
        #: the adaptive method's run of this relQuery (relserve/planner/labels/adaptive.py)
        self.adaptive: AdaptiveRun | None = None

    def submit(self, engine: Backend) -> RelQueryHandle:
        """Send the prompts as one relQuery; returns the engine's handle. Blocks (tokenizing, the
        label prior's probes): a server calls it in a worker thread."""
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
        if self.label_method == "adaptive":
            self.adaptive = AdaptiveRun(call, engine, self.model_id, self.rows.values, self.rel_id, call.engine_options())
            prompts = self.adaptive.prompts()
            options = {**self.adaptive.scoring_options(), "on_error": "null", "priority": self.hints.priority}
            rq = RelQuery.from_prompts(prompts, **options, rel_id=self.rel_id, deadline_s=self._deadline_left())
            self.handle = engine.submit(rq)
            return self.handle
        # filter/classify choose labels by scores and the calibrated prior, when asked
        scoring = label_options(call, self.model_id, self.label_method)
        probes = None
        if self.label_method == "calibrate" and "label_prior" not in scoring:
            # the call's first relQuery: its prior's probes run beside its rows, not before them
            probes = submit_probes(call, engine)
        options = dict(**call.engine_options(), **scoring, on_error="null", priority=self.hints.priority)
        prompts = self.rows.prompts
        if self.label_method == "bootstrap":
            # examples the model labels itself, in front of every prompt (label_bootstrap.py);
            # chosen by the template's first relQuery, reused by the next ones
            chosen = examples_for(call, engine, prompts, options, self.model_id, self.rel_id)
            examples = chosen.text
            # the rows that are examples already have their answer: the engine scores the others
            # (all of them, should every row be an example)
            if chosen.answered and len(chosen.answered) < len(prompts):
                self._answered = [RowResult(i, text=label) for i, label in sorted(chosen.answered.items())]
                self._engine_index = [i for i in range(len(prompts)) if i not in chosen.answered]
                prompts = [prompts[i] for i in self._engine_index]
            prompts = [examples + p for p in prompts]
        else:
            examples = ""
        if self.label_method in BATCH_METHODS:
            self._means_key = means_key(call, engine, self.model_id, examples)
        # on_error "null": each row's error comes back to the caller, who decides
        rq = RelQuery.from_prompts(prompts, **options, rel_id=self.rel_id, deadline_s=self._deadline_left())
        self.handle = engine.submit(rq)
        if probes is not None:
            try:
                # the rows are scored meanwhile; their labels are picked here once it is known
                self._prior = prior_from(call, self.model_id, probes)
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

        Under batch calibration a scored row is held (``[]``) until the relQuery's last row
        arrives; that call returns every held row, each label picked after subtracting the
        labels' means over the scored rows of this relQuery and the earlier ones of its call
        (relserve/planner/label_calibration.py, label_history.py)."""
        if self._engine_index is not None:
            row = replace(row, index=self._engine_index[row.index])
        if self.label_method not in BATCH_METHODS and self.label_method != "adaptive":
            if self._prior is not None and row.error is None and row.label_logprobs is not None:
                row = replace(row, text=pick(row.label_logprobs, self._prior))
            return self._answer_one(row)
        self._seen += 1
        last = self._seen >= self.engine_rows
        if row.error is None and row.label_logprobs is not None:
            self._held.append(row)
        else:
            out = self._answer_one(row)
            return out + (self._release() if last else [])
        return self._release() if last else []

    @property
    def engine_rows(self) -> int:
        """How many rows the engine scores or generates for this relQuery."""
        return len(self.rows.prompts) if self._engine_index is None else len(self._engine_index)

    def _release(self) -> list[RowResult]:
        held, self._held = self._held, []
        answered, self._answered = self._answered, []
        out = [o for r in answered for o in self._answer_one(r)]
        if not held:
            return out
        if self.adaptive is not None:
            return out + [o for r in self.adaptive.decide(held) for o in self._answer_one(r)]
        picks = pooled_picks(self._means_key, [r.label_logprobs for r in held])
        return out + [o for r, text in zip(held, picks) for o in self._answer_one(replace(r, text=text))]

    def _answer_one(self, row: RowResult) -> list[RowResult]:
        value, error = None, row.error
        if error is None and row.text is not None:
            self._answers.append((self.rows.prompts[row.index], row.text))
            value, error = self.call.answer(row.text)
        else:
            error = self.error_prefix + (error or "no answer")
        return [replace(row, index=target, value=value, error=error) for target in self.rows.targets[row.index]]

    @property
    def has_cache_writes(self) -> bool:
        """Whether ``write_cache`` has anything to store (greedy calls with new answers)."""
        return self.rows.cache is not None and self.call.deterministic and bool(self._answers)

    def write_cache(self) -> int:
        """Store the answers of this run (greedy calls only); returns how many were written."""
        if not self.has_cache_writes:
            return 0
        return self.rows.cache.put_many(self.model_id, self.call.sampling_settings(), self._answers)

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
