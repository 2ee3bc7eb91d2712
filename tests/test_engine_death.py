"""When the engine's processes die under a server (found by issue 68's soak): the rows cut short
say that the engine died, and ``relserve serve`` stops with a failure exit, its streams ending
with the reason, so that its supervisor (systemd's ``Restart=on-failure``) starts it again.
Before, it kept running with a dead engine, refusing every request, and was never restarted."""

from __future__ import annotations

import json
import os
import signal
import socket
from types import SimpleNamespace

import httpx
import pytest
from server_fixtures import FakeEngine, running_server
from waits import Worker, lines_within, wait_until

import relserve
from relserve.engine.engine import DEAD, Engine
from relserve.engine.handle import RelQueryHandle
from relserve.errors import EngineError


async def test_a_row_cut_short_by_the_engines_death_says_the_engine_died():
    from vllm.v1.engine.exceptions import EngineDeadError

    engine = Engine.__new__(Engine)  # the row's code alone: no processes to start
    engine._llm = SimpleNamespace(errored=True)  # vLLM's client once its engine core is gone
    handle = RelQueryHandle("r", 1, "null", cancel=lambda: None)
    running = SimpleNamespace(handle=handle, times={}, cancel_reason=None)

    async def generation():
        raise EngineDeadError()  # "EngineCore encountered an issue. See stack trace (above) ..."
        yield

    await engine._row(running, 0, 5, generation())
    assert handle.row(0).error == DEAD


async def test_an_rpc_to_the_dead_engine_core_says_the_engine_died():
    """vLLM raises its own EngineDeadError ("see stack trace (above)"), which a server reported
    as a 500; relserve's EngineError names the death (and the server answers it with a 503)."""
    from vllm.v1.engine.exceptions import EngineDeadError

    async def dead_core(*args):
        raise EngineDeadError()

    engine = Engine.__new__(Engine)
    engine.policy = "relserve"
    engine._llm = SimpleNamespace(errored=True, engine_core=SimpleNamespace(call_utility_async=dead_core))
    with pytest.raises(EngineError) as e:
        await engine._rpc("cached_prefix", {})
    assert str(e.value) == DEAD


class DyingEngine(FakeEngine):
    """A stand-in engine whose processes the test declares dead."""

    dead_reason: str | None = None

    def close(self) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_relserve_serve_stops_with_a_failure_exit_when_its_engine_dies(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from relserve.cli import app

    engine = DyingEngine(gated=True)  # its rows wait: the relQuery is running when the engine dies
    monkeypatch.setattr(relserve, "Engine", lambda **options: engine)
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path))
    url = f"http://127.0.0.1:{(port := _free_port())}"
    events: list[dict] = []

    def client() -> None:
        wait_until(lambda: _answers(url), "relserve serve to answer /health", timeout=60, poll=0.1)
        body = {"template": "Say {x}.", "rows": [{"x": "a"}, {"x": "b"}], "stream": "ndjson"}
        try:
            with httpx.stream("POST", url + "/v1/relqueries", json=body, timeout=60) as r:
                lines = r.iter_lines()
                events.extend(json.loads(line) for line in lines_within(lines, 60, "the accepted event", count=1))
                engine.wait_submitted(1)
                engine.dead_reason = DEAD
                events.extend(json.loads(line) for line in lines_within(lines, 20, "the stream to end") if line.strip())
            wait_until(lambda: not _answers(url), "relserve serve to stop after its engine died", timeout=20, poll=0.1)
        finally:
            if _answers(url):  # the test must not hang on a server that stays up: Ctrl-C stops it
                os.kill(os.getpid(), signal.SIGINT)

    worker = Worker(client, what="the client of relserve serve")
    worker.start()
    result = CliRunner().invoke(app, ["serve", "--port", str(port), "--no-cache", "--log-level", "warning"])
    worker.finish(60)
    assert result.exit_code == 1, result.output
    assert f"relserve serve stopped: {DEAD}" in result.output
    reason = f"cancelled: the server is stopping because {DEAD}"
    assert [e["event"] for e in events] == ["accepted", "row", "row", "done"]
    assert [e["error"] for e in events if e["event"] == "row"] == [reason, reason]
    assert (events[-1]["status"], events[-1]["error"]) == ("cancelled", reason)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code in (200, 503)
    except httpx.HTTPError:
        return False


class DeadEngine(FakeEngine):
    """A stand-in whose processes have died: every relQuery it is given fails, as the engine's do."""

    def submit(self, rq):
        handle = RelQueryHandle(rq.rel_id, len(rq.render()), rq.on_error, cancel=lambda: None)
        handle.finish(EngineError(f"relQuery {rq.rel_id} failed: {DEAD}"))
        return handle


def test_a_chat_request_the_dead_engine_could_not_answer_is_a_503_naming_it():
    """Not a 400 "prompt 0: ...": the prompt was not at fault, and it may be sent again."""
    with running_server(DeadEngine(), cache=False) as srv:
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4})
    assert (r.status_code, r.headers["retry-after"]) == (503, "5")
    message = r.json()["error"]["message"]
    assert message.startswith("EngineError: relQuery ") and message.endswith(f" failed: {DEAD}")


class DeadViewEngine(FakeEngine):
    """A stand-in whose processes have died: its answers for estimates (what its prefix cache
    holds) fail, as the engine's RPC to its dead core does."""

    def cached_prefix_tokens(self, prompts, salt=None):
        raise EngineError(DEAD)


def test_a_request_whose_estimate_meets_the_dead_engine_is_a_503_naming_it():
    """Not a 500 "Internal Server Error": found by the soak, a PostgreSQL call sent in the second
    between the engine's death and the server's stop."""
    with running_server(DeadViewEngine(), cache=False) as srv:
        r = httpx.post(srv.url + "/v1/relqueries/plan", json={"template": "Say {x}.", "rows": [{"x": "a"}]}, timeout=60)
    assert (r.status_code, r.headers.get("retry-after")) == (503, "5")
    assert r.json()["error"]["message"] == DEAD
