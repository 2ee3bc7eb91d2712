"""A role's label plans from PostgreSQL (issue 62), on the real cluster and server of
test_postgres.py: a ``*_query`` call's option ``label_plan`` ('refresh' makes a new plan, refused
while the plan is pinned), and ``relserve.label_plans()`` / ``forget_label_plans()`` /
``pin_label_plans()``, which reach the calling role's tenant's plans only (alice and bob: two roles
without superuser rights, each with its own key)."""

from __future__ import annotations

import psycopg
import pytest
from test_postgres import cluster, connect, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

TEMPLATE = "Is this review positive? Review: {review}"
#: one llm_filter_query over the first ``n`` reviews, its options the parameter
FILTER = "SELECT ord, answer FROM llm_filter_query('" + TEMPLATE + "', 'SELECT review FROM reviews WHERE id <= {n} ORDER BY id', %s) ORDER BY ord"
PLANS = "SELECT function, template, labels, pinned, id, created FROM relserve.label_plans()"


def run_filter(db: psycopg.Connection, n: int, **options: object) -> list[tuple[int, bool]]:
    import json

    return db.execute(FILTER.format(n=n), [json.dumps({"cache": False, **options})]).fetchall()


def plans(db: psycopg.Connection) -> list[tuple]:
    return db.execute(PLANS).fetchall()


def test_a_query_call_refreshes_its_plan_a_pinned_one_stays_and_forget_removes_it(server, cluster):
    with connect(cluster, "alice") as db:
        assert plans(db) == []
        assert len(run_filter(db, 3)) == 3
        [(function, template, labels, pinned, first_id, first_made)] = plans(db)
        assert (function, template, labels, pinned) == ("llm_filter", TEMPLATE, ["yes", "no"], False)
        # a later call over more rows uses the kept plan (as ANALYZE's statistics are read)
        assert len(run_filter(db, 6)) == 6
        assert [(p[4], p[5]) for p in plans(db)] == [(first_id, first_made)]
        # 'refresh' makes a new plan from this call's six rows, kept over the three rows' one
        assert len(run_filter(db, 6, label_plan="refresh")) == 6
        [(_, _, _, pinned, new_id, made)] = plans(db)
        assert not pinned and new_id != first_id and made > first_made
        # the listing of one template, and of another (none)
        assert [r[0] for r in db.execute("SELECT id FROM relserve.label_plans(%s)", [TEMPLATE])] == [new_id]
        assert db.execute("SELECT count(*) FROM relserve.label_plans('Is this {review} long?')").fetchone() == (0,)
        detail = db.execute("SELECT detail->>'method', plan FROM relserve.label_plans()").fetchone()
        assert detail[1].startswith(f"method {detail[0]}")

        # pinned: a refresh is refused naming the pin, and the plan stays as it was
        assert db.execute("SELECT relserve.pin_label_plans(%s)", [TEMPLATE]).fetchone() == (1,)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^llm_filter_query: .*is pinned: unpin it"):
            run_filter(db, 3, label_plan="refresh")
        assert [(p[3], p[4], p[5]) for p in plans(db)] == [(True, new_id, made)]
        # nor forgotten, unless asked to forget pinned plans too
        assert db.execute("SELECT relserve.forget_label_plans()").fetchone() == (0,)
        assert db.execute("SELECT relserve.pin_label_plans(%s, unpin => true)", [TEMPLATE]).fetchone() == (1,)
        assert [(p[3], p[4]) for p in plans(db)] == [(False, new_id)]
        assert db.execute("SELECT relserve.pin_label_plans(%s)", [TEMPLATE]).fetchone() == (1,)
        assert db.execute("SELECT relserve.forget_label_plans(pinned => true)").fetchone() == (1,)
        assert plans(db) == []
        # the next call makes a plan again
        run_filter(db, 3)
        assert len(plans(db)) == 1
        assert db.execute("SELECT relserve.forget_label_plans(%s)", [TEMPLATE]).fetchone() == (1,)
        assert plans(db) == []


def test_a_bad_label_plan_is_refused_naming_the_option_and_its_values(server, cluster):
    with connect(cluster, "alice") as db:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            run_filter(db, 3, label_plan="again")
        assert e.value.diag.message_primary == ("llm_filter_query: option label_plan must be one of auto, refresh, pin, "
                                                "unpin, got 'again'")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            run_filter(db, 3, label_plan=1)
        assert e.value.diag.message_primary == "llm_filter_query: option label_plan must be text, got 1"
        # a call's, never a session's: SET names no such setting
        with pytest.raises(psycopg.errors.UndefinedObject):
            db.execute("SET relserve.label_plan = 'refresh'")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute("SELECT relserve.pin_label_plans(NULL)")
        assert e.value.diag.message_primary == "relserve.pin_label_plans: the template is NULL"
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            db.execute("SELECT relserve.forget_label_plans('')")
        assert e.value.diag.message_primary.startswith("relserve.forget_label_plans: the template is empty")
        assert plans(db) == []  # nothing was sent, no plan made


def test_a_role_sees_and_changes_only_its_own_tenants_plans(server, cluster):
    with connect(cluster, "alice") as alice, connect(cluster, "bob") as bob:
        run_filter(alice, 3, label_plan="pin")
        [(_, _, _, pinned, alice_id, alice_made)] = plans(alice)
        assert pinned
        # bob's tenant has none of alice's plans: none listed, none forgotten, none unpinned
        assert plans(bob) == []
        assert bob.execute("SELECT relserve.forget_label_plans(pinned => true)").fetchone() == (0,)
        assert bob.execute("SELECT relserve.pin_label_plans(%s, unpin => true)", [TEMPLATE]).fetchone() == (0,)
        # bob's own call of the same template makes a plan of bob's own, and refreshes it: alice's
        # pinned plan does not refuse it
        run_filter(bob, 3)
        run_filter(bob, 6, label_plan="refresh")
        [(_, template, _, bob_pinned, bob_id, _)] = plans(bob)
        assert (template, bob_pinned) == (TEMPLATE, False)
        assert bob.execute("SELECT relserve.forget_label_plans()").fetchone() == (1,)
        assert plans(bob) == []
        # alice's plan as it was
        assert [(p[3], p[4], p[5]) for p in plans(alice)] == [(True, alice_id, alice_made)]
        assert alice.execute("SELECT relserve.forget_label_plans(pinned => true)").fetchone() == (1,)


def test_a_role_without_a_key_for_the_server_is_refused(server, cluster):
    # mallory has no key in relserve.api_keys: the server does not know its tenant
    with connect(cluster, "mallory") as db:
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification,
                           match=r"^relserve\.label_plans: ") as e:
            db.execute("SELECT * FROM relserve.label_plans()")
        assert "relserve.api_keys" in (e.value.diag.message_hint or "")
