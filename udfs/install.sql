-- relserve functions for PostgreSQL (plpython3u): LLM calls over rows, served by a relserve server.
--
-- Install (as a superuser: plpython3u is an untrusted language), in the database that uses them:
--     psql -d mydb -f udfs/install.sql
--     ALTER DATABASE mydb SET relserve.url = 'http://127.0.0.1:8000';
-- and, as a superuser (only superusers can write these two tables; see "Security" in the docs):
--     INSERT INTO relserve.config VALUES ('python_path', '/path/to/relserve/.venv/lib/python3.11/site-packages')
--         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
--     INSERT INTO relserve.api_keys VALUES ('alice', 'alice-tenant-key');   -- per role, if the server has tenants
-- The user-facing functions are created in the current schema (the first one on search_path);
-- the helper they share and the two tables live in the schema "relserve". See docs/server-postgres-spreadsheet.md.
--
-- Superuser-owned configuration (any role reads relserve.config; a role reads only its own key):
--     relserve.config     ('python_path', ...)  site-packages folder(s), ':'-separated (the first wins),
--                                               where relserve and httpx are installed. Not a setting:
--                                               site.addsitedir runs the folder's .pth files as postgres.
--     relserve.api_keys   (role, api_key)       the tenant key of each role (sent as Authorization: Bearer),
--                                               read through the view relserve.my_api_key (current_user's row)
-- Settings (SET, ALTER DATABASE/ROLE ... SET):
--     relserve.url          the server (default http://127.0.0.1:8000)
--     relserve.timeout      seconds a call waits for its relQuery before cancelling it (default 120);
--                           statement_timeout and pg_cancel_backend also cancel the relQuery
--     relserve.on_error     what a failed row does, as everywhere in relserve (DuckDB, polars, the server):
--                           null (default): the row is NULL (with a NOTICE, or its error column)
--                           raise: the statement fails with an error naming the row
--     relserve.on_server_error  raise (default): a server error (unreachable, bad key) is a SQL error
--                               null: it gives NULL rows instead (and a WARNING)
--     relserve.max_tokens   answer length (default: the function's own: map 64, filter 2, classify 16, extract 256)
--     relserve.temperature  sampling temperature (default 0: greedy, cacheable)
-- relserve.python_path and relserve.api_key are refused as settings (an error says where they went).
--
-- Two forms of every function:
--   * scalar, one request per call:   SELECT llm_map('Is {r} positive?', review) FROM reviews;
--   * over a whole query, ONE relQuery for all its rows (much faster, see the docs):
--         SELECT * FROM llm_map_query('Is {review} positive?', 'SELECT id, review FROM reviews');

-- A schema "relserve" made earlier by another role would let that role replace what is below.
DO $check$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
               WHERE n.nspname = 'relserve' AND NOT r.rolsuper) THEN
        RAISE EXCEPTION 'schema relserve exists and is not owned by a superuser; drop it or change its owner first';
    END IF;
END
$check$;

CREATE SCHEMA IF NOT EXISTS relserve;
REVOKE ALL ON SCHEMA relserve FROM PUBLIC;
GRANT USAGE ON SCHEMA relserve TO PUBLIC;  -- use, not create: nobody else may put objects here

-- What only a superuser decides. Every role may read it (nothing secret), none but superusers write it.
CREATE TABLE IF NOT EXISTS relserve.config (
    name text PRIMARY KEY CHECK (name IN ('python_path')),
    value text NOT NULL
);
REVOKE ALL ON relserve.config FROM PUBLIC;
GRANT SELECT ON relserve.config TO PUBLIC;

-- Tenant keys by role, like a user mapping's options: only superusers read the table ...
CREATE TABLE IF NOT EXISTS relserve.api_keys (
    role name PRIMARY KEY,
    api_key text NOT NULL
);
REVOKE ALL ON relserve.api_keys FROM PUBLIC;

-- ... and a role reads its own row through this view (a view reads its tables with its owner's
-- rights, but current_user is the caller). security_barrier: a caller's own function in WHERE
-- (e.g. one that RAISEs its argument) is not run before the view's filter, so it sees no other row.
CREATE OR REPLACE VIEW relserve.my_api_key WITH (security_barrier) AS
    SELECT k.api_key FROM relserve.api_keys k WHERE k.role = current_user;
REVOKE ALL ON relserve.my_api_key FROM PUBLIC;
GRANT SELECT ON relserve.my_api_key TO PUBLIC;

-- The shared helper: defines, once per session, what the functions below call (kept in GD).
CREATE OR REPLACE FUNCTION relserve._load() RETURNS void
LANGUAGE plpython3u AS $relserve$
import json
import site
import sys
import threading
import time

SETTING_NAMES = ("url", "timeout", "on_error", "on_server_error", "max_tokens", "temperature")
# settings any role may set in its session; these two were settings once and are refused now
REFUSED = {
    "python_path": "relserve.python_path is not read from settings: any role could point it at a folder whose .pth "
    "files then run as the postgres OS user. A superuser sets it in the table relserve.config.",
    "api_key": "relserve.api_key is not read from settings: every role can read settings (SHOW, current_setting, "
    "pg_db_role_setting). A superuser stores each role's key in the table relserve.api_keys.",
}
# pg_catalog spelled out: a caller's search_path must not swap in its own current_setting
settings_plan = plpy.prepare(
    "SELECT " + ", ".join(f"pg_catalog.current_setting('relserve.{n}', true) AS {n}" for n in SETTING_NAMES + tuple(REFUSED))
)
config_plan = plpy.prepare("SELECT name, value FROM relserve.config")  # filtered here: no operator to resolve
key_plan = plpy.prepare("SELECT api_key FROM relserve.my_api_key")
# a query that checks for interrupts: a pending cancel or statement timeout raises QueryCanceled here
interrupt_plan = plpy.prepare("SELECT pg_catalog.pg_sleep(0)")
DEFAULT_TIMEOUT_S = 120.0
WAIT_SLICE_S = 0.1
CANCEL_TIMEOUT_S = 5.0  # an interrupted statement waits at most this long for the server to confirm the cancel
clients = {}
added_paths = set()
lib_box = {}  # the Lib below, once relserve is importable


def fail(message, sqlstate="22023", hint=None):
    # SQLSTATEs let clients tell bad input (22023) from an unreachable server (08001) or a bad key (28000)
    if hint:
        plpy.error(message, sqlstate=sqlstate, hint=hint)
    plpy.error(message, sqlstate=sqlstate)


def server_error(name, e):
    status = getattr(e, "status", 0)
    if status == 0:
        fail(f"{name}: {e}", "08001", hint="Is the relserve server running at relserve.url?")
    if status == 401:
        fail(f"{name}: {e}", "28000", hint="A superuser stores this role's key (from the server's tenants file) "
             "in relserve.api_keys: INSERT INTO relserve.api_keys VALUES ('<role>', '<key>')")
    if status in (413, 429):
        fail(f"{name}: {e}", "54000")
    fail(f"{name}: {e}", "22023" if 400 <= status < 500 else "XX000")


def settings():
    row = plpy.execute(settings_plan)[0]
    s = {k: (v.strip() if isinstance(v, str) and v.strip() else None) for k, v in row.items()}
    for name, why in REFUSED.items():
        if s.pop(name):
            fail(why, "42501", hint=f"RESET relserve.{name}; ALTER DATABASE/ROLE ... RESET relserve.{name}; "
                 "see 'Security' in docs/server-postgres-spreadsheet.md")
    s["on_error"] = on_error_of("relserve.on_error", s["on_error"] or "null")
    s["on_server_error"] = on_error_of("relserve.on_server_error", s["on_server_error"] or "raise")
    return s


# the values relserve.on_error took before it shared relserve's vocabulary
RENAMED_ON_ERROR = {
    "fail": "'fail' is now 'raise' (a failed row fails the statement)",
}


def on_error_of(what, value):
    """relserve's one on_error vocabulary (relserve.validation.OnError): 'null' or 'raise'."""
    allowed = modules()[1].ON_ERROR_VALUES
    value = str(value).strip().lower()
    if value not in allowed:
        shown = " or ".join(repr(v) for v in allowed)
        fail(f"{what} must be {shown}, got {value!r}", hint=RENAMED_ON_ERROR.get(value))
    return value


def python_path():
    """The superuser's relserve.config row, never a setting (see REFUSED)."""
    return {r["name"]: r["value"] for r in plpy.execute(config_plan)}.get("python_path")


def add_python_path(path):
    # the configured folders go first, in their order, so their packages win over the system Python's
    before = list(sys.path)
    new = []
    for entry in (path or "").split(":"):
        if entry and entry not in added_paths:
            site.addsitedir(entry)  # also runs its .pth files (editable installs)
            added_paths.add(entry)
            new.append(entry)
    if new:
        added = [p for p in sys.path if p not in before]
        sys.path[:] = [e for e in new if e in added] + [p for p in added if p not in new] + before


class Lib:
    """What the functions use of relserve besides the client: the one binding and vocabulary."""

    def __init__(self):
        from relserve.binding import Binding
        from relserve.errors import TemplateError
        from relserve.template import Template
        from relserve.validation import ON_ERROR_VALUES

        self.Binding, self.TemplateError, self.Template, self.ON_ERROR_VALUES = Binding, TemplateError, Template, ON_ERROR_VALUES


def modules(s=None):
    if not added_paths:
        add_python_path(python_path())
    try:
        from relserve import client as relserve_client

        if not lib_box:
            lib_box["lib"] = Lib()
    except ImportError as e:
        fail(
            f"relserve: cannot import the relserve client ({e})",
            "58000",
            hint="A superuser sets python_path in relserve.config to the site-packages folder of the Python "
            "environment where relserve is installed: INSERT INTO relserve.config VALUES ('python_path', "
            "'/srv/relserve/.venv/lib/python3.11/site-packages') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
        )
    return relserve_client, lib_box["lib"]


def timeout_of(s):
    try:
        timeout = float(s["timeout"] or DEFAULT_TIMEOUT_S)
    except ValueError:
        timeout = -1
    if not 0 < timeout < float("inf"):
        fail(f"relserve.timeout must be a positive number of seconds, got {s['timeout']!r}")
    return timeout


def client(s, conn=None):
    mod, _ = modules(s)
    if conn is not None:  # the foreign server's url and the user mapping's key (relserve_fdw)
        url, api_key = conn
    else:
        url = s["url"] or mod.DEFAULT_URL
        rows = plpy.execute(key_plan)  # the current role's key, or none
        api_key = rows[0]["api_key"] if rows else ""
    # the wait for the relQuery is timed in run(); the socket's own timeout is a backstop behind it
    key = (url, api_key, timeout_of(s) + 30.0)
    if key not in clients:  # one connection pool per session, server and key
        clients[key] = mod.Client(url, api_key=api_key, timeout=key[2])
    return clients[key]


def run(name, s, template, rows, opts):
    """client.run, but waiting in short slices that let PostgreSQL interrupt the call.

    Python code in a backend only sees a cancel or a statement timeout when it calls into the
    backend: the stream is read in a thread while this one checks for interrupts every slice.
    Interrupted (or past relserve.timeout), the relQuery is cancelled on the server and the
    interrupt raised again, with PostgreSQL's own error."""
    mod, _ = modules(s)
    c = client(s)
    timeout = timeout_of(s)
    box = {"rows": {}}
    started = threading.Event()
    abandoned = threading.Event()

    def read():
        try:
            with c.stream(template, rows, **opts) as st:
                box["id"], box["total"] = st.id, st.total
                started.set()
                for r in st:
                    box["rows"][r.index] = r
                    if abandoned.is_set():
                        return
                box["done"] = st.done or {}
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e
        finally:
            started.set()

    worker = threading.Thread(target=read, name="relserve-stream", daemon=True)
    worker.start()
    end = time.monotonic() + timeout
    try:
        while worker.is_alive():
            worker.join(WAIT_SLICE_S)
            plpy.execute(interrupt_plan)
            if time.monotonic() > end and worker.is_alive():
                give_up(c, box, started, abandoned)
                fail(f"{name}: no answer from the relserve server within relserve.timeout = {timeout:g} s; "
                     "its relQuery was cancelled", "57014", hint="SET relserve.timeout = <seconds> for longer calls")
    except plpy.SPIError:
        if worker.is_alive():  # the cancel / statement timeout arrived while waiting
            give_up(c, box, started, abandoned)
        raise
    if "error" in box:
        raise box["error"]
    done = box["done"]
    ordered = [box["rows"].get(i) or mod.RowResult(i, error="no answer") for i in range(box["total"])]
    return mod.RemoteResult(box["id"], done.get("status", "unknown"), ordered, done.get("stats", {}), done.get("error"))


def give_up(c, box, started, abandoned):
    """Cancel the relQuery on the server (best effort: the statement ends either way)."""
    abandoned.set()
    started.wait(5)
    if "id" in box:
        try:
            c.cancel(box["id"], timeout=CANCEL_TIMEOUT_S)
        except Exception as e:
            plpy.warning(f"relserve: could not cancel relQuery {box['id']} on the server: {e}")


def call_options(s, function, spec, extra=None):
    opts = {"function": function}
    if function == "classify":
        opts["labels"] = list(spec) if spec is not None else None
    if function == "extract":
        opts["json_schema"] = json.loads(spec) if isinstance(spec, str) else spec
    try:
        if s["max_tokens"]:
            opts["max_tokens"] = int(s["max_tokens"])
        if s["temperature"]:
            opts["temperature"] = float(s["temperature"])
    except ValueError as e:
        fail(f"relserve.max_tokens / relserve.temperature: {e}")
    opts.update(extra or {})
    opts["on_error"] = "null"  # row errors come back per row; 'raise' is applied here
    return opts


def bind(name, lib, template, vals, fields):
    """Placeholders get the values in order of first appearance, or by name from a jsonb object
    (relserve.binding: the binding of every surface)."""
    obj = None
    if fields is not None:
        obj = json.loads(fields)
        if not isinstance(obj, dict):
            fail(f"{name}: the jsonb argument must be an object of placeholder values, got {type(obj).__name__}")
    try:
        binding = lib.Binding(lib.Template.parse(template), name)
        # (PL/Python's own global "args" holds every argument: not that one)
        values = binding.row(args=list(vals or []), values=obj)
    except lib.TemplateError as e:
        fail(str(e) if str(e).startswith(name) else f"{name}: {e}")
    return dict(zip(binding.names, values))


def scalar(function, template, vals=None, fields=None, spec=None):
    """One value: one request to the server."""
    name = f"llm_{function}"
    s = settings()
    mod, lib = modules(s)
    row = bind(name, lib, template, vals, fields)
    try:
        result = run(name, s, template, [row], call_options(s, function, spec))
    except mod.ServerError as e:
        if s["on_server_error"] == "null":
            plpy.warning(f"{name}: relserve server error, NULL returned: {e}")
            return None
        server_error(name, e)
    r = result.rows[0]
    if r.error is not None:
        if s["on_error"] == "raise":
            fail(f"{name}: {r.error}", "22000")
        plpy.notice(f"{name}: NULL for this row: {r.error}")
        return None
    return r.value


def over_query(function, template, query, options, spec=None):
    """Every row of ``query``: ONE relQuery. Returns (ord, answer, error, input) rows in input order.

    A list, not a generator: an error then surfaces with its own message, not as a failed iteration."""
    name = f"llm_{function}_query"
    s = settings()
    mod, _ = modules(s)
    extra, on_error, on_server_error = query_options(name, s, options)
    rows, inputs = source_rows(name, query)
    if not rows:
        return []
    try:
        result = run(name, s, template, rows, call_options(s, function, spec, extra))
    except mod.ServerError as e:
        if on_server_error != "null":
            server_error(name, e)
        plpy.warning(f"{name}: relserve server error, NULL returned for every row: {e}")
        return [{"ord": i + 1, "answer": None, "error": str(e), "input": text} for i, text in enumerate(inputs)]
    if on_error == "raise":
        bad = next((r for r in result.rows if r.error is not None), None)
        if bad is not None:
            fail(f"{name}: row {bad.index + 1}: {bad.error}", "22000")
    return [{"ord": r.index + 1, "answer": r.value, "error": r.error, "input": text} for r, text in zip(result.rows, inputs)]


def query_options(name, s, options):
    """The jsonb options of a query call, its on_error and on_server_error (each the option, else
    the setting)."""
    extra = json.loads(options) if options else {}
    if not isinstance(extra, dict):
        fail(f"{name}: options must be a jsonb object, e.g. '{{\"max_tokens\": 8}}'")
    on_error = on_error_of(f"{name}: on_error", extra.pop("on_error", s["on_error"]))
    on_server_error = on_error_of(f"{name}: on_server_error", extra.pop("on_server_error", s["on_server_error"]))
    return extra, on_error, on_server_error


def source_rows(name, query, columns=None):
    """The rows of the caller's query (run with the caller's rights), and each as JSON text."""
    try:
        result_rows = plpy.execute(query)
    except plpy.SPIError as e:  # keep the query's own SQLSTATE (42P01 for a missing table, ...)
        fail(f"{name}: the query failed: {e}", getattr(e, "sqlstate", None) or "42000")
    if columns:
        have = list(result_rows.colnames())
        missing = [c for c in columns if c not in have]
        if missing:
            fail(f"{name}: column(s) {', '.join(missing)} are not among the source query's columns "
                 f"({', '.join(have)})", "42703", hint="Name the foreign table's columns as the source query does.")
    rows = [dict(r) for r in result_rows]
    return rows, [json.dumps(r, default=str, ensure_ascii=False) for r in rows]


# ---------------------------------------------------------------- relserve_fdw's scans

WAIT = {"event": "wait", "answer": None, "error": None, "input": None, "stats": None}


def as_text(v):
    # the C side casts the text to the column's type: PostgreSQL spells booleans true/false
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return None if v is None else str(v)


def answer_event(value, error, input_text):
    return {"event": "row", "answer": as_text(value), "error": error, "input": input_text, "stats": None}


def stats_event(stats):
    return {"event": "stats", "answer": None, "error": None, "input": None, "stats": json.dumps(stats, default=str)}


def error_event(message, sqlstate):
    # the C side raises it: an exception raised inside an iteration would lose its message and SQLSTATE
    return {"event": "error", "answer": None, "error": message, "input": None, "stats": json.dumps({"sqlstate": sqlstate})}


NO_ROWS = {"rows": 0, "engine_rows": 0, "cached_rows": 0}


def scan_input(name, s, kind, spec, query, options, columns):
    """A foreign table's call options, (on_error, on_server_error), and its source rows (with
    their JSON text)."""
    extra, on_error, on_server_error = query_options(name, s, options)
    rows, inputs = source_rows(name, query, columns)
    if kind == "classify":  # the table option is one comma-separated string
        spec = [label.strip() for label in (spec or "").split(",")]
    return call_options(s, kind, spec, extra), (on_error, on_server_error), rows, inputs


def fdw_scan(kind, template, spec, query, options, url, api_key, columns):
    """A relserve_fdw scan: the source query's rows as ONE relQuery, streamed.

    Everything that can fail before the first answer (settings, the source query, the server's
    acceptance) fails here with its own message. What follows is a generator: answers as they
    finish, "wait" rows while none comes (so the C side checks for interrupts every 0.1 s), then
    one "stats" row. Closed early (LIMIT, cancel, an error) it cancels the relQuery."""
    name = f"relserve_fdw ({kind})"
    s = settings()
    mod, _ = modules(s)
    opts, (on_error, on_server_error), rows, inputs = scan_input(name, s, kind, spec, query, options, columns)
    if not rows:
        return iter([stats_event(NO_ROWS)])
    c = client(s, (url, api_key or ""))
    try:
        stream = c.stream(template, rows, **opts)
    except mod.ServerError as e:
        if on_server_error != "null":
            server_error(name, e)
        plpy.warning(f"{name}: relserve server error, NULL returned for every row: {e}")
        return iter([answer_event(None, str(e), text) for text in inputs] + [stats_event({"rows": len(rows)})])
    return scan_events(name, s, c, stream, inputs, on_error)


def scan_events(name, s, c, stream, inputs, on_error):
    import queue

    timeout = timeout_of(s)
    events = queue.Queue()
    abandoned = threading.Event()

    def read():
        try:
            for r in stream:
                events.put(("row", r))
                if abandoned.is_set():
                    return
            events.put(("done", stream.done or {}))
        except BaseException as e:  # handed to the generator
            events.put(("broken", e))

    threading.Thread(target=read, name="relserve-fdw-stream", daemon=True).start()
    # the relQuery's id first: the C side cancels it when the scan ends early (LIMIT)
    yield {**WAIT, "event": "accepted", "stats": json.dumps({"id": stream.id})}
    end = time.monotonic() + timeout
    cached = 0
    finished = False
    try:
        while True:
            try:
                what, item = events.get(timeout=WAIT_SLICE_S)
            except queue.Empty:
                if time.monotonic() > end:
                    yield error_event(f"{name}: no answer from the relserve server within relserve.timeout = "
                                      f"{timeout:g} s; its relQuery was cancelled", "57014")
                    return
                yield WAIT
                continue
            if what == "row":
                cached += bool(item.cached)
                if item.error is not None and on_error == "raise":
                    yield error_event(f"{name}: row {item.index + 1}: {item.error}", "22000")
                    return
                yield answer_event(item.value, item.error, inputs[item.index])
            elif what == "done":
                finished = True
                yield stats_event({**item.get("stats", {}), "id": stream.id, "cached_rows": cached})
                return
            else:
                yield error_event(f"{name}: {item}", "08006")
                return
    finally:
        if not finished:  # closed early: nothing more of this relQuery is wanted
            abandoned.set()
            try:
                c.cancel(stream.id, timeout=CANCEL_TIMEOUT_S)
            except Exception:  # best effort: the statement is ending either way
                pass
            stream.close()


def fdw_plan(kind, template, spec, query, options, url, api_key, columns):
    """EXPLAIN of a foreign table: what its scan would send, without running it. Never fails the
    EXPLAIN: a problem (the server down, a bad template) is reported in place of the figures."""
    name = f"relserve_fdw ({kind})"
    try:
        s = settings()
        opts, _, rows, _ = scan_input(name, s, kind, spec, query, options, columns)
        if not rows:
            return json.dumps(NO_ROWS)
        return json.dumps(client(s, (url, api_key or "")).plan(template, rows, **opts))
    except Exception as e:
        return json.dumps({"error": str(e)})


def fdw_cancel(url, api_key, relquery_id):
    """Cancel a scan's relQuery that the statement no longer needs (best effort)."""
    s = settings()
    try:
        client(s, (url, api_key or "")).cancel(relquery_id, timeout=CANCEL_TIMEOUT_S)
    except Exception as e:
        plpy.warning(f"relserve_fdw: could not cancel relQuery {relquery_id} on the server: {e}")


class Api:
    pass


api = Api()
api.scalar = scalar
api.over_query = over_query
api.fdw_scan = fdw_scan
api.fdw_cancel = fdw_cancel
api.fdw_plan = fdw_plan
GD["relserve"] = api
$relserve$;

-- ---------------------------------------------------------------- scalar functions (one request per call)

-- llm_map('Is {r} positive?', review): placeholders take the values in order of first appearance
CREATE OR REPLACE FUNCTION llm_map(template text, VARIADIC vals text[]) RETURNS text
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("map", template, vals=vals)
$$;

-- llm_map('Is {review} about {product}?', to_jsonb(r)): placeholders by name
CREATE OR REPLACE FUNCTION llm_map(template text, fields jsonb) RETURNS text
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("map", template, fields=fields)
$$;

CREATE OR REPLACE FUNCTION llm_filter(template text, VARIADIC vals text[]) RETURNS boolean
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("filter", template, vals=vals)
$$;

CREATE OR REPLACE FUNCTION llm_filter(template text, fields jsonb) RETURNS boolean
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("filter", template, fields=fields)
$$;

CREATE OR REPLACE FUNCTION llm_classify(template text, labels text[], VARIADIC vals text[]) RETURNS text
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("classify", template, vals=vals, spec=labels)
$$;

CREATE OR REPLACE FUNCTION llm_classify(template text, labels text[], fields jsonb) RETURNS text
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("classify", template, fields=fields, spec=labels)
$$;

CREATE OR REPLACE FUNCTION llm_extract(template text, json_schema jsonb, VARIADIC vals text[]) RETURNS jsonb
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar("extract", template, vals=vals, spec=json_schema)
$$;

-- ---------------------------------------------------------------- over a query (ONE relQuery for all its rows)

-- SELECT * FROM llm_map_query('Is {review} positive?', 'SELECT id, review FROM reviews', '{"max_tokens": 8}')
-- placeholders name the query's columns; ord is the row's position in the query's result (1-based);
-- input is the row itself, to join back: (input->>'id')::int
CREATE OR REPLACE FUNCTION llm_map_query(template text, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer text, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query("map", template, query, options)
$$;

CREATE OR REPLACE FUNCTION llm_filter_query(template text, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer boolean, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query("filter", template, query, options)
$$;

CREATE OR REPLACE FUNCTION llm_classify_query(template text, labels text[], query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer text, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query("classify", template, query, options, spec=labels)
$$;

CREATE OR REPLACE FUNCTION llm_extract_query(template text, json_schema jsonb, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer jsonb, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query("extract", template, query, options, spec=json_schema)
$$;

-- ---------------------------------------------------------------- for relserve_fdw (udfs/relserve_fdw)

-- A foreign table's scan: the C extension calls this through SPI with the foreign server's url
-- and the caller's user mapping key; not meant to be called directly. Called in a SELECT list
-- (value per call), it streams: events "row" (an answer), "wait", "error", then "stats".
CREATE OR REPLACE FUNCTION relserve.fdw_scan(kind text, template text, spec text, query text, options jsonb,
                                             url text, api_key text, columns text[])
RETURNS TABLE (event text, answer text, error text, input jsonb, stats jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].fdw_scan(kind, template, spec, query, options, url, api_key, columns)
$$;

CREATE OR REPLACE FUNCTION relserve.fdw_cancel(url text, api_key text, relquery_id text) RETURNS void
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
GD["relserve"].fdw_cancel(url, api_key, relquery_id)
$$;

CREATE OR REPLACE FUNCTION relserve.fdw_plan(kind text, template text, spec text, query text, options jsonb,
                                             url text, api_key text, columns text[]) RETURNS jsonb
LANGUAGE plpython3u AS $$
if "relserve" not in GD:
    plpy.execute("SELECT relserve._load()")
return GD["relserve"].fdw_plan(kind, template, spec, query, options, url, api_key, columns)
$$;
