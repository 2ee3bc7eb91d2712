"""Scalar llm_* calls over a query's rows batched by the extension's planner hook
(udfs/relserve/batch_calls.c), on the real cluster and server of test_postgres.py: the same
answers as the per-row path and the *_query functions, one relQuery per call site and window."""

from __future__ import annotations

import psycopg
import pytest
from test_postgres import (  # noqa: F401 (fixtures)
    KEY,
    MAP_TEMPLATE,
    REVIEWS,
    ROLE_KEYS,
    cluster,
    connect,
    expected,
    jobs_of,
    server,
    wait_until_done,
)
from waits import Worker, finish_all

from relserve.replies import JobDescription

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

MAP = f"SELECT id, llm_map('{MAP_TEMPLATE}', review) FROM reviews WHERE id <= 6 ORDER BY id"
TONE = "Is this review positive or negative? {r}"


def new_jobs(server, before) -> list[JobDescription]:
    return [j for k, j in jobs_of(server).items() if k not in before]


def plan_of(db, sql: str) -> str:
    return "\n".join(r for (r,) in db.execute(f"EXPLAIN {sql}"))


def connect_uncached(cluster, role: str = "postgres") -> psycopg.Connection:
    """A session whose calls the engine answers, never the server's result cache (on in this module's
    server): two paths compared in it are two computations, so a difference between them shows.

    Its filters and classifies take each row's best-scored label (method 'score'): the default
    (adaptive) decides a relQuery's rows among themselves (docs/quality.md), so one relQuery of six
    rows and six relQueries of one row may rightly answer differently; a method that decides each
    row alone must not."""
    db = connect(cluster, role)
    db.execute("SET relserve.cache = off")
    db.execute("SET relserve.method = 'score'")
    return db


def test_a_scalar_map_over_a_table_is_one_relquery_with_the_per_row_answers(server, cluster):
    with connect(cluster) as db:
        db.execute("SET relserve.max_tokens = 6")
        db.execute("SET relserve.cache = off")
        plan = plan_of(db, MAP)
        before = jobs_of(server)
        batched = db.execute(MAP).fetchall()
        batched_jobs = new_jobs(server, before)
        db.execute("SET relserve.batch_calls = off")
        assert "relserve batch" not in plan_of(db, MAP)
        before = jobs_of(server)
        per_row = db.execute(MAP).fetchall()
        per_row_jobs = new_jobs(server, before)
        srf = db.execute(f"SELECT (input->>'id')::int, answer FROM llm_map_query('{MAP_TEMPLATE}', "
                         "'SELECT id, review FROM reviews WHERE id <= 6', '{\"cache\": false}') ORDER BY 1").fetchall()
    assert "Custom Scan (relserve batch)" in plan and "LLM Calls: llm_map (target list)" in plan, plan
    assert batched == per_row == srf
    assert [j.progress.total for j in batched_jobs] == [6]
    assert sorted(j.progress.total for j in per_row_jobs) == [1] * 6


def test_a_filter_in_where_runs_after_the_cheap_quals_and_before_the_map(server, cluster):
    sql = (f"SELECT id, llm_map('{MAP_TEMPLATE}', review) FROM reviews "
           f"WHERE stars >= 2 AND llm_filter('Is this review positive? {{r}}', review) ORDER BY id")
    with connect_uncached(cluster) as db:
        db.execute("SET relserve.max_tokens = 6")
        plan = plan_of(db, sql)
        before = jobs_of(server)
        got = db.execute(sql).fetchall()
        jobs = new_jobs(server, before)
        db.execute("SET relserve.batch_calls = off")
        want = db.execute(sql).fetchall()
    # the planner puts the map above the sort: two batch nodes, the filter's below and the map's above
    assert "LLM Calls: llm_filter (filter)" in plan and "LLM Calls: llm_map (target list)" in plan, plan
    assert plan.index("llm_map (target list)") < plan.index("Sort Key: id") < plan.index("llm_filter (filter)"), plan
    assert got == want
    sizes = sorted(j.progress.total for j in jobs)
    # the filter sees the 4 reviews with stars >= 2 (row 7 has no review: its call fails alone), the map only those it kept
    assert sizes == sorted([5, len(got)]), (sizes, got)


