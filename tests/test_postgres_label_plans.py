"""A role's label plans from PostgreSQL (issue 62), on the real cluster and server of
test_postgres.py: a ``*_query`` call's option ``label_plan`` ('refresh' makes a new plan, refused
while the plan is pinned), and ``relserve.label_plans()`` / ``forget_label_plans()`` /
``pin_label_plans()``, which reach the calling role's tenant's plans only (alice and bob: two roles
without superuser rights, each with its own key)."""

from __future__ import annotations

import json

import psycopg
import pytest
from test_postgres import cluster, connect, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

TEMPLATE = "Is this review positive? Review: {review}"
GOOD = ["I loved every minute of it.", "The actors were wonderful.", "Best film of the year!", "A warm, funny story.",
        "Beautifully shot and moving.", "I would watch it again tomorrow.", "The music was perfect.",
        "A clever script with real heart.", "My whole family enjoyed it.", "Gripping from start to finish."]
BAD = ["Boring and far too long.", "A waste of money.", "I fell asleep halfway.", "The plot made no sense.",
       "Wooden acting throughout.", "I walked out after an hour.", "Dull, loud and forgettable.",
       "The worst sequel so far.", "Nothing happens for two hours.", "The jokes all fell flat."]
#: 40 reviews, half of them good: a plan is kept from 16 rows on (relserve/labels/resolution.py)
PLAN_REVIEWS = [(i + 1, (GOOD if i % 2 == 0 else BAD)[(i // 2) % 10] + ("" if i < 20 else " Really.")) for i in range(40)]
#: one llm_filter_query over the reviews FIRST to LAST, its options the parameter
FILTER = ("SELECT ord, answer FROM llm_filter_query('" + TEMPLATE + "', 'SELECT review FROM plan_reviews "
          "WHERE id BETWEEN FIRST AND LAST ORDER BY id', %s) ORDER BY ord")
PLANS = "SELECT function, template, labels, pinned, id, created FROM relserve.label_plans()"


@pytest.fixture(scope="module")
def reviews(cluster):
    with connect(cluster) as admin:
        admin.execute("CREATE TABLE plan_reviews (id int PRIMARY KEY, review text)")
        admin.execute("GRANT SELECT ON plan_reviews TO PUBLIC")
        with admin.cursor() as cur:
            cur.executemany("INSERT INTO plan_reviews VALUES (%s, %s)", PLAN_REVIEWS)
    return cluster


def run_filter(db: psycopg.Connection, first: int, last: int, **options: object) -> list[tuple[int, bool]]:
    sql = FILTER.replace("FIRST", str(first)).replace("LAST", str(last))
    return db.execute(sql, [json.dumps({"cache": False, **options})]).fetchall()


def plans(db: psycopg.Connection) -> list[tuple]:
    return db.execute(PLANS).fetchall()


def test_a_query_call_refreshes_its_plan_a_pinned_one_stays_and_forget_removes_it(server, reviews):
    with connect(reviews, "alice") as db:
        assert plans(db) == []
        assert len(run_filter(db, 1, 20)) == 20
        [(function, template, labels, pinned, first_id, first_made)] = plans(db)
        assert (function, template, labels, pinned) == ("llm_filter", TEMPLATE, ["yes", "no"], False)
        # a later call over other rows uses the kept plan (as ANALYZE's statistics are read)
        assert len(run_filter(db, 1, 40)) == 40
        assert [(p[4], p[5]) for p in plans(db)] == [(first_id, first_made)]
        # 'refresh' makes a new plan from this call's rows, kept over the first call's
        assert len(run_filter(db, 21, 40, label_plan="refresh")) == 20
        [(_, _, _, pinned, new_id, made)] = plans(db)
        assert not pinned and new_id != first_id and made > first_made
        # the listing of one template, and of another (none)
        assert [r[0] for r in db.execute("SELECT id FROM relserve.label_plans(%s)", [TEMPLATE])] == [new_id]
        assert db.execute("SELECT count(*) FROM relserve.label_plans('Is this {review} long?')").fetchone() == (0,)
        detail = db.execute("SELECT detail->>'method', plan FROM relserve.label_plans()").fetchone()
        assert detail[1].startswith(f"method {detail[0]}")

        # pinned: a refresh is refused naming the pin, and the plan stays as it was
        assert db.execute("SELECT relserve.pin_label_plans(%s)", [TEMPLATE]).fetchone() == (1,)
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            run_filter(db, 1, 20, label_plan="refresh")
        assert e.value.diag.message_primary.startswith(
            f"llm_filter_query: the label plan of llm_filter({TEMPLATE!r}) is pinned: unpin it"), e.value.diag.message_primary
        assert [(p[3], p[4], p[5]) for p in plans(db)] == [(True, new_id, made)]
        # nor forgotten, unless asked to forget pinned plans too
        assert db.execute("SELECT relserve.forget_label_plans()").fetchone() == (0,)
        assert db.execute("SELECT relserve.pin_label_plans(%s, unpin => true)", [TEMPLATE]).fetchone() == (1,)
        assert [(p[3], p[4]) for p in plans(db)] == [(False, new_id)]
        assert db.execute("SELECT relserve.pin_label_plans(%s)", [TEMPLATE]).fetchone() == (1,)
        assert db.execute("SELECT relserve.forget_label_plans(pinned => true)").fetchone() == (1,)
        assert plans(db) == []
        # the next call makes a plan again
        run_filter(db, 1, 20)
        assert len(plans(db)) == 1
        assert db.execute("SELECT relserve.forget_label_plans(%s)", [TEMPLATE]).fetchone() == (1,)
        assert plans(db) == []


def test_a_bad_label_plan_is_refused_naming_the_option_and_its_values(server, reviews):
    with connect(reviews, "alice") as db:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            run_filter(db, 1, 20, label_plan="again")
        assert e.value.diag.message_primary == ("llm_filter_query: option label_plan must be one of auto, refresh, pin, "
                                                "unpin, got 'again'")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            run_filter(db, 1, 20, label_plan=1)
        assert e.value.diag.message_primary == "llm_filter_query: option label_plan must be text, got 1"
        # a call's, never a session's: SET names no such setting
        with pytest.raises(psycopg.errors.InvalidName, match='invalid configuration parameter name "relserve.label_plan"'):
            db.execute("SET relserve.label_plan = 'refresh'")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute("SELECT relserve.pin_label_plans(NULL)")
        assert e.value.diag.message_primary == "relserve.pin_label_plans: the template is NULL"
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute("SELECT relserve.forget_label_plans('')")
        assert e.value.diag.message_primary.startswith("relserve.forget_label_plans: the template is empty")
        assert plans(db) == []  # nothing was sent, no plan made


def test_a_role_sees_and_changes_only_its_own_tenants_plans(server, reviews):
    with connect(reviews, "alice") as alice, connect(reviews, "bob") as bob:
        run_filter(alice, 1, 20, label_plan="pin")
        [(_, _, _, pinned, alice_id, alice_made)] = plans(alice)
        assert pinned
        # bob's tenant has none of alice's plans: none listed, none forgotten, none unpinned
        assert plans(bob) == []
        assert bob.execute("SELECT relserve.forget_label_plans(pinned => true)").fetchone() == (0,)
        assert bob.execute("SELECT relserve.pin_label_plans(%s, unpin => true)", [TEMPLATE]).fetchone() == (0,)
        # bob's own call of the same template makes a plan of bob's own, and refreshes it: alice's
        # pinned plan does not refuse it
        run_filter(bob, 1, 20)
        run_filter(bob, 21, 40, label_plan="refresh")
        [(_, template, _, bob_pinned, bob_id, _)] = plans(bob)
        assert (template, bob_pinned) == (TEMPLATE, False)
        assert bob.execute("SELECT relserve.forget_label_plans()").fetchone() == (1,)
        assert plans(bob) == []
        # alice's plan as it was
        assert [(p[3], p[4], p[5]) for p in plans(alice)] == [(True, alice_id, alice_made)]
        assert alice.execute("SELECT relserve.forget_label_plans(pinned => true)").fetchone() == (1,)


def test_a_role_without_a_key_for_the_server_is_refused(server, reviews):
    # mallory has no key in relserve.api_keys: the server does not know its tenant
    with connect(reviews, "mallory") as db:
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification) as e:
            db.execute("SELECT * FROM relserve.label_plans()")
        assert e.value.diag.message_primary.startswith("relserve.label_plans: missing API key")
        assert "relserve.api_keys" in (e.value.diag.message_hint or "")
