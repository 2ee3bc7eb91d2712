"""What a label call counts against its tenant's in-flight limits (relserve/server/budget.py
``label_cost``), from the side of a tenant that chooses its input: a scored classify counts one
engine request per label-trie node each prompt reads, so many long labels cannot pass as a few
rows; and a spreadsheet recalculation of filter cells counts its one first pass, not one per
cell. With the instant stand-in engine (the default model's tokenizer counts the labels)."""

from __future__ import annotations

import httpx
from server_fixtures import FakeEngine, running_server
from waits import BoundedClient, wait_until

CAROL = "carol-secret-key"
PROBE = "probe-secret-key"
#: five rows of a classify of 1,000 labels: they run as ``prior`` (too few rows for label means),
#: three content-free probes and then the rows, every prompt scored by one request per trie node
#: its labels need (relserve/engine/label_rows.py). Each label is read in two spellings ("topic 7"
#: and "Topic 7"), each ending at a token of its own, and a request reads at most 20 of them
#: (vLLM's max_logprobs): at least 2,000 / 20 = 100 requests per prompt, 8 x 100 in all, where the
#: rows and probes alone are 8
MANY = {"function": "classify", "template": "Which topic is {x} about?", "rows": [{"x": f"note {i}"} for i in range(5)],
        "labels": [f"topic {i}" for i in range(1000)]}


def _post(srv, path: str, body: dict, key: str) -> httpx.Response:
    return httpx.post(srv.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def _error(r: httpx.Response) -> str:
    return r.json()["error"]["message"]


def _new_rows(r: httpx.Response) -> int:
    """The rows a refused request would have added ("... (0 running + N new) ...")."""
    assert r.status_code == 429, r.text
    return int(_error(r).split(" running + ")[1].split(" new")[0])


def test_a_classify_of_many_labels_counts_every_scoring_request_and_a_small_one_still_runs():
    tenants = {"tenants": {"carol": {"key": CAROL, "max_rows_in_flight": 100}}}
    with running_server(FakeEngine(), tenants=tenants, cache=False) as srv:
        r = _post(srv, "/v1/relqueries", MANY, CAROL)
        assert _new_rows(r) >= 8 * 100
        assert _error(r).startswith("tenant 'carol' would have ") and "rows in flight (0 running + " in _error(r)
        # three labels of one token each: one request per prompt, 8 in flight
        r = _post(srv, "/v1/relqueries", {**MANY, "labels": ["sports", "money", "weather"]}, CAROL)
        assert r.status_code == 201, r.text
        assert BoundedClient(srv.url, api_key=CAROL).result(r.json()["id"]).status == "finished"


def test_a_running_classify_keeps_its_scoring_requests_booked_until_its_rows_finish():
    """The job books what its request booked while planning, and each row that finishes frees
    its requests: a second copy waits while the first runs, and fits once it finished."""
    with running_server(FakeEngine(), tenants={"tenants": {"probe": {"key": PROBE, "max_rows_in_flight": 1}}},
                        cache=False) as srv:
        booked = _new_rows(_post(srv, "/v1/relqueries", MANY, PROBE))
    assert booked >= 8 * 100 and booked % 8 == 0
    per_prompt = booked // 8  # the same labels score the three probes and the five rows
    gated = FakeEngine(gated=True)  # nothing is answered until the test lets it
    # room for one copy and most of another, not for a second beside one two rows into its run
    limit = 2 * booked - 2 * per_prompt - 1
    tenants = {"tenants": {"carol": {"key": CAROL, "max_rows_in_flight": limit}}}
    with running_server(gated, tenants=tenants, cache=False) as srv:
        carol = BoundedClient(srv.url, api_key=CAROL)
        try:
            first = _post(srv, "/v1/relqueries", MANY, CAROL)
            assert first.status_code == 201, first.text
            r = _post(srv, "/v1/relqueries", MANY, CAROL)
            assert _error(r).startswith(f"tenant 'carol' would have {2 * booked} rows in flight ({booked} running + "
                                        f"{booked} new); the limit is {limit}")
            gated.release(3 + 2)  # the three probes, then two of the rows
            wait_until(lambda: carol.status(first.json()["id"]).progress.done == 2, "two rows of the first classify")
            r = _post(srv, "/v1/relqueries", MANY, CAROL)
            assert f"({booked - 2 * per_prompt} running + {booked} new)" in _error(r)
        finally:
            gated.open()
        assert carol.result(first.json()["id"]).status == "finished"
        r = _post(srv, "/v1/relqueries", MANY, CAROL)
        assert r.status_code == 201, r.text
        assert carol.result(r.json()["id"]).status == "finished"


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