def test_classify_in_group_by_and_a_join(server, cluster):
    group = f"SELECT llm_classify('{TONE}', ARRAY['positive','negative'], review) AS tone, count(*) FROM reviews WHERE review IS NOT NULL GROUP BY 1 ORDER BY 1"
    join = ("SELECT a.id, b.id FROM reviews a JOIN reviews b ON a.stars = b.stars AND a.id < b.id "
            "WHERE llm_filter('Is this review positive? {r}', a.review) ORDER BY 1, 2")
    with connect_uncached(cluster) as db:
        got_group, got_join = db.execute(group).fetchall(), db.execute(join).fetchall()
        assert "relserve batch" in plan_of(db, group)
        db.execute("SET relserve.batch_calls = off")
        assert db.execute(group).fetchall() == got_group
        assert db.execute(join).fetchall() == got_join
    assert sum(n for _, n in got_group) == 6


def test_limit_stops_the_scan_and_cancels_the_rest(engine, server, cluster):
    story = "Write a long story about the number {n}."
    sql = f"SELECT g, llm_map('{story}', g::text) FROM generate_series(1, 1000) g LIMIT 2"
    with connect(cluster) as db:
        db.execute("SET relserve.max_tokens = 32")
        db.execute("SET relserve.cache = off")
        db.execute("SET relserve.timeout = 900")
        before = jobs_of(server)
        got = db.execute(sql).fetchall()
    # rows 1 and 2 are the engine's answers to their prompts
    assert got == list(zip([1, 2], expected(engine, "llm_map", story, ["1", "2"], max_tokens=32)))
    (job,) = new_jobs(server, before)
    # the LIMIT bounds the node: its first window is 64 rows (RS_FIRST_BOUNDED_WINDOW), one relQuery
    assert job.progress.total == 64
    job = wait_until_done(server, job.id)  # the cancel reaches the engine a moment after the scan ends
    # the scan ends once rows 1 and 2 are back and cancels the relQuery: one HTTP request, against
    # the engine's 4 waves of 16 slots of 32-token answers for the window, so most of its rows are
    # never answered
    assert job.status == "cancelled" and job.stats.rows - job.stats.errors < 64, job


def test_where_a_call_cannot_be_batched_it_runs_per_row_with_the_same_answers(server, cluster):
    sql = (f"SELECT id, CASE WHEN stars > 3 THEN llm_map('{MAP_TEMPLATE}', review) END FROM reviews "
           "WHERE id <= 6 ORDER BY id")
    with connect(cluster) as db:
        db.execute("SET relserve.max_tokens = 6")
        plan = plan_of(db, sql)
        assert "relserve batch" not in plan and "Custom Scan (relserve per-row)" in plan, plan
        assert "Why: an llm_* call is inside CASE, COALESCE, AND/OR or a sub-select, where it runs for some rows only" in plan
        before = jobs_of(server)
        got = db.execute(sql).fetchall()
    assert [i for i, a in got if a is not None] == [1, 3, 5]  # the model asked only where stars > 3
    assert len(new_jobs(server, before)) == 3


def test_a_null_value_fails_its_row_only_and_on_error_raise_fails_the_statement(server, cluster):
    sql = "SELECT id, llm_map('Is {r} good?', review) FROM reviews ORDER BY id"
    with connect(cluster) as db:
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        db.execute("SET relserve.max_tokens = 2")
        rows = db.execute(sql).fetchall()
        assert [i for i, a in rows if a is None] == [7] and len(rows) == 7
        assert notices == ["llm_map: NULL for this row: llm_map: placeholder {r} is NULL in this row"], notices
        db.execute("SET relserve.on_error = 'raise'")
        with pytest.raises(psycopg.errors.DataException, match=r"^llm_map: row 7: llm_map: placeholder \{r\} is NULL"):
            db.execute(sql)


def test_each_role_batches_under_its_own_key(server, cluster):
    from test_postgres_security import jobs

    before = set(jobs(server, ROLE_KEYS["bob"]))
    with connect(cluster, "bob") as db:
        db.execute("SET relserve.max_tokens = 2")
        assert len(db.execute("SELECT llm_map('Is {r} good?', review) FROM reviews WHERE id <= 3").fetchall()) == 3
    new = [j for k, j in jobs(server, ROLE_KEYS["bob"]).items() if k not in before]
    assert [j.progress.total for j in new] == [3]
    with connect(cluster, "mallory") as db:  # no key: the server refuses, as for a per-row call
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match=r"\(HTTP 401\)"):
            db.execute("SELECT llm_map('Is {r} good?', review) FROM reviews WHERE id <= 3")


