"""Token counts, estimates and budgets from PostgreSQL (issue 47), on a real PostgreSQL 15 cluster
and server: a less-privileged role cannot raise its budget past the ceiling a superuser set, nor
read or write the ceilings; its calls are refused or answered in part as it chooses; its tenant's
day holds whatever the database sends; llm_count_tokens is the engine's own count."""

from __future__ import annotations

import json
import re

import psycopg
import pytest
from server_fixtures import running_server
from test_postgres import KEY, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)

from relserve.client import Client
from relserve.planner.cache import ResultCache

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

STORIES = ("SELECT * FROM llm_map_query('Write a long story about the number {n}.', "
           "'SELECT g AS n FROM generate_series(1, 30) g', '{\"max_tokens\": 24, \"cache\": false}')")


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    """The cluster's server (test_postgres.py's fixture of the same name is replaced here): bob's
    tenant has a day of 1,500 engine tokens (30 stories ask about 1,900)."""
    cache = ResultCache(tmp_path_factory.mktemp("pg-cache") / "results.sqlite")
    tenants = {"pg": {"key": KEY}, "alice": {"key": ROLE_KEYS["alice"]},
               "bob": {"key": ROLE_KEYS["bob"], "max_tokens_per_day": 1500}}
    with running_server(engine, tenants={"tenants": tenants}, cache=cache) as srv:
        yield srv


def spent(server, key: str) -> list[int]:
    with Client(server.url, api_key=key) as c:
        return [j.stats.get("budget_tokens_spent", 0) for j in c.list()]


@pytest.fixture
def ceilings(cluster):
    """alice's ceiling of 1,200 tokens and everyone's of 100,000, deleted after the test whatever its outcome."""
    with connect(cluster) as admin:
        admin.execute("INSERT INTO relserve.budget_limits (role, max_tokens_total) VALUES ('alice', 1200), ('*', 100000)")
    yield
    with connect(cluster) as admin:
        admin.execute("DELETE FROM relserve.budget_limits")


def test_a_role_cannot_raise_its_budget_past_its_ceiling(server, cluster, ceilings):
    with connect(cluster, "alice") as db:
        # its own ceiling, not the '*' row's; never another role's
        assert db.execute("SELECT own, max_tokens_total FROM relserve.my_budget_limit ORDER BY own DESC").fetchall() == [
            (True, 1200), (False, 100000)]
        for sql in ("SELECT * FROM relserve.budget_limits",
                    "INSERT INTO relserve.budget_limits (role, max_tokens_total) VALUES ('bob', 1)",
                    "UPDATE relserve.budget_limits SET max_tokens_total = 10000000",
                    "DELETE FROM relserve.budget_limits"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(sql)
        # a setting far above the ceiling changes nothing: the call is refused at the ceiling
        db.execute("SET relserve.max_tokens_total = 10000000")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"refused before starting: it may spend [\d,]+ engine tokens .* max_tokens_total 1,200"):
            db.execute(STORIES)
        # nor does the call's own option
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"max_tokens_total 1,200"):
            db.execute(STORIES.replace('"cache": false', '"cache": false, "max_tokens_total": 9999999'))
        # partial: the rows the ceiling allows, the others NULL with the reason
        db.execute("SET relserve.on_budget = partial")
        rows = db.execute(STORIES).fetchall()
        answered = [r for r in rows if r[2] is None]
        cut = [r for r in rows if r[2] is not None]
        assert answered and cut and len(rows) == 30
        assert all(r[2].startswith("budget exceeded: the request's max_tokens_total 1,200 is reached") for r in cut)
        # a lower budget of its own holds
        db.execute("SET relserve.max_tokens_total = 300")
        assert sum(r[2] is None for r in db.execute(STORIES).fetchall()) < len(answered)
    assert max(spent(server, ROLE_KEYS["alice"])) <= 1200


def test_a_roles_tenant_day_holds_whatever_the_database_sends(server, cluster):
    with connect(cluster, "bob") as db:
        with pytest.raises(psycopg.errors.ProgramLimitExceeded,
                           match=r"tenant 'bob': refused before starting: .* of the tenant's max_tokens_per_day 1,500 are left today"):
            db.execute(STORIES)
        db.execute("SET relserve.on_budget = partial")
        rows = db.execute(STORIES).fetchall()
        cut = [r for r in rows if r[2] is not None]
        assert cut and all(r[2].startswith("budget exceeded: the tenant bob's max_tokens_per_day 1,500 is reached") for r in cut)
    assert sum(spent(server, ROLE_KEYS["bob"])) <= 1500


def test_count_tokens_is_the_engines_count_and_the_estimate_names_the_budget(server, cluster):
    with connect(cluster) as db:
        db.execute("SET relserve.cache = off")
        counted = db.execute("SELECT sum(llm_count_tokens('Summarize: {r}', review)) FROM reviews WHERE review IS NOT NULL").fetchone()[0]
        by_query = db.execute("SELECT sum(prompt_tokens), count(error) FROM llm_count_tokens_query('Summarize: {review}', "
                              "'SELECT review FROM reviews')").fetchone()
        assert by_query == (counted, 1)  # the NULL review cannot run, and says so
        before = {j.id for j in Client(server.url, api_key=KEY).list()}
        db.execute("SELECT count(*) FROM llm_map_query('Summarize: {review}', 'SELECT DISTINCT review FROM reviews', "
                   "'{\"max_tokens\": 4}')").fetchone()
        with Client(server.url, api_key=KEY) as c:
            (job,) = [j for j in c.list() if j.id not in before]
        assert job.stats.prompt_tokens == counted  # the engine's own count of the same prompts
        estimate = db.execute("SELECT llm_estimate_query('Summarize: {review}', 'SELECT review FROM reviews', "
                              "'{\"max_tokens\": 4, \"max_tokens_total\": 5000, \"on_budget\": \"partial\"}')").fetchone()[0]
        est = estimate if isinstance(estimate, dict) else json.loads(estimate)
        assert est["estimate"]["prompt_tokens"] == counted and est["estimate"]["exact"] is True
        assert est["estimate"]["idle_s"] > 0 and est["budget"] == {"max_tokens_total": 5000, "max_seconds": None, "on_budget": "partial"}


def test_explain_analyze_of_the_batch_node_shows_the_estimate_beside_what_it_took(server, cluster):
    with connect(cluster) as db:
        db.execute("SET relserve.cache = off")
        plan = "\n".join(r for (r,) in db.execute(
            "EXPLAIN ANALYZE SELECT id, llm_map('In three words: {r}', review) FROM reviews WHERE review IS NOT NULL"))
    assert "Custom Scan (relserve batch)" in plan, plan
    fields = dict(re.findall(r"^\s*(Estimated \(s\)|Latency \(s\)|relQueries): (\S+)", plan, re.M))
    assert fields["relQueries"] == "1" and float(fields["Estimated (s)"]) > 0 and float(fields["Latency (s)"]) > 0, plan
