"""One ``relserve serve`` in a subprocess, and the supervisor that restarts it when it exits
(as systemd's ``Restart=on-failure`` would), recording when it went down and when it answered
again."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]
RELSERVE = str(Path(sys.executable).parent / "relserve")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``relserve serve`` on a loopback port, its result cache under ``home``."""

    def __init__(self, home: Path, port: int, tenants: Path, log: Path) -> None:
        self.home = home
        self.port = port
        self.tenants = tenants
        self.log = log
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        # this checkout's relserve, whatever the virtual env's editable install points at
        env = dict(os.environ, RELSERVE_HOME=str(self.home), PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
        with open(self.log, "ab") as log:
            log.write(f"\n==== relserve serve started at {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [RELSERVE, "serve", "--port", str(self.port), "--tenants", str(self.tenants), "--log-level", "warning"],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def exited(self) -> int | None:
        """The exit code once the process has ended (negative: the signal), else None."""
        return self.proc.poll() if self.proc is not None else None

    def healthy(self, timeout: float = 3.0) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def processes(self) -> tuple[psutil.Process | None, list[psutil.Process]]:
        """The server process and its engine processes (its descendants)."""
        try:
            me = psutil.Process(self.pid) if self.pid is not None and self.exited() is None else None
            return me, (me.children(recursive=True) if me is not None else [])
        except psutil.Error:
            return None, []

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the server drains), then SIGKILL if it does not end in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@dataclass
class Outage:
    """The server not answering: from ``down_at`` (its exit, or the fault's start) to ``up_at``."""

    cause: str
    down_at: float
    exit_code: int | None = None
    exited_at: float | None = None
    up_at: float | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.up_at is None else self.up_at - self.down_at


@dataclass
class Supervisor:
    """Restarts the server whenever it exits, until ``finish()``; one ``Outage`` per restart."""

    server: ServerProcess
    #: called once the server has exited and before it starts again (the cache check)
    on_exit: Callable[[Outage], None] | None = None
    start_timeout_s: float = 1200.0
    outages: list[Outage] = field(default_factory=list)
    incarnation: int = 0
    #: when the current process started answering (time.monotonic())
    up_since: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    #: the cause the next exit is blamed on (a fault says what it is about to do)
    _expected_cause: str | None = None

    def start(self) -> None:
        """Start the server and wait until it answers (the first start has no outage)."""
        self.server.start()
        self._wait_up()
        self._thread = threading.Thread(target=self._watch, name="soak-supervisor", daemon=True)
        self._thread.start()

    def expect_exit(self, cause: str) -> Outage:
        """A fault is about to bring the server down: its outage starts now, named ``cause``."""
        with self._lock:
            outage = Outage(cause, time.monotonic())
            self.outages.append(outage)
            self._expected_cause = cause
            return outage

    def _wait_up(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.healthy():
            if self._stop.is_set():
                return  # the run is over: no need to wait for this start
            code = self.server.exited()
            if code is not None:
                raise RuntimeError(f"relserve serve exited with {code} while starting; see {self.server.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"relserve serve did not answer /health within {self.start_timeout_s:.0f} s")
            time.sleep(0.25)
        if self._stop.is_set():
            return
        self.up_since = time.monotonic()
        self.incarnation += 1

    def _watch(self) -> None:
        while not self._stop.is_set():
            code = self.server.exited()
            if code is None:
                self._stop.wait(0.2)
                continue
            with self._lock:
                outage = self.outages[-1] if self._expected_cause is not None else None
                if outage is None:  # nobody said it would go: an exit of its own
                    outage = Outage(f"unexpected exit {code}", time.monotonic())
                    self.outages.append(outage)
                outage.exit_code, outage.exited_at = code, time.monotonic()
                self._expected_cause = None
                self.up_since = None
            if self._stop.is_set():
                return
            if self.on_exit is not None:
                self.on_exit(outage)
            self.server.start()
            try:
                self._wait_up()
            except RuntimeError:
                continue  # it exited again while starting: the loop starts it once more
            if self.up_since is not None:
                outage.up_at = self.up_since

    def finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.start_timeout_s)
        self.server.stop()
