"""/v1/cells with cells of several templates, from the side of the spreadsheet that writes them:
each template's cells are their own call, decided with that call's own label plan as if they
were recalculated alone (relserve/server/batches.plan_cells, ``PlannedRows.by_call``). A cell's
answer does not depend on which other formulas share its recalculation, a mix never fails as a
whole, and the request books each template's label path."""

from __future__ import annotations

import zlib

import httpx
from engine_doubles import TenantAwareEngine
from server_fixtures import FakeEngine, running_server

from relserve.labels.memory import LabelMemory, use_memory

KEY = "sheet-secret-key"
#: a 2-column question and a 1-column one: the first template asks about more columns
HEADLINES = [{"id": f"A{i}", "template": "Is the headline {title} about {topic}?", "args": [f"headline {i}", "sports"]}
             for i in range(6)]
OK = [{"id": f"B{i}", "template": "Is {x} ok?", "args": [f"value {i}"]} for i in range(6)]
#: two 1-column questions: cells of the second run with the first's plan would not fail, but
#: render and score as the first's
SPICY = [{"id": f"C{i}", "template": "Is {dish} spicy?", "args": [f"pepper dish {i}"]} for i in range(12)]
SWEET = [{"id": f"D{i}", "template": "Is {dish} sweet?", "args": [f"cake {i}"]} for i in range(12)]


def _post(srv, cells: list[dict], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(srv.url + "/v1/cells", json={"cells": cells, "function": "filter", "stream": False},
                      headers=headers, timeout=120)


def test_filter_cells_of_templates_with_different_columns_are_all_answered():
    """Headline cells (two columns) before 'Is {x} ok?' cells (one): every cell is answered, in
    its place, under its id (before: every cell failed with 'IndexError: tuple index out of range')."""
    with running_server(FakeEngine(), cache=False) as srv:
        r = _post(srv, HEADLINES + OK)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "finished", out
    assert [c["id"] for c in out["cells"]] == [c["id"] for c in HEADLINES + OK]
    assert [c["error"] for c in out["cells"]] == [None] * len(HEADLINES + OK)
    assert all(c["value"] in (True, False) for c in out["cells"])


def _scripted(prompt: str, rq) -> str:
    """A label that depends on the prompt's whole text: a plan that lays a cell out otherwise,
    or renders it in another template, changes its answer."""
    choices = rq.choices or ("yes", "no")
    return choices[zlib.crc32(prompt.encode()) % len(choices)]


def _run(cells: list[dict]) -> tuple[dict[str, object], list[tuple]]:
    """The cells' answers by id, and every relQuery the engine got (its prompts and how it was
    to score them), on a fresh server with a fresh label memory: as a first recalculation."""
    use_memory(LabelMemory())
    engine = TenantAwareEngine(answer=_scripted)
    with running_server(engine, cache=False) as srv:
        r = _post(srv, cells)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "finished", r.json()
    answers = {c["id"]: (c["value"], c["error"]) for c in r.json()["cells"]}
    sent = [(tuple(rq.prompts), rq.choices, rq.label_prior, rq.prompt_shape, rq.answer_field)
            for rq in engine.every_relquery]
    return answers, sent


def test_a_templates_cells_get_the_same_answers_and_plan_alone_and_mixed():
    """'Is {dish} spicy?' and 'Is {dish} sweet?' cells (the sweet ones first), each template's
    cells decided as when recalculated alone: the same answers, and the engine asked the same
    first pass and rows with the same layout and prior for each (before: the spicy cells were
    rendered and scored as 'Is ... sweet?' under its plan)."""
    sweet, sweet_sent = _run(SWEET)
    spicy, spicy_sent = _run(SPICY)
    mixed, mixed_sent = _run(SWEET + SPICY)
    assert mixed == {**sweet, **spicy}
    # exact answers, so that a change of plan or engine double shows here, not only in a difference
    assert [spicy[f"C{i}"][0] for i in range(12)] == EXPECTED_SPICY
    assert [sweet[f"D{i}"][0] for i in range(12)] == EXPECTED_SWEET
    # each template's label path, one after the other: the same relQueries as alone
    assert mixed_sent == sweet_sent + spicy_sent
    assert any(p for p, *_ in spicy_sent if any("pepper dish" in x for x in p))


EXPECTED_SPICY = [False, False, True, True, False, False, True, True, True, True, True, True]
EXPECTED_SWEET = [False, False, False, False, True, True, True, True, False, False, True, True]


def _booked(srv, cells: list[dict]) -> int:
    """The rows a request books, read from its 429 under a limit of one row."""
    r = _post(srv, cells, KEY)
    assert r.status_code == 429, r.text
    return int(r.json()["error"]["message"].split(" running + ")[1].split(" new")[0])


def test_a_mixed_recalculation_books_each_templates_label_path():
    """Each template's cells are a relQuery with its own first pass: a mix books what its
    templates book alone, summed (before: one first pass, the first template's, for all of
    them), and what the engine then runs fits in it."""
    with running_server(FakeEngine(), tenants={"tenants": {"sheet": {"key": KEY, "max_rows_in_flight": 1}}},
                        cache=False) as srv:
        headlines, ok = _booked(srv, HEADLINES), _booked(srv, OK)
        mixed = _booked(srv, HEADLINES + OK)
    assert headlines > len(HEADLINES) and ok > len(OK)  # each has a first pass
    assert mixed == headlines + ok
    fake = FakeEngine()
    with running_server(fake, tenants={"tenants": {"sheet": {"key": KEY, "max_rows_in_flight": mixed}}},
                        cache=False) as srv:
        r = _post(srv, HEADLINES + OK, KEY)
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "finished"
    sent = sum(len(rq.render()) for rq in fake.submitted)
    # an upper bound of what ran: the cells and both first passes
    assert len(HEADLINES + OK) < sent <= mixed


def test_a_mixed_recalculation_under_a_daily_budget_is_estimated_per_template():
    """A tenant with a daily token budget has each request estimated before it runs: a mix of
    templates is estimated per template, as it runs (before: a 500, the first template's layout
    given the other template's values)."""
    tenants = {"tenants": {"sheet": {"key": KEY, "max_tokens_per_day": 10_000_000}}}
    with running_server(FakeEngine(), tenants=tenants, cache=False) as srv:
        r = _post(srv, HEADLINES + OK, KEY)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "finished"
    assert [c["error"] for c in r.json()["cells"]] == [None] * len(HEADLINES + OK)
