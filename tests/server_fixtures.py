"""Helpers shared by the server, Postgres and spreadsheet tests (not a test module).

``running_server`` serves an app for an engine on a loopback port in a background thread.
``FakeEngine`` answers without a model, at once or only as the test lets it: for the HTTP-level
tests of auth, limits and validation, whose outcome does not depend on the model.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator

from engine_doubles import best_label
from waits import StillWaiting

from relserve.engine.handle import RelQueryHandle
from relserve.errors import RowError
from relserve.results import RelQueryResult, RelQueryStats, RowResult
from relserve.server import ServerThread, create_app


@contextlib.contextmanager
def running_server(engine, **app_options) -> Iterator[ServerThread]:
    app = create_app(engine, **app_options)
    with ServerThread(app) as srv:
        yield srv


class FakeEngine:
    """Answers every prompt with ``"echo: <prompt>"``, at once, or (``gated=True``) one row per
    permit the test hands out with ``release(n)`` / ``open()``: a test orders what the engine does
    by events it controls, never by how long a row takes."""

    model_id = "fake-model"
    policy = "fake"
    #: seconds a gated row waits for its permit before its relQuery fails naming the permit (a
    #: test that forgot to release fails, not hangs)
    permit_limit_s = 120.0
    uses_plugin = False
    #: the context the operators size their prompts against
    max_model_len = 2048

    def __init__(self, gated: bool = False, delay: float = 0.0) -> None:
        # (``delay`` is accepted at 0 only, for callers written before the gate)
        if delay:
            raise ValueError("FakeEngine orders rows by a gate, not a delay: FakeEngine(gated=True), then release(n)")
        self.submitted: list = []
        #: time.monotonic() at each submit (beside ``submitted``)
        self.submitted_at: list[float] = []
        self.cancelled: list[str] = []
        self._cond = threading.Condition()
        self._permits = 0 if gated else math.inf

    # ------------------------------------------------------------ the test's side

    def release(self, rows: int = 1) -> None:
        """Let ``rows`` more rows (over all relQueries, in the order they wait) be answered."""
        with self._cond:
            self._permits += rows
            self._cond.notify_all()

    def open(self) -> None:
        """Answer every row from now on."""
        self.release(math.inf)

    def wait_submitted(self, n: int = 1, timeout: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.submitted) >= n, timeout), \
                f"still waiting after {timeout:.0f} s for relQuery number {n} to reach the engine"

    def wait_cancelled(self, n: int = 1, timeout: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.cancelled) >= n, timeout), \
                f"still waiting after {timeout:.0f} s for {n} relQuery(ies) to be cancelled (cancelled: {self.cancelled})"

    # ------------------------------------------------------------ the engine's side

    def warm_prefix(self, text: str = "", system: str | None = None) -> int:
        # no prefix cache to warm: the shared executor's warm-up is a no-op here
        return 0

    def _permit(self, stop: threading.Event, what: str) -> bool:
        """Wait for a permit; False once the relQuery is cancelled. Raises StillWaiting naming
        ``what`` when neither comes within ``permit_limit_s``."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._permits > 0 or stop.is_set(), self.permit_limit_s):
                raise StillWaiting(self.permit_limit_s, f"release() or open() to let {what} be answered, or its cancel")
            if stop.is_set():
                return False
            self._permits -= 1
            return True

    def submit(self, rq):
        prompts = rq.render()
        stop = threading.Event()
        with self._cond:
            self.submitted.append(rq)
            self.submitted_at.append(time.monotonic())
            self._cond.notify_all()

        def cancel():
            stop.set()
            with self._cond:
                self.cancelled.append(rq.rel_id)
                self._cond.notify_all()

        handle = RelQueryHandle(rq.rel_id, len(prompts), rq.on_error, cancel)

        def work():
            try:
                answer_rows()
            except StillWaiting as e:  # every caller waiting on the relQuery hears what it waited for
                handle.finish(e)

        def answer_rows():
            t0 = time.monotonic()
            rows = []
            for i, p in enumerate(prompts):
                if isinstance(p, RowError):  # as the real engine: the row fails, the others run
                    row = RowResult(i, error=str(p))
                elif not self._permit(stop, f"row {i} of relQuery {rq.rel_id}"):
                    row = RowResult(i, error="cancelled", finish_reason="abort")
                else:
                    text = rq.choices[0] if rq.choices else f"echo: {p}"
                    row = RowResult(i, text=text, prompt_tokens=len(str(p).split()), output_tokens=2, finish_reason="stop")
                    if rq.score_labels:  # label scoring: the first label holds 90%, as the engine reports it
                        row.label_logprobs = {c: math.log(0.9 if c == text else 0.1 / (len(rq.choices) - 1)) for c in rq.choices}
                        row.text = best_label(row.label_logprobs, rq.label_prior)
                rows.append(row)
                handle.row_done(row)
            stats = RelQueryStats(rq.rel_id, len(rows), num_errors=sum(r.error is not None for r in rows), policy=self.policy)
            stats.latency_s = time.monotonic() - t0
            stats.prompt_tokens = sum(r.prompt_tokens for r in rows)
            stats.output_tokens = sum(r.output_tokens for r in rows)
            handle.finish(RelQueryResult(rows, stats, cancelled=stop.is_set()))

        threading.Thread(target=work, daemon=True).start()
        return handle