def test_extract_batched_answers_like_the_query_form(server, cluster):
    schema = '{"type": "object", "properties": {"liked": {"type": "boolean"}}, "required": ["liked"]}'
    with connect_uncached(cluster) as db:
        db.execute("SET relserve.max_tokens = 24")
        batched = db.execute(f"SELECT id, llm_extract('Facts of: {{r}}', '{schema}', review) FROM reviews WHERE id <= 3 ORDER BY id").fetchall()
        srf = db.execute(f"SELECT (input->>'id')::int, answer FROM llm_extract_query('Facts of: {{review}}', '{schema}', "
                         "'SELECT id, review FROM reviews WHERE id <= 3', '{\"cache\": false}') ORDER BY 1").fetchall()
    assert batched == srf and all(isinstance(a, dict) and isinstance(a["liked"], bool) for _, a in batched)


def test_statement_timeout_cancels_the_batched_relquery(engine, server, cluster):
    # (an llm_* call inside an aggregate's argument runs per row: the subquery computes it batched)
    # The statement runs while the test holds the engine (engine.paused): no row starts before the
    # timeout, however fast the engine. (The template starts with its placeholder: no shared
    # prefix to warm, which would wait for the held engine before the relQuery is submitted.)
    sql = ("SELECT count(a) FROM (SELECT llm_map('{n}: write a long story about this number.', g::text) AS a "
           "FROM generate_series(1, 300) g) s")
    with connect(cluster) as db:
        db.execute("SET relserve.max_tokens = 64")
        db.execute("SET relserve.cache = off")
        before = jobs_of(server)
        db.execute("SET statement_timeout = '5s'")
        with engine.paused(120), pytest.raises(psycopg.errors.QueryCanceled, match=r"canceling statement due to statement timeout"):
            db.execute(sql)
    started = new_jobs(server, before)
    assert [j.progress.total for j in started] == [300], [(j.progress, j.status) for j in started]
    job = started[0]
    job = wait_until_done(server, job.id)
    assert job.status == "cancelled" and job.stats.rows - job.stats.errors == 0, job


def test_eight_sessions_at_once_each_send_one_relquery(server, cluster):
    with connect(cluster) as db:
        whole = dict(db.execute("SELECT (input->>'id')::int, answer FROM llm_map_query('Is {review} good?', "
                                "'SELECT id, review FROM reviews WHERE id <= 6', '{\"max_tokens\": 4, \"cache\": false}')").fetchall())
    before = jobs_of(server)
    got: dict[int, list] = {}

    def session(k: int) -> None:
        with connect_uncached(cluster) as db:
            db.execute("SET relserve.max_tokens = 4")
            got[k] = db.execute("SELECT id, llm_map('Is {review} good?', review) FROM reviews WHERE id <= 6 ORDER BY id").fetchall()

    threads = [Worker(session, k, what=f"session {k}'s statement") for k in range(8)]
    for t in threads:
        t.start()
    finish_all(threads, timeout=600)
    assert all(got[k] == sorted(whole.items()) for k in range(8)), got
    assert sorted(j.progress.total for j in new_jobs(server, before)) == [6] * 8


def test_order_by_an_answer_and_a_join_on_a_filter_give_the_per_row_results(server, cluster):
    order = "SELECT id FROM reviews WHERE id <= 6 ORDER BY llm_classify('Tone of {r}?', ARRAY['positive','negative'], review), id"
    join = ("SELECT a.id, b.id FROM reviews a JOIN reviews b ON a.id < b.id AND b.id <= 3 "
            "AND llm_filter('Do {a} and {b} agree?', a.review, b.review) WHERE a.id <= 3 ORDER BY 1, 2")
    with connect_uncached(cluster) as db:
        db.execute("SET relserve.max_tokens = 4")
        order_plan = plan_of(db, order)
        join_plan = plan_of(db, join)
        got = db.execute(order).fetchall(), db.execute(join).fetchall()
        db.execute("SET relserve.batch_calls = off")
        want = db.execute(order).fetchall(), db.execute(join).fetchall()
    assert got == want
    assert "LLM Calls: llm_classify (target list)" in order_plan, order_plan  # the sort key is computed batched
    # the planner put the ON clause's call on the inner scan: batched per outer row (one relQuery each)
    assert "LLM Calls: llm_filter (filter)" in join_plan, join_plan


