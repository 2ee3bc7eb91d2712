"""The batch node keeps PostgreSQL's security order of a scan's quals (issue 44), as the role
``mallory`` on a real PostgreSQL 15 cluster and a real relserve server: row-level security
policies and security_barrier views that call ``llm_*`` and that do not, each read with
``relserve.batch_calls`` on and off. No row a policy or a view hides reaches a function of
mallory's (it would say so in a NOTICE) or the relserve server (every request body the server
received and every prompt its engine got are kept), and the rows mallory sees, with their
answers, are the same both ways. The server's result cache is off, so each path computes its own
answers."""

from __future__ import annotations

import threading

import pytest
from test_postgres import KEY, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)

from relserve.server import ServerThread, create_app

pytestmark = [pytest.mark.postgres, pytest.mark.engine]

MALLORY_KEY = "mallory-tenant-key"
HIDDEN = "HIDDEN"
# (id, tag, body, secret): a row whose tag is NULL fails the policy's llm_map call (a NULL
# placeholder fails its row on the server): whatever the model says, the llm policy hides rows 2 and 4
DOCS = [
    (1, "tag one", "public one", False),
    (2, None, "HIDDEN secret gamma", True),
    (3, "tag three", "public three", False),
    (4, None, "HIDDEN secret delta", True),
    (5, "tag five", "public five", False),
]
VISIBLE = {i: body for i, _, body, secret in DOCS if not secret}
POLICY_CALL = "llm_map('Say ok to {t}', tag) IS NOT NULL"


class RecordBodies:
    """ASGI middleware: every request body the relserve server receives, kept in ``sink``."""

    def __init__(self, app, sink: list[bytes]) -> None:
        self.app, self.sink = app, sink

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []

        async def recording_receive():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.sink.append(b"".join(chunks))
            return message

        return await self.app(scope, recording_receive, send)


class PromptRecorder:
    """The engine, keeping the prompt of every row of every relQuery it is given (probes and first passes too)."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def submit(self, rq, *args, **kwargs):
        with self._lock:
            self.prompts.extend(str(p) for p in rq.render())
        return self._engine.submit(rq, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


class Watched:
    """The server's address, and what it received and its engine was asked, from a mark on."""

    def __init__(self, bodies: list[bytes], recorder: PromptRecorder, url: str) -> None:
        self.bodies, self.recorder, self.url = bodies, recorder, url

    def mark(self) -> tuple[int, int]:
        return len(self.bodies), len(self.recorder.prompts)

    def seen_since(self, mark: tuple[int, int]) -> tuple[bytes, list[str]]:
        return b"\n".join(self.bodies[mark[0]:]), self.recorder.prompts[mark[1]:]


@pytest.fixture(scope="module")
def watched(engine):
    recorder = PromptRecorder(engine)
    tenants = {"pg": {"key": KEY}, "mallory": {"key": MALLORY_KEY}, **{role: {"key": key} for role, key in ROLE_KEYS.items()}}
    app = create_app(recorder, tenants={"tenants": tenants}, cache=False)
    bodies: list[bytes] = []
    app.add_middleware(RecordBodies, sink=bodies)
    with ServerThread(app) as srv:
        yield Watched(bodies, recorder, srv.url)


@pytest.fixture(scope="module")
def server(watched):
    """test_postgres.py's cluster installs the extension against this server."""
    return watched


