"""What a label call counts against its tenant's in-flight limits (relserve/server/budget.py),
from the side of a tenant that chooses its input: a spreadsheet recalculation of filter cells
counts its one first pass, not one per cell. With the instant stand-in engine."""

from __future__ import annotations

import httpx
from server_fixtures import FakeEngine, running_server


def _post(srv, path: str, body: dict, key: str) -> httpx.Response:
    return httpx.post(srv.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def _error(r: httpx.Response) -> str:
    return r.json()["error"]["message"]


def test_filter_cells_of_one_template_count_one_first_pass_not_one_per_cell():
    """100 filter cells of one template are one relQuery, so one label plan: the default
    (adaptive) asks the model for the question's concept (one request), scores 8 of a 24-row
    sample in seven layouts (the question; four row-alone ones, "ok" against "other"; two on the
    concept the model may propose), the other 16 in the two best, and three content-free rows:
    100 + 1 + 56 + 32 + 3 = 192 engine requests (docs/server-postgres-spreadsheet.md, Tenants).
    A first pass per cell books about ten requests per cell, 1,000 or more."""
    cells = [{"id": f"A{i}", "template": "Is {x} ok?", "args": [f"value {i}"]} for i in range(100)]
    body = {"cells": cells, "function": "filter", "stream": False}
    tenants = {"tenants": {"tight": {"key": "tight-secret-key", "max_rows_in_flight": 191},
                           "fits": {"key": "fits-secret-key", "max_rows_in_flight": 192}}}
    fake = FakeEngine()
    with running_server(fake, tenants=tenants, cache=False) as srv:
        r = _post(srv, "/v1/cells", body, "tight-secret-key")
        assert r.status_code == 429
        assert _error(r).startswith("tenant 'tight' would have 192 rows in flight (0 running + 192 new); the limit is 191")
        assert fake.submitted == []
        r = _post(srv, "/v1/cells", body, "fits-secret-key")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "finished" and len(r.json()["cells"]) == 100
    # what the engine ran: the rows and the first pass (the stand-in engine's answers make the
    # model propose a concept), no more than was booked
    sent = sum(len(rq.render()) for rq in fake.submitted)
    assert 100 < sent <= 192
