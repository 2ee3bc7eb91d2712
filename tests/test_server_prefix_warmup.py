"""A server job warms its rows' shared prefix before they run, in its tenant's prefix-cache
namespace, as the local surfaces do (relserve/planner/executor.py): the PostgreSQL and spreadsheet
traffic behind the server gets the same first batch as a DuckDB user. A stand-in engine records
the warm-ups; the engine's own skip of a prefix it holds is tested on the real engine
(test_step_scale.py)."""

from __future__ import annotations

import httpx
from server_fixtures import FakeEngine, running_server

TEMPLATE = "Read this customer's note and answer in one word whether it is urgent. Note: {note}"
NOTES = ["the parcel never came", "thanks, all fine", "the screen broke on day one", "when do you open?"]
TENANTS = {"tenants": {"a": {"key": "key-of-a"}, "b": {"key": "key-of-b"}}}


class WarmingEngine(FakeEngine):
    """The stand-in engine, with tenancy, recording each warm-up as (text, tenant's salt)."""

    supports_tenancy = True

    def __init__(self) -> None:
        super().__init__()
        self.warmed: list[tuple[str, str | None]] = []
        #: the system message each warm-up was behind
        self.systems: list[str | None] = []
        self.salts: list[str | None] = []

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy=None) -> int:
        self.warmed.append((text, tenancy.cache_salt if tenancy is not None else None))
        self.systems.append(system)
        return len(text.split())

    def submit(self, rq, tenancy=None):
        self.salts.append(tenancy.cache_salt if tenancy is not None else None)
        return super().submit(rq)


def run(srv, key: str, rows: list[dict], **more) -> dict:
    r = httpx.post(srv.url + "/v1/relqueries", json={"template": TEMPLATE, "rows": rows, "max_tokens": 4, **more},
                   headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    return httpx.get(srv.url + f"/v1/relqueries/{job}/result", params={"timeout": 60},
                     headers={"Authorization": f"Bearer {key}"}, timeout=60).json()


def test_a_job_warms_its_rows_shared_prefix_in_its_tenants_namespace_before_the_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = WarmingEngine()
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        a = run(srv, "key-of-a", [{"note": n} for n in NOTES])
        b = run(srv, "key-of-b", [{"note": NOTES[1]}, {"note": NOTES[3]}])
        one = run(srv, "key-of-a", [{"note": NOTES[0]}])
    assert [x["status"] for x in (a, b, one)] == ["finished"] * 3
    prompts = [[str(p) for p in rq.render()] for rq in engine.submitted]
    assert [len(p) for p in prompts] == [4, 2, 1]
    shared = TEMPLATE.split("{note}")[0]
    # each job's warm-up is its own rows' common text (the template up to the row, and no
    # further: the first and last notes of each job differ in their first letter), in the
    # namespace its rows then run in
    assert all(p.startswith(shared) for ps in prompts for p in ps)
    salt_a, salt_b = engine.salts[0], engine.salts[1]
    assert salt_a is not None and salt_b is not None and salt_a != salt_b
    assert engine.warmed == [(shared, salt_a), (shared, salt_b)]
    # a one-row job has no prefix shared with another row: nothing to warm
    assert engine.salts == [salt_a, salt_b, salt_a]


def test_a_job_warms_behind_its_own_system_message(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = WarmingEngine()
    with running_server(engine, tenants=TENANTS, cache=False) as srv:
        out = run(srv, "key-of-a", [{"note": n} for n in NOTES], system="Be brief.")
    assert out["status"] == "finished"
    assert engine.systems == ["Be brief."] and engine.warmed == [(TEMPLATE.split("{note}")[0], engine.salts[0])]


def test_in_open_mode_the_warm_up_runs_in_the_shared_namespace(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    engine = WarmingEngine()
    with running_server(engine, cache=False) as srv:
        out = httpx.post(srv.url + "/v1/relqueries", json={"template": TEMPLATE, "rows": [{"note": n} for n in NOTES],
                                                          "max_tokens": 4}, timeout=60)
        assert out.status_code == 201, out.text
        httpx.get(srv.url + f"/v1/relqueries/{out.json()['id']}/result", params={"timeout": 60}, timeout=60)
    assert engine.warmed == [(TEMPLATE.split("{note}")[0], None)] and engine.salts == [None]
