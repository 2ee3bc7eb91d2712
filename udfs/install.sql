-- relserve functions for PostgreSQL (plpython3u): LLM calls over rows, served by a relserve server.
--
-- Install (as a superuser: plpython3u is an untrusted language), in the database that uses them:
--     psql -d mydb -f udfs/install.sql
--     ALTER DATABASE mydb SET relserve.url = 'http://127.0.0.1:8000';
--     ALTER DATABASE mydb SET relserve.api_key = '...';             -- if the server has tenants
--     ALTER DATABASE mydb SET relserve.python_path = '/path/to/relserve/.venv/lib/python3.11/site-packages';
-- The user-facing functions are created in the current schema (the first one on search_path);
-- the helper they share lives in the schema "relserve". See docs/server-postgres-spreadsheet.md.
--
-- Settings (SET, ALTER DATABASE/ROLE ... SET):
--     relserve.url          the server (default http://127.0.0.1:8000)
--     relserve.api_key      the tenant's key (sent as Authorization: Bearer)
--     relserve.python_path  site-packages folder(s), ':'-separated, where relserve and httpx are installed
--     relserve.timeout      seconds to wait for the server (default 600)
--     relserve.on_error     raise (default): a server error is a SQL error, a failed row is NULL
--                           null:  a server error also gives NULL rows (and a WARNING)
--                           fail:  a failed row is a SQL error too
--     relserve.max_tokens   answer length (default: the function's own: map 64, filter 2, classify 16, extract 256)
--     relserve.temperature  sampling temperature (default 0: greedy, cacheable)
--
-- Two forms of every function:
--   * scalar, one request per call:   SELECT llm_map('Is {r} positive?', review) FROM reviews;
--   * over a whole query, ONE relQuery for all its rows (much faster, see the docs):
--         SELECT * FROM llm_map_query('Is {review} positive?', 'SELECT id, review FROM reviews');

CREATE SCHEMA IF NOT EXISTS relserve;
GRANT USAGE ON SCHEMA relserve TO PUBLIC;

-- The shared helper: defines, once per session, what the functions below call (kept in GD).
CREATE OR REPLACE FUNCTION relserve._load() RETURNS void
LANGUAGE plpython3u AS $relserve$
import json
import site
import sys

SETTING_NAMES = ("url", "api_key", "python_path", "timeout", "on_error", "max_tokens", "temperature")
settings_plan = plpy.prepare(
    "SELECT " + ", ".join(f"current_setting('relserve.{n}', true) AS {n}" for n in SETTING_NAMES)
)
clients = {}
added_paths = set()


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
        fail(f"{name}: {e}", "28000", hint="Set relserve.api_key to a key from the server's tenants file.")
    if status in (413, 429):
        fail(f"{name}: {e}", "54000")
    fail(f"{name}: {e}", "22023" if 400 <= status < 500 else "XX000")


def settings():
    row = plpy.execute(settings_plan)[0]
    s = {k: (v.strip() if isinstance(v, str) and v.strip() else None) for k, v in row.items()}
    s["on_error"] = (s["on_error"] or "raise").lower()
    if s["on_error"] not in ("raise", "null", "fail"):
        fail(f"relserve.on_error must be 'raise', 'null' or 'fail', got {s['on_error']!r}")
    return s


def add_python_path(path):
    # the virtual env goes first, so its packages win over the system Python's
    for entry in (path or "").split(":"):
        if entry and entry not in added_paths:
            before = list(sys.path)
            site.addsitedir(entry)  # also runs its .pth files (editable installs)
            sys.path[:] = [p for p in sys.path if p not in before] + before
            added_paths.add(entry)


def modules(s):
    add_python_path(s["python_path"])
    try:
        from relserve import client as relserve_client
        from relserve.template import Template
    except ImportError as e:
        fail(
            f"relserve: cannot import the relserve client ({e})",
            "58000",
            hint="Set relserve.python_path to the site-packages folder of the Python environment where relserve "
            "is installed, e.g. ALTER DATABASE mydb SET relserve.python_path = "
            "'/srv/relserve/.venv/lib/python3.11/site-packages'",
        )
    return relserve_client, Template


def client(s):
    mod, _ = modules(s)
    url = s["url"] or mod.DEFAULT_URL
    try:
        timeout = float(s["timeout"] or 600)
    except ValueError:
        fail(f"relserve.timeout must be a number of seconds, got {s['timeout']!r}")
    key = (url, s["api_key"], timeout)
    if key not in clients:  # one connection pool per session and server
        clients[key] = mod.Client(url, api_key=s["api_key"] or "", timeout=timeout)
    return clients[key]


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
    opts["on_error"] = "null"  # row errors come back per row; 'fail' is applied here
    return opts


def bind(name, Template, template, vals, fields):
    """Placeholders get the values in order of first appearance, or by name from a jsonb object."""
    try:
        columns = Template.parse(template).columns
    except Exception as e:
        fail(f"{name}: {e}")
    if fields is not None:
        obj = json.loads(fields)
        if not isinstance(obj, dict):
            fail(f"{name}: the jsonb argument must be an object of placeholder values, got {type(obj).__name__}")
        missing = [c for c in columns if c not in obj]
        if missing:
            fail(f"{name}: the template names {', '.join('{' + c + '}' for c in missing)}, "
                       f"which the object does not have (keys: {', '.join(obj) or 'none'})")
        return {c: obj[c] for c in columns}
    vals = list(vals or [])  # (PL/Python's own global "args" holds every argument: not that one)
    if len(vals) != len(columns):
        shown = ", ".join("{" + c + "}" for c in columns)
        fail(
            f"{name}: the template has {len(columns)} placeholder(s) ({shown}) but {len(vals)} value(s) were given; "
            "values fill the placeholders in order of first appearance"
        )
    return dict(zip(columns, vals))


def scalar(function, template, vals=None, fields=None, spec=None):
    """One value: one request to the server."""
    name = f"llm_{function}"
    s = settings()
    mod, Template = modules(s)
    row = bind(name, Template, template, vals, fields)
    try:
        result = client(s).run(template, [row], **call_options(s, function, spec))
    except mod.ServerError as e:
        if s["on_error"] == "null":
            plpy.warning(f"{name}: relserve server error, NULL returned: {e}")
            return None
        server_error(name, e)
    r = result.rows[0]
    if r.error is not None:
        if s["on_error"] == "fail":
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
    extra = json.loads(options) if options else {}
    if not isinstance(extra, dict):
        fail(f"{name}: options must be a jsonb object, e.g. '{{\"max_tokens\": 8}}'")
    on_error = str(extra.pop("on_error", s["on_error"])).lower()
    if on_error not in ("raise", "null", "fail"):
        fail(f"{name}: on_error must be 'raise', 'null' or 'fail', got {on_error!r}")
    try:
        result_rows = plpy.execute(query)
    except plpy.SPIError as e:  # keep the query's own SQLSTATE (42P01 for a missing table, ...)
        fail(f"{name}: the query failed: {e}", getattr(e, "sqlstate", None) or "42000")
    rows = [dict(r) for r in result_rows]
    if not rows:
        return []
    inputs = [json.dumps(r, default=str, ensure_ascii=False) for r in rows]
    try:
        result = client(s).run(template, rows, **call_options(s, function, spec, extra))
    except mod.ServerError as e:
        if on_error != "null":
            server_error(name, e)
        plpy.warning(f"{name}: relserve server error, NULL returned for every row: {e}")
        return [{"ord": i + 1, "answer": None, "error": str(e), "input": text} for i, text in enumerate(inputs)]
    if on_error == "fail":
        bad = next((r for r in result.rows if r.error is not None), None)
        if bad is not None:
            fail(f"{name}: row {bad.index + 1}: {bad.error}", "22000")
    return [{"ord": r.index + 1, "answer": r.value, "error": r.error, "input": text} for r, text in zip(result.rows, inputs)]


class Api:
    pass


api = Api()
api.scalar = scalar
api.over_query = over_query
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