@pytest.fixture(scope="module")
def tables(cluster):
    """The tables, policies and views; mallory reads them, with a key of her own and two functions that tell what they saw."""
    with connect(cluster) as db:
        db.execute("INSERT INTO relserve.api_keys (role, api_key) VALUES ('mallory', %s)", [MALLORY_KEY])
        db.execute("CREATE ROLE curator NOLOGIN")  # owns the views: a view reads with its owner's rights, RLS included
        for name in ("docs_llm", "docs_plain", "docs_open"):
            db.execute(f"CREATE TABLE {name} (id int, tag text, body text, secret boolean)")
            with db.cursor() as cur:
                cur.executemany(f"INSERT INTO {name} VALUES (%s, %s, %s, %s)", DOCS)
            db.execute(f"GRANT SELECT ON {name} TO curator")
        db.execute("ALTER TABLE docs_llm ENABLE ROW LEVEL SECURITY")
        db.execute(f"CREATE POLICY visible ON docs_llm USING ({POLICY_CALL})")
        db.execute("ALTER TABLE docs_plain ENABLE ROW LEVEL SECURITY")
        db.execute("CREATE POLICY visible ON docs_plain USING (NOT secret)")
        db.execute("GRANT SELECT ON docs_llm, docs_plain TO mallory")
        views = {
            "v_llm": f"SELECT id, body FROM docs_open WHERE {POLICY_CALL}",
            "v_plain": "SELECT id, body FROM docs_open WHERE NOT secret",
            # the view's own call in its target list: only for the rows its qual keeps
            "v_answer": "SELECT id, body, llm_map('Repeat: {b}', body) AS m FROM docs_open WHERE NOT secret",
            # a view over the llm policy's table, with a qual of its own that is not leakproof
            "v_layered": "SELECT id, body FROM docs_llm WHERE lower(body) <> 'public five'",
        }
        for name, sql in views.items():
            db.execute(f"CREATE VIEW {name} WITH (security_barrier) AS {sql}")
            db.execute(f"ALTER VIEW {name} OWNER TO curator")
            db.execute(f"GRANT SELECT ON {name} TO mallory")
        db.execute("CREATE SCHEMA mal AUTHORIZATION mallory")
    with connect(cluster, "mallory") as db:
        for name, returns, result in (("leak", "boolean", "true"), ("echo", "text", "$1")):
            db.execute(f"CREATE FUNCTION mal.{name}(text) RETURNS {returns} LANGUAGE plpgsql COST 0.0001 "
                       f"AS $$ BEGIN RAISE NOTICE 'LEAK:%', $1; RETURN {result}; END $$")
    return cluster


# what mallory reads, the table under it, and the rows she may see
TARGETS = {
    "rls-llm-policy": ("docs_llm", "docs_llm", VISIBLE),
    "rls-plain-policy": ("docs_plain", "docs_plain", VISIBLE),
    "sb-view-llm": ("v_llm", "docs_open", VISIBLE),
    "sb-view-plain": ("v_plain", "docs_open", VISIBLE),
    "sb-view-own-call": ("v_answer", "docs_open", VISIBLE),
    "sb-view-over-llm-policy": ("v_layered", "docs_llm", {i: b for i, b in VISIBLE.items() if b != "public five"}),
}

# what mallory runs over each: her function in WHERE, an llm_* call in the target list, one in WHERE
# beside her function, her function inside a call's arguments, an llm_filter beside her function,
# and two label quals the batch node orders by their sample (issue 64) beside her function
QUERIES = [
    "SELECT id FROM {t} WHERE mal.leak(body) ORDER BY id",
    "SELECT id, llm_map('Repeat: {{b}}', body) FROM {t} ORDER BY id",
    "SELECT id FROM {t} WHERE llm_map('Repeat: {{b}}', body) IS NOT NULL AND mal.leak(body) ORDER BY id",
    "SELECT id, llm_map('Repeat: {{b}}', mal.echo(body)) FROM {t} ORDER BY id",
    "SELECT id FROM {t} WHERE llm_filter('Is {{b}} about a number?', body) IS NOT NULL AND mal.leak(body) ORDER BY id",
    "SELECT id FROM {t} WHERE llm_filter('Is {{b}} long?', body) IS NOT NULL "
    "AND llm_classify('Tone of {{b}}?', ARRAY['calm', 'angry'], body) IS NOT NULL AND mal.leak(body) ORDER BY id",
]


def run_as_mallory(cluster, watched: Watched, sql: str, batching: bool) -> tuple[list, list[str], bytes, list[str], str]:
    """The rows, the LEAK notices, what the server received and what its engine was asked, and the plan."""
    with connect(cluster, "mallory") as db:
        notices: list[str] = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        db.execute("SET relserve.max_tokens = 4")
        db.execute(f"SET relserve.batch_calls = {'on' if batching else 'off'}")
        plan = "\n".join(r for (r,) in db.execute(f"EXPLAIN {sql}"))
        mark = watched.mark()
        rows = db.execute(sql).fetchall()
        received, prompts = watched.seen_since(mark)
    return rows, [n.removeprefix("LEAK:") for n in notices if n.startswith("LEAK:")], received, prompts, plan


