"""What every client loop shares: the run's stop signal, the ledger, the texts, its own seeded
random stream, and a closed loop (send, wait for the answer, think) that backs off while the
server is down instead of spinning through refusals."""

from __future__ import annotations

import random
import threading
import traceback
from dataclasses import dataclass, field

from soak.config import SoakConfig
from soak.ledger import Ledger, Request
from soak.texts import Texts


@dataclass
class ClientContext:
    config: SoakConfig
    url: str
    ledger: Ledger
    texts: Texts
    stop: threading.Event = field(default_factory=threading.Event)


def describe(e: BaseException) -> str:
    """An exception as the error a row records: its type and its message."""
    return f"{type(e).__name__}: {e}".strip()


class ClientLoop(threading.Thread):
    """One client: ``once()`` sends one request and records its rows; the loop repeats it."""

    kind = "client"

    def __init__(self, ctx: ClientContext, number: int) -> None:
        super().__init__(name=f"soak-{self.kind}-{number}", daemon=True)
        self.ctx = ctx
        self.number = number
        # each client its own stream: the same seed gives every client the same choices
        self.rng = random.Random(f"{ctx.config.seed}-{self.kind}-{number}")
        #: the request in flight (the harness names it if it hangs past the run's end)
        self.current: Request | None = None

    def once(self) -> bool:
        """Send one request; False when it failed as a whole (the loop then backs off)."""
        raise NotImplementedError

    def setup(self) -> None:
        """Connections and tables the client needs before its first request."""

    def teardown(self) -> None:
        pass

    def run(self) -> None:
        failures = 0
        try:
            self.setup()
            while not self.ctx.stop.is_set():
                try:
                    ok = self.once()
                except Exception as e:  # the harness's own bug: named on the request, and the load goes on
                    traceback.print_exc()
                    if self.current is not None:
                        self.current.fail_rest(f"harness: the client failed: {describe(e)}")
                        self.current.end()
                    ok = False
                self.current = None
                failures = 0 if ok else failures + 1
                think = self.ctx.config.load.think_s * self.rng.uniform(0.5, 1.5)
                # a server that is restarting refuses at once: wait longer each time, up to 10 s
                self.ctx.stop.wait(think + min(10.0, failures * 2.0))
        finally:
            self.teardown()

    def open(self, tenant: str, rows: int, fault: str | None = None) -> Request:
        self.current = self.ctx.ledger.open(self.kind, tenant, rows, fault)
        return self.current
