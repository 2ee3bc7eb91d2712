"""Estimates as a tenant sees them (issue 63, items 4 and 5), on a real server on loopback whose
engine holds other tenants' work in flight (``Engine.queued()``, answered here by a stand-in).

4. An estimate's "now" replays every tenant's queued prompts, each in its own prefix-cache
   namespace, as the engine's prefix cache keys them: a tenant that guesses another tenant's
   in-flight prompt gets the same ``now_s`` as for a wrong guess of the same length (the replay
   hashed every prompt without its salt, so a right guess found the other tenant's blocks: 0.81 s
   against 3.68 s in the issue). Its own in-flight prompt it still finds, as the engine would.
5. A one-row estimate behind 8,000 queued rows replays a bounded sample of them (and adds the
   rest as seconds): the requests the simulator holds are counted, whatever the queue's length.
"""

from __future__ import annotations

import time

import httpx
import pytest
from engine_doubles import TenantAwareEngine
from server_fixtures import running_server

from relserve.engine.queued import QueuedRelQuery, QueuedRequest
from relserve.estimate import timing
from relserve.estimate.prompt_tokens import model_tokenizer
from relserve.estimate.snapshot import MAX_REPLAYED_REQUESTS

KEYS = {"a": "tenant-a-key", "b": "tenant-b-key"}
SECRET = "Quarterly note: the merger with Globex closes on 12 March at 9am, and the price is 41 dollars a share. " * 6
WRONG = SECRET.replace("12 March", "19 March", 1)  # a guess of the same length, one token apart


class QueueHoldingEngine(TenantAwareEngine):
    """The stand-in engine with work in flight: ``held`` is what ``queued()`` answers."""

    held: list[QueuedRelQuery] = []

    def queued(self) -> list[QueuedRelQuery]:
        return list(self.held)


@pytest.fixture(scope="module")
def server():
    engine = QueueHoldingEngine()
    tenants = {"tenants": {name: {"key": key} for name, key in KEYS.items()}}
    with running_server(engine, tenants=tenants, cache=False) as srv:
        srv.engine = engine
        yield srv


def plan(server, tenant: str, rows: list[dict]) -> dict:
    r = httpx.post(f"{server.url}/v1/relqueries/plan", json={"template": "{x}", "rows": rows, "max_tokens": 16},
                   headers={"Authorization": f"Bearer {KEYS[tenant]}"}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["estimate"]


def prompt_ids(text: str) -> list[int]:
    """The token ids the engine computes for ``text`` as llm_map's prompt (chat template)."""
    return model_tokenizer().ids([text])[0]


def in_flight(tenant: str, ids: list[int], running: int, waiting: int, rel_id: str = "theirs") -> QueuedRelQuery:
    """A relQuery of ``tenant`` in the engine: ``running`` copies of the prompt prefilled and
    decoding, ``waiting`` more queued, in the tenant's namespace (``tenant:<name>``, as the server
    salts it)."""
    requests = [QueuedRequest(ids, computed=len(ids), generated=1, running=True)] * running
    requests += [QueuedRequest(ids)] * waiting
    return QueuedRelQuery(rel_id, time.monotonic() - 0.5, 16, "", tenant, 0, False, requests, f"tenant:{tenant}")


def test_a_tenant_cannot_learn_another_tenants_in_flight_prompt_from_an_estimate(server):
    assert len(prompt_ids(SECRET)) == len(prompt_ids(WRONG))
    server.engine.held = [in_flight("a", prompt_ids(SECRET), running=4, waiting=12)]
    try:
        right, wrong = plan(server, "b", [{"x": SECRET}]), plan(server, "b", [{"x": WRONG}])
        assert right["queued_requests"] == wrong["queued_requests"] == 16
        assert right["now_s"] == wrong["now_s"]
        # the owner's own guess finds its blocks in the replay, as it would in the engine
        own_right, own_wrong = plan(server, "a", [{"x": SECRET}]), plan(server, "a", [{"x": WRONG}])
        assert own_right["now_s"] < own_wrong["now_s"]
    finally:
        server.engine.held = []


def test_an_estimate_behind_8000_queued_rows_replays_a_bounded_sample(server, monkeypatch):
    held: list[int] = []
    run = timing._run

    def counting(machine, background, cached, relqueries, until_done=()):
        # the requests the simulator holds: the queue's replayed part and the call's own
        held.append(sum(q.size for q in relqueries) + (background.replayed if background is not None else 0))
        return run(machine, background, cached, relqueries, until_done)

    monkeypatch.setattr(timing, "_run", counting)
    ids = prompt_ids("Summarize this review in one sentence: a quiet film that stays with you.")
    for rows in (8000, 32000):
        held.clear()
        server.engine.held = [in_flight("a", ids[:3] + [t + r for t in ids[3:]], running=1 if r == 0 else 0,
                                        waiting=49 if r == 0 else 50, rel_id=f"q{r}") for r in range(rows // 50)]
        try:
            est = plan(server, "b", [{"x": "Is this one row of mine?"}])
        finally:
            server.engine.held = []
        assert est["queued_requests"] == rows
        assert held and max(held) <= MAX_REPLAYED_REQUESTS + 1, held  # the queue's sample, and the call's one row
        assert est["now_s"] > est["idle_s"]
