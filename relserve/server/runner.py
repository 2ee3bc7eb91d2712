"""Run an app with uvicorn in a background thread on a loopback port (tests, benchmarks,
notebooks). ``relserve serve`` runs uvicorn in the foreground instead."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn


class Server(uvicorn.Server):
    """uvicorn's server, telling the app when it is asked to stop (SIGTERM, SIGINT, ``stop()``)
    so that running relQueries end with a final event instead of a cut stream.

    With ``stop_when_dead`` (``relserve serve`` passes its engine) the server also stops once
    that engine's processes have died, and ``engine_died`` says why: a server whose engine is
    dead can only refuse work, and its supervisor (systemd's ``Restart=on-failure``) restarts
    it only when it exits."""

    #: seconds between two looks at the engine (uvicorn ticks every 0.1 s)
    engine_check_s = 1.0

    def __init__(self, config: uvicorn.Config, stop_when_dead: object | None = None) -> None:
        super().__init__(config)
        self.stop_when_dead = stop_when_dead
        #: why the server stopped on its own: its engine's ``dead_reason`` (None: it did not)
        self.engine_died: str | None = None

    def handle_exit(self, sig, frame) -> None:
        begin_shutdown(self.config.app)
        super().handle_exit(sig, frame)
        # uvicorn re-raises the signal after its graceful shutdown, which would kill the process
        # before `relserve serve` closes its engine; a stopped server returns normally instead
        self._captured_signals.clear()

    async def on_tick(self, counter: int) -> bool:
        every = max(1, round(self.engine_check_s / 0.1))
        if self.stop_when_dead is not None and self.engine_died is None and counter % every == 0:
            dead = getattr(self.stop_when_dead, "dead_reason", None)
            if dead:
                self.engine_died = dead
                # the jobs the engine failed end their streams naming it; new work is refused
                begin_shutdown(self.config.app, f"cancelled: the server is stopping because {dead}")
                self.should_exit = True
        return await super().on_tick(counter)


def begin_shutdown(app, reason: str | None = None) -> None:
    state = getattr(getattr(app, "state", None), "relserve", None)
    if state is not None:
        state.begin_shutdown(reason)


class ServerThread:
    """``with ServerThread(app) as srv: httpx.get(srv.url + "/health")``"""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))  # port 0: the OS picks a free one, with no race
        self.host, self.port = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=5)
        self.server = Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True, name="relserve-http")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        end = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > end:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        begin_shutdown(self.server.config.app)
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
