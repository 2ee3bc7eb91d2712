"""Fault injection on real processes: the engine core killed under running relQueries, the
server killed (-9) or stopped (SIGTERM) while it streams. Nothing may hang, nothing may
outlive its parent, and every waiting caller hears what happened."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import TEST_ENGINE_OPTIONS
from server_fixtures import running_server

from relserve import Engine, RelQuery
from relserve.client import Client
from relserve.errors import EngineError

pytestmark = pytest.mark.engine

RELSERVE = str(Path(sys.executable).parent / "relserve")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes still alive after ``timeout`` seconds (zombies count as gone)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _long_rows(n: int) -> list[dict]:
    return [{"topic": f"the history of city number {i}"} for i in range(n)]


# ---------------------------------------------------------------- the engine core dies


def test_killing_the_engine_core_fails_every_waiting_caller_and_a_new_engine_starts():
    before = {p.pid for p in _descendants(os.getpid())}
    engine = Engine(**TEST_ENGINE_OPTIONS)
    try:
        core = [p for p in _descendants(os.getpid()) if p.pid not in before]
        assert core, "the engine started no process of its own"
        # two relQueries of several waves each (16 sequences at a time): both are unfinished
        # when the first row of either has finished
        handles = [
            engine.submit(RelQuery("Write a long essay about {topic}.", _long_rows(40), max_tokens=120, ignore_eos=True))
            for _ in range(2)
        ]
        end = time.monotonic() + 120
        while sum(h.progress.done for h in handles) == 0 and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(h.done() for h in handles)
        for p in core:
            p.kill()
        for h in handles:
            with pytest.raises(EngineError, match=r"the engine's processes died"):
                h.result(timeout=60)
        assert not engine.alive
        with pytest.raises(EngineError, match=r"start a new Engine"):
            engine.submit(RelQuery("Say {x}.", [{"x": "hi"}], max_tokens=2))
        with running_server(engine, cache=False) as srv:  # a server on it says so, and fails work
            r = httpx.get(srv.url + "/health")
            assert (r.status_code, r.json()["status"]) == (503, "engine-dead")
            c = Client(srv.url)
            res = c.result(c.submit("Say {x}.", [{"x": "hi"}], max_tokens=2))
            assert res.status == "failed" and "the engine's processes died" in res.error
    finally:
        t0 = time.monotonic()
        engine.close()
        assert time.monotonic() - t0 < 60
    again = Engine(**TEST_ENGINE_OPTIONS)
    try:
        result = again.run(RelQuery("Say {x}.", [{"x": "hello"}], max_tokens=4), timeout=120)
        assert result.rows[0].error is None and result.rows[0].text
    finally:
        again.close()


# ---------------------------------------------------------------- the server dies or stops


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = dict(os.environ, RELSERVE_HOME=str(tmp_path / "home"), RELSERVE_KV_CACHE_GB="1", RELSERVE_MAX_NUM_SEQS="16")
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [RELSERVE, "serve", "--port", str(port), "--no-cache", "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 240
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"relserve serve exited with {proc.returncode}:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("relserve serve did not answer /health within 240 s")


def test_kill_9_of_the_server_takes_its_engine_processes_with_it(tmp_path):
    proc, url = _start_server(tmp_path)
    children = _descendants(proc.pid)
    assert children, "the server started no engine process"
    proc.kill()
    proc.wait(10)
    left = _wait_gone(children, timeout=30)
    for p in left:  # clean up before failing
        p.kill()
    assert not left, f"outlived the killed server: {[(p.pid, p.name()) for p in left]}"


def test_sigterm_while_streaming_ends_the_stream_with_a_final_event_and_stops_cleanly(tmp_path):
    proc, url = _start_server(tmp_path)
    children = _descendants(proc.pid)
    body = {"template": "Write a long essay about {topic}.", "rows": _long_rows(30), "max_tokens": 200, "stream": "ndjson"}
    events = []
    try:
        with httpx.stream("POST", url + "/v1/relqueries", json=body, timeout=120) as r:
            assert r.status_code == 201
            lines = r.iter_lines()
            events.append(json.loads(next(lines)))
            assert events[0]["event"] == "accepted"
            proc.send_signal(signal.SIGTERM)
            for line in lines:
                if line.strip():
                    events.append(json.loads(line))
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    done = events[-1]
    assert done["event"] == "done", events[-3:]
    assert (done["status"], done["error"]) == ("cancelled", "cancelled: the server is stopping")
    rows = [e for e in events if e["event"] == "row"]
    assert len(rows) == 30 and len({e["index"] for e in rows}) == 30
    assert any(e["error"] == "cancelled: the server is stopping" for e in rows)
    left = _wait_gone(children, timeout=30)
    for p in left:
        p.kill()
    assert not left, f"outlived the stopped server: {[(p.pid, p.name()) for p in left]}"