@pytest.mark.parametrize("target", list(TARGETS))
def test_no_hidden_row_reaches_mallorys_functions_or_the_server(tables, watched, target):
    table, base, visible = TARGETS[target]
    with connect(tables) as admin:  # the hidden rows are there: the superuser reads them
        assert admin.execute(f"SELECT count(*) FROM {base} WHERE body LIKE 'HIDDEN%'").fetchone() == (2,)
    for template in QUERIES:
        sql = template.format(t=table)
        got = {}
        for batching in (True, False):
            rows, leaked, received, prompts, plan = run_as_mallory(tables, watched, sql, batching)
            where = f"{sql} (batch_calls {'on' if batching else 'off'})"
            assert HIDDEN.encode() not in received, where
            assert not [p for p in prompts if HIDDEN in p], where
            assert not [b for b in leaked if HIDDEN in b], (where, leaked)
            if "mal." in sql:  # her function saw exactly the rows she may see
                assert sorted(leaked) == sorted(b for i, b in visible.items() if i in {r[0] for r in rows}), (where, leaked)
            assert {r[0] for r in rows} <= set(visible), (where, rows)
            if batching and "llm_" in sql:
                assert "relserve batch" in plan, (where, plan)
            got[batching] = rows
        assert got[True] == got[False], sql
        # every query keeps every row she may see: mal.leak is true, and no visible row's call fails
        assert [r[0] for r in got[True]] == sorted(visible), (sql, got)


def test_the_policys_calls_and_mallorys_go_out_in_separate_batches(tables, watched):
    sql = "SELECT id FROM docs_llm WHERE llm_map('Repeat: {b}', body) IS NOT NULL AND mal.leak(body)"
    rows, leaked, received, _, plan = run_as_mallory(tables, watched, sql, True)
    assert "LLM Calls: llm_map (filter, batch 1), llm_map (filter, batch 2)" in plan, plan
    assert "Qual Order: PostgreSQL's" in plan, plan
    # the policy's call first, then mallory's function, then her call: the planner's order
    filter_line = next(line for line in plan.splitlines() if "Filter:" in line and "llm_map" in line)
    assert filter_line.index("Say ok to") < filter_line.index("mal.leak") < filter_line.index("Repeat:"), filter_line
    assert sorted(r[0] for r in rows) == sorted(VISIBLE)
    assert sorted(leaked) == sorted(VISIBLE.values())
    # the policy's batch carried all five rows' tags (two of them NULL), mallory's only the three visible bodies
    assert received.count(b"Say ok to {t}") == 1 and received.count(b"Repeat: {b}") == 1, received
    for body in VISIBLE.values():
        assert body.encode() in received


def test_without_security_quals_the_cheap_quals_stay_on_the_input_and_each_calls_qual_has_a_batch(tables):
    """A table without a policy: the query's quals all have one level, so nothing waits for a
    security stage (as before issue 44); each llm qual has a batch of its own, over the rows the
    batches before it kept, the label qual before the one that generates text (issue 64)."""
    sql = ("SELECT id FROM docs_open WHERE id > 1 AND mal.leak(body) AND llm_map('Repeat: {b}', body) IS NOT NULL "
           "AND llm_filter('Is {b} long?', body) IS NOT NULL")
    with connect(tables) as db:
        plan = "\n".join(r for (r,) in db.execute(f"EXPLAIN {sql}"))
    assert "LLM Calls: llm_filter (filter, batch 1), llm_map (filter, batch 2)" in plan, plan
    assert "Order of LLM Quals: one after another, in the batches' order" in plan, plan
    assert "Qual Order" not in plan, plan
    scan = plan[plan.index("Seq Scan on docs_open"):]
    assert "Filter: (mal.leak(body) AND (id > 1))" in scan, plan  # the planner's order: by cost


@pytest.mark.parametrize("settings", [
    {},
    {"on_error": "raise"},
    {"max_tokens_total": "1", "on_budget": "refuse"},
], ids=["defaults", "on-error-raise", "budget-refuse"])
def test_a_policys_call_fails_closed_and_silently_whatever_the_readers_settings(tables, settings):
    """The llm policy's call fails for the two hidden rows (their tags are NULL). Mallory's own
    ``relserve.*`` settings reach that call, but none of them may turn its failures into what
    she can read: an error ending her statement ("row 2: ..."), a refusal carrying the estimate of
    the rows it would run, or a NOTICE per failed row. A row the call cannot answer is hidden;
    with a budget too small for any row, every row is (found by an audit, 7 Dec)."""
    for batching in (True, False):
        with connect(tables, "mallory") as db:
            notices: list[str] = []
            db.add_notice_handler(lambda d, seen=notices: seen.append(d.message_primary or ""))
            db.execute(f"SET relserve.batch_calls = {'on' if batching else 'off'}")
            for name, value in settings.items():
                db.execute(f"SET relserve.{name} = '{value}'")
            rows = db.execute("SELECT id FROM docs_llm ORDER BY id").fetchall()
        expected = [] if "max_tokens_total" in settings else sorted(VISIBLE)
        assert [r[0] for r in rows] == expected, (settings, batching, rows)
        assert notices == [], (settings, batching, notices)
