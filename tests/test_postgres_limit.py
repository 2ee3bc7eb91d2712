"""The batch node under a LIMIT (issue 64): it reads its input in windows that start small and
double, and stops once the LIMIT has its rows; a LIMIT over anything that needs every row first
keeps the full windows. On the real cluster and server of test_postgres.py."""

from __future__ import annotations

import pytest
from test_postgres import KEY, cluster, connect, jobs_of, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

ROWS = 200
FILTER = "llm_filter('Is this review positive? {r}', review)"
# three of every four reviews are plainly positive: a LIMIT of 5 has its rows in the first window
POSITIVE = "I loved this film, it was wonderful (number {i})."
NEGATIVE = "A dull, boring waste of time (number {i})."


@pytest.fixture(scope="module")
def limited(cluster):  # noqa: F811 (the fixture)
    with connect(cluster) as db:
        db.execute("CREATE TABLE limited (id int PRIMARY KEY, review text, tag text)")
        db.execute("GRANT SELECT ON limited TO PUBLIC")
        rows = [(i, (NEGATIVE if i % 4 == 0 else POSITIVE).format(i=i), f"t{i % 7}") for i in range(1, ROWS + 1)]
        with db.cursor() as cur:
            cur.executemany("INSERT INTO limited VALUES (%s, %s, %s)", rows)
        db.execute("ANALYZE limited")
    return ROWS


def plan_of(db, sql: str) -> str:
    return "\n".join(r for (r,) in db.execute(f"EXPLAIN {sql}"))


def test_a_limit_right_above_the_node_bounds_its_windows_and_one_that_needs_every_row_does_not(cluster, limited):
    with connect(cluster) as db:
        bounded = plan_of(db, f"SELECT id FROM limited WHERE {FILTER} LIMIT 5")
        offset = plan_of(db, f"SELECT id FROM limited WHERE {FILTER} LIMIT 5 OFFSET 3")
        sub = plan_of(db, f"SELECT count(*) FROM (SELECT id FROM limited WHERE {FILTER} LIMIT 100) s")
        sorted_ = plan_of(db, f"SELECT id FROM limited WHERE {FILTER} ORDER BY tag LIMIT 5")
        scored = plan_of(db, "SELECT id FROM limited ORDER BY llm_score('Is this review positive? {r}', review) DESC LIMIT 5")
        grouped = plan_of(db, f"SELECT tag, count(*) FROM limited WHERE {FILTER} GROUP BY tag LIMIT 2")
        # a LIMIT $1 of a generic plan is not known when the plan is made
        db.execute(f"PREPARE p(int) AS SELECT id FROM limited WHERE {FILTER} LIMIT $1")
        db.execute("SET plan_cache_mode = force_generic_plan")
        generic = plan_of(db, "EXECUTE p(5)")
    assert "Row Bound: 5 (a LIMIT above): windows of 64 rows first, doubling while rows are missing" in bounded, bounded
    assert "Row Bound: 8 (a LIMIT above)" in offset, offset
    assert "Row Bound: 100 (a LIMIT above): windows of 100 rows first" in sub, sub
    # a Sort, an llm_score ranking and an aggregate need every row before the LIMIT sees one
    for plan in (sorted_, scored, grouped):
        assert "relserve batch" in plan and "Row Bound" not in plan, plan
    assert "relserve batch" in generic and "Row Bound" not in generic, generic


def test_a_limited_filter_answers_one_window_and_returns_rows_the_full_statement_keeps(server, cluster, limited):  # noqa: F811
    sql = f"SELECT id FROM limited WHERE {FILTER}"
    with connect(cluster) as db:
        db.execute("SET relserve.cache = off")
        db.execute("SET relserve.timeout = 900")  # the full statement's 200 rows on a busy machine
        before = jobs_of(server)
        got = [i for (i,) in db.execute(sql + " LIMIT 5").fetchall()]
        limited_jobs = [j for k, j in jobs_of(server).items() if k not in before]
        analyzed = "\n".join(r for (r,) in db.execute(f"EXPLAIN ANALYZE {sql} LIMIT 5"))
        # the LIMIT's statement kept the call's label plan: the full statement decides with the same one
        full = {i for (i,) in db.execute(sql).fetchall()}
    assert len(got) == 5 and set(got) <= full, (got, sorted(full))
    assert [j.progress.total for j in limited_jobs] == [64], [j.progress.total for j in limited_jobs]
    assert "Rows Read: 64" in analyzed and "Rows Sent: 64" in analyzed, analyzed
    assert "Stopped: the LIMIT had its 5 rows after 64 input rows; the rest were not read or sent" in analyzed, analyzed
    # most rows are positive: the full statement keeps most of them, and never a negative one
    assert len(full) >= ROWS // 2 and not any(i % 4 == 0 for i in got), sorted(full)


