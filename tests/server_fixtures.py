"""Helpers shared by the server, Postgres and spreadsheet tests (not a test module).

``running_server`` serves an app for an engine on a loopback port in a background thread.
``FakeEngine`` answers instantly (or slowly) without a model: for the HTTP-level tests of
auth, limits and validation, whose outcome does not depend on the model.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator

from relserve.engine.handle import RelQueryHandle
from relserve.engine.label_scoring import pick
from relserve.errors import RowError
from relserve.results import RelQueryResult, RelQueryStats, RowResult
from relserve.server import ServerThread, create_app


@contextlib.contextmanager
def running_server(engine, **app_options) -> Iterator[ServerThread]:
    app = create_app(engine, **app_options)
    with ServerThread(app) as srv:
        yield srv


class FakeEngine:
    """Answers every prompt with ``"echo: <prompt>"`` after ``delay`` seconds per row."""

    model_id = "fake-model"
    policy = "fake"
    uses_plugin = False
    #: the context the operators size their prompts against
    max_model_len = 2048

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.submitted: list = []
        #: time.monotonic() at each submit (beside ``submitted``)
        self.submitted_at: list[float] = []
        self.cancelled: list[str] = []

    def warm_prefix(self, text: str = "", system: str | None = None) -> int:
        # no prefix cache to warm: the shared executor's warm-up is a no-op here
        return 0

    def submit(self, rq):
        prompts = rq.render()
        self.submitted.append(rq)
        self.submitted_at.append(time.monotonic())
        stop = threading.Event()

        def cancel():
            self.cancelled.append(rq.rel_id)
            stop.set()

        handle = RelQueryHandle(rq.rel_id, len(prompts), rq.on_error, cancel)

        def work():
            t0 = time.monotonic()
            rows = []
            for i, p in enumerate(prompts):
                if isinstance(p, RowError):  # as the real engine: the row fails, the others run
                    row = RowResult(i, error=str(p))
                elif stop.wait(self.delay) or stop.is_set():
                    row = RowResult(i, error="cancelled", finish_reason="abort")
                else:
                    text = rq.choices[0] if rq.choices else f"echo: {p}"
                    row = RowResult(i, text=text, prompt_tokens=len(str(p).split()), output_tokens=2, finish_reason="stop")
                    if rq.score_labels:  # label scoring: the first label holds 90%, as the engine reports it
                        row.label_logprobs = {c: math.log(0.9 if c == text else 0.1 / (len(rq.choices) - 1)) for c in rq.choices}
                        row.text = pick(row.label_logprobs, rq.label_prior)
                rows.append(row)
                handle._row_done(row)
            stats = RelQueryStats(rq.rel_id, len(rows), num_errors=sum(r.error is not None for r in rows), policy=self.policy)
            stats.latency_s = time.monotonic() - t0
            stats.prompt_tokens = sum(r.prompt_tokens for r in rows)
            stats.output_tokens = sum(r.output_tokens for r in rows)
            handle._finish(RelQueryResult(rows, stats, cancelled=stop.is_set()))

        threading.Thread(target=work, daemon=True).start()
        return handle