# two llm quals over 100 short sentences: a broad one that keeps every row the model answers, and a
# narrow one, what we had that day, that keeps the eighth about beer (as the model reads them)
SAID_ROWS = 100
BROAD = "llm_filter('Is this sentence written in English? {s}', s) IS NOT NULL"
NARROW = "llm_classify('What did we have on that day? {s}', ARRAY['a drink', 'a movie'], s) = 'a drink'"
SAMPLE_ROWS = 64  # RS_ORDER_SAMPLE_ROWS


def spread_sample(n: int, want: int = SAMPLE_ROWS) -> set[int]:
    """The input positions (0-based) of the sample the node answers first: the j-th of ``want`` is
    the floor(j * n / want)-th row in play, spread over the window (batch_scan.c)."""
    want = min(n, want)
    return {j * n // want for j in range(want)}


def test_the_llm_quals_of_a_where_run_cheapest_first_each_over_the_rows_the_earlier_kept(server, cluster):
    """``WHERE broad AND narrow``: the narrow qual runs first whichever is written first, the broad
    one only over the rows it kept, the same rows either way; the sample that measured them is not
    sent again; with relserve.order_quals off they run as written, after the same sample, also in a
    prepared statement planned while it was on."""
    ids = list(range(1, SAID_ROWS + 1))
    both = "SELECT id FROM said WHERE {} AND {} ORDER BY id"
    with connect_uncached(cluster) as db:
        db.execute("DROP TABLE IF EXISTS said")
        db.execute("CREATE TABLE said AS SELECT g AS id, CASE WHEN g % 8 = 0 THEN 'We shared a cold beer on day ' || g "
                   f"ELSE 'We watched a long film on day ' || g END AS s FROM generate_series(1, {SAID_ROWS}) g")
        alone = db.execute(f"SELECT id, {BROAD}, {NARROW} FROM said ORDER BY id").fetchall()
        broad = {i for i, b, _ in alone if b}
        narrow = {i for i, _, n in alone if n}
        sample = {ids[k] for k in spread_sample(SAID_ROWS)}
        # the premise: the narrow qual keeps some of the sample, not all of it, and rows beyond it
        assert broad == set(ids) and 0 < len(narrow & sample) < len(sample) and narrow - sample, sorted(narrow)
        runs = {}
        for name, sql, order in (("broad written first", both.format(BROAD, NARROW), "on"),
                                 ("narrow written first", both.format(NARROW, BROAD), "on"),
                                 ("as written", both.format(BROAD, NARROW), "off")):
            db.execute(f"SET relserve.order_quals = {order}")
            before = jobs_of(server)
            rows = [i for (i,) in db.execute(sql).fetchall()]
            jobs = sorted(new_jobs(server, before), key=lambda j: j.created)
            runs[name] = rows, [j.progress.total for j in jobs]
        # a prepared statement keeps its plan across a SET: the setting is the one in force when
        # it runs (its generic plan made and cached under on by EXPLAIN EXECUTE, which runs
        # nothing; run under off)
        db.execute(f"PREPARE both_quals AS {both.format(BROAD, NARROW)}")
        db.execute("SET relserve.order_quals = on")
        assert "relserve batch" in "\n".join(r for (r,) in db.execute("EXPLAIN EXECUTE both_quals"))
        db.execute("SET relserve.order_quals = off")
        before = jobs_of(server)
        rows = [i for (i,) in db.execute("EXECUTE both_quals").fetchall()]
        jobs = sorted(new_jobs(server, before), key=lambda j: j.created)
        runs["prepared under on, run under off"] = rows, [j.progress.total for j in jobs]
        db.execute("SET relserve.order_quals = on")
        analyzed = "\n".join(r for (r,) in db.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {both.format(BROAD, NARROW)}"))
    assert all(rows == sorted(narrow) for rows, _ in runs.values()), runs
    # each qual answers the sample (a label plan, if its call has none, made from the same rows
    # whatever the order), then the narrow one the rest of the window, then the broad one the rows
    # the narrow one kept that it has not answered; as written, the broad one first
    for name, last in (("broad written first", narrow), ("narrow written first", narrow), ("as written", broad),
                       ("prepared under on, run under off", broad)):
        sizes = runs[name][1]
        assert sorted(sizes[:2]) == [SAMPLE_ROWS] * 2 and sizes[2:] == [SAID_ROWS - SAMPLE_ROWS, len(last - sample)], (name, sizes)
    assert ("Order of LLM Quals: batches 2, 1 in this order, cheapest per row removed first; "
            f"batch 1 (llm_filter) kept {SAMPLE_ROWS} of {SAMPLE_ROWS} sampled rows") in analyzed, analyzed
    assert f"batch 2 (llm_classify) kept {len(narrow & sample)} of {SAMPLE_ROWS} sampled rows" in analyzed, analyzed
    assert f"Rows Sent: {SAMPLE_ROWS + SAID_ROWS + len(narrow - sample)}" in analyzed, analyzed


def test_a_first_window_an_earlier_security_stage_emptied_leaves_the_order_to_the_next(server, cluster):
    """Row-level security whose policy calls the LLM is a security stage before the WHERE's label
    quals. Where it hides every row of the first window, the label quals have no rows to be
    measured on there: the next window's rows order them (not an empty sample, which would fix
    the planner's order for the scan), and the rows are those each qual alone keeps."""
    window, rows = 32, 100
    key = ROLE_KEYS["alice"]
    with connect(cluster) as db:
        db.execute("DROP TABLE IF EXISTS said_rls")
        # the first window's tags are NULL: the policy's call fails those rows, whatever the model says
        db.execute("CREATE TABLE said_rls AS SELECT g AS id, CASE WHEN g % 8 = 0 THEN 'We shared a cold beer on day ' "
                   f"|| g ELSE 'We watched a long film on day ' || g END AS s, CASE WHEN g > {window} THEN 'tag ' || g END "
                   f"AS tag FROM generate_series(1, {rows}) g")
        db.execute("ALTER TABLE said_rls ENABLE ROW LEVEL SECURITY")
        db.execute("CREATE POLICY seen ON said_rls USING (llm_map('Say ok to {t}', tag) IS NOT NULL)")
        db.execute("GRANT SELECT ON said_rls TO alice")
    visible = list(range(window + 1, rows + 1))
    both = f"SELECT id FROM said_rls WHERE {BROAD} AND {NARROW} ORDER BY id"
    with connect_uncached(cluster, "alice") as db:
        db.execute("SET relserve.max_tokens = 2")
        db.execute(f"SET relserve.batch_window = {window}")
        alone = db.execute(f"SELECT id, {BROAD}, {NARROW} FROM said_rls ORDER BY id").fetchall()
        assert [i for i, _, _ in alone] == visible  # the policy hides the first window's rows
        broad = {i for i, b, _ in alone if b}
        narrow = {i for i, _, n in alone if n}
        second = set(range(window + 1, 2 * window + 1))  # the sample: every row of the second window
        assert broad == set(visible) and 0 < len(narrow & second) < window, sorted(narrow)
        before = jobs_of(server, key)
        got = [i for (i,) in db.execute(both).fetchall()]
        jobs = sorted((j for k, j in jobs_of(server, key).items() if k not in before), key=lambda j: j.created)
        analyzed = "\n".join(r for (r,) in db.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {both}"))
    assert got == sorted(narrow)
    # per window of 32 rows: the policy's relQuery first (the first window's: every row hidden, and
    # nothing after it); the second window's rows are the sample both label quals answer; from
    # then on the narrow qual over the window, the broad one over the rows it kept (none: no relQuery)
    third, last = set(range(2 * window + 1, 3 * window + 1)), set(range(3 * window + 1, rows + 1))
    want = [window] * 6 + [len(narrow & third)] * bool(narrow & third) + [len(last), len(last)] + (
        [len(narrow & last)] * bool(narrow & last))
    assert [j.progress.total for j in jobs] == want, [j.progress.total for j in jobs]
    assert ("Order of LLM Quals: batches 3, 2 in this order, cheapest per row removed first; "
            f"batch 2 (llm_filter) kept {window} of {window} sampled rows") in analyzed, analyzed
    assert f"batch 3 (llm_classify) kept {len(narrow & second)} of {window} sampled rows" in analyzed, analyzed
