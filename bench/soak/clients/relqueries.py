"""relQueries through the Python client (``relserve.client``): the steady tenant's, some of which
the client walks away from mid-stream or cancels, and the greedy tenant's, sent past its limits.

A relQuery the client left (disconnected, or cancelled with DELETE) is read back from the
server (``GET /v1/relqueries/{id}/result``): every row it did not stream must be there, answered
or with the cancel's error, and every row it did stream must be there unchanged.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from relserve.client import Client, ServerError
from relserve.results import RowResult
from soak.clients.base import ClientContext, ClientLoop, describe
from soak.config import GREEDY, GREEDY_KEY, STEADY, STEADY_KEY
from soak.ledger import Request

TEMPLATE = "In three words, what is this review about? {review}"
MAX_TOKENS = 8
#: shares of the steady client's relQueries it leaves mid-stream, and cancels
DISCONNECT_SHARE, CANCEL_SHARE = 0.15, 0.1


@dataclass(frozen=True)
class CachedAnswer:
    """A row the engine answered for a whole relQuery with the cache on: the result cache holds it
    once its job has ended, and must still answer it after a kill."""

    review: str
    text: str
    ended: float


class AnswerMemory:
    """The steady client's answered rows, for the check after a kill (cache_check.py)."""

    def __init__(self, keep: int = 400) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._rows: list[CachedAnswer] = []

    def add(self, rows: list[CachedAnswer]) -> None:
        with self._lock:
            self._rows = (self._rows + rows)[-self.keep :]

    def ended_before(self, t: float) -> list[CachedAnswer]:
        with self._lock:
            return [r for r in self._rows if r.ended < t]


def record_row(req: Request, row: RowResult) -> None:
    if row.error is None:
        req.answered(row.index, row.text or "")
    else:
        req.errored(row.index, row.error)


class RelQueryClient(ClientLoop):
    """The steady tenant's relQueries, streamed (``POST /v1/relqueries`` with ``stream``)."""

    kind = "relquery"
    tenant, key = STEADY, STEADY_KEY

    def __init__(self, ctx: ClientContext, number: int, memory: AnswerMemory | None = None) -> None:
        super().__init__(ctx, number)
        self.client = Client(ctx.url, api_key=self.key, timeout=ctx.config.request_timeout_s)
        self.memory = memory

    def size(self) -> int:
        return self.rng.randint(4, 12)

    def teardown(self) -> None:
        self.client.close()

    def pick_fault(self) -> str | None:
        x = self.rng.random()
        return "disconnect" if x < DISCONNECT_SHARE else "cancel" if x < DISCONNECT_SHARE + CANCEL_SHARE else None

    def once(self) -> bool:
        reviews = self.ctx.texts.draw(self.rng, self.size())
        rows = [{"review": r} for r in reviews]
        fault = self.pick_fault()
        req = self.open(self.tenant, len(rows), fault)
        try:
            if fault == "cancel":
                self._cancelled(req, rows)
            else:
                self._streamed(req, rows, leave_after=self.rng.randint(1, len(rows) // 2) if fault else None)
            return True
        except ServerError as e:
            req.fail_rest(str(e))
            return e.status not in (0, 502, 503)  # a refusal is an answer; a server away is not
        except Exception as e:  # a client-side failure is still the request's outcome, named
            req.fail_rest(describe(e))
            return False
        finally:
            req.end()

    def _streamed(self, req: Request, rows: list[dict], leave_after: int | None) -> None:
        got: dict[int, RowResult] = {}
        with self.client.stream(TEMPLATE, rows, max_tokens=MAX_TOKENS) as s:
            req.job_id = s.id
            for row in s:
                got[row.index] = row
                record_row(req, row)
                if leave_after is not None and len(got) >= leave_after:
                    break  # leaving the block closes the connection: the server cancels the rest
        if leave_after is not None:
            self._read_back(req, got)
        elif s.done is None:
            req.fail_rest("the stream ended without its done event")
        elif self.memory is not None and req.fully_answered:
            ended = time.monotonic()
            self.memory.add([CachedAnswer(rows[i]["review"], r.text or "", ended)
                             for i, r in got.items() if not r.cached])

    def _cancelled(self, req: Request, rows: list[dict]) -> None:
        req.job_id = self.client.submit(TEMPLATE, rows, max_tokens=MAX_TOKENS)
        time.sleep(self.rng.uniform(0.2, 2.0))
        self.client.cancel(req.job_id, timeout=60)
        self._read_back(req, {})

    def _read_back(self, req: Request, streamed: dict[int, RowResult]) -> None:
        """Every row the client did not take from the stream, as the server kept it."""
        res = self.client.result(req.job_id, wait=True, timeout=120)
        for row in res.rows:
            before = streamed.get(row.index)
            if before is None:
                record_row(req, row)
            elif (before.text, before.error) != (row.text, row.error):
                req.errored(row.index, f"harness: the result differs from the streamed row: "
                                       f"{(before.text, before.error)} then {(row.text, row.error)}")


class GreedyClient(RelQueryClient):
    """The greedy tenant, past its limits, in turns: a relQuery of 40 rows, over its 32 rows per
    request (413); then twice two submitted at once, 12 rows then 16, over its 24 rows in flight
    (429 for the second, unless the first is already done)."""

    kind = "greedy"
    tenant, key = GREEDY, GREEDY_KEY
    #: requests sent so far: every third one is the one of 40 rows
    turn = 0

    def once(self) -> bool:
        self.turn += 1
        if self.turn % 3 == 1:
            return self._one(40)
        jobs = [self._submitted(n) for n in (12, 16)]
        reachable = all(ok for _, ok in jobs)
        for req, _ in jobs:
            try:
                if req.job_id is not None:
                    self._read_back(req, {})
            except ServerError as e:
                req.fail_rest(str(e))
                reachable = reachable and e.status not in (0, 502, 503)
            finally:
                req.end()
        return reachable

    def _one(self, n: int) -> bool:
        req = self.open(self.tenant, n)
        try:
            self._streamed(req, [{"review": r} for r in self.ctx.texts.draw(self.rng, n)], leave_after=None)
            return True
        except ServerError as e:
            req.fail_rest(str(e))
            return e.status not in (0, 502, 503)
        finally:
            req.end()

    def _submitted(self, n: int) -> tuple[Request, bool]:
        """A relQuery of ``n`` rows submitted (``job_id`` set) or refused; False: the server is away."""
        req = self.open(self.tenant, n)
        try:
            req.job_id = self.client.submit(TEMPLATE, [{"review": r} for r in self.ctx.texts.draw(self.rng, n)],
                                            max_tokens=MAX_TOKENS)
        except ServerError as e:
            req.fail_rest(str(e))
            return req, e.status not in (0, 502, 503)
        return req, True