def test_windows_double_while_the_limit_is_short_of_rows(server, cluster, limited):  # noqa: F811
    # only every fourth review is negative: 40 of them are more than the first window holds
    sql = "SELECT id FROM limited WHERE NOT llm_filter('Is this review positive? {r}', review)"
    with connect(cluster) as db:
        db.execute("SET relserve.cache = off")
        db.execute("SET relserve.timeout = 900")  # the full statement's 200 rows on a busy machine
        full = [i for (i,) in db.execute(sql).fetchall()]
        assert len(full) >= 40, full
        before = jobs_of(server)
        got = [i for (i,) in db.execute(sql + " LIMIT 40").fetchall()]
        sizes = [j.progress.total for j in jobs_of(server).values() if j.id not in before]
    # a seq scan reads the rows in the order written: the LIMIT's rows are the full statement's first 40
    assert got == full[:40], (got, full)
    # windows of 64, 128, ... until the window that holds the 40th passing row
    windows, read = [], 0
    while read < full[39]:
        windows.append(min(64 * 2 ** len(windows), ROWS - read))
        read += windows[-1]
    assert sorted(sizes) == windows and len(windows) >= 2, (sizes, windows, full)


def test_an_exists_reads_a_small_window_first_and_more_only_while_no_row_has_passed(server, cluster, limited):  # noqa: F811
    """An EXISTS needs one row of its subquery (the executor stops it there): the batch node under
    it is bounded as by a LIMIT 1, uncorrelated (an InitPlan) or correlated (a SubPlan run per
    outer row), and reads every row only when none passes."""
    found = f"SELECT EXISTS (SELECT 1 FROM limited WHERE {FILTER})"
    never = f"SELECT EXISTS (SELECT 1 FROM limited WHERE {FILTER} IS NULL)"
    per_row = (f"SELECT l.id, EXISTS (SELECT 1 FROM limited m WHERE m.id BETWEEN l.id AND l.id + 100 AND "
               f"{FILTER.replace('review)', 'm.review)')}) FROM limited l WHERE l.id <= 2 ORDER BY l.id")
    runs = {}
    with connect(cluster) as db:
        db.execute("SET relserve.cache = off")
        db.execute("SET relserve.timeout = 900")
        plan = plan_of(db, found)
        correlated_plan = plan_of(db, per_row)
        for name, sql in (("found", found), ("never", never), ("per row", per_row)):
            before = jobs_of(server)
            got = db.execute(sql).fetchall()
            runs[name] = got, sorted((j for j in jobs_of(server).values() if j.id not in before), key=lambda j: j.created)
        analyzed = "\n".join(r for (r,) in db.execute(f"EXPLAIN ANALYZE {found}"))
    assert "Row Bound: 1 (an EXISTS above): windows of 64 rows first, doubling while rows are missing" in plan, plan
    assert "SubPlan" in correlated_plan and "Row Bound: 1 (an EXISTS above)" in correlated_plan, correlated_plan
    sizes = {name: [j.progress.total for j in jobs] for name, (_, jobs) in runs.items()}
    # three of every four reviews pass: the first window has a row
    assert runs["found"][0] == [(True,)] and sizes["found"] == [64], sizes
    # no row passes: windows of 64, 128 and the last 8 rows
    assert runs["never"][0] == [(False,)] and sizes["never"] == [64, 128, ROWS - 192], sizes
    # each outer row's subquery sees 101 rows and stops after its first window of 64
    assert runs["per row"][0] == [(1, True), (2, True)] and sizes["per row"] == [64, 64], sizes
    assert "Stopped: the EXISTS had its row after 64 input rows; the rest were not read or sent" in analyzed, analyzed
