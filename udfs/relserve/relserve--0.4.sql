-- relserve 0.4: LLM calls over table rows, answered by a relserve server (`relserve serve`).
-- CREATE EXTENSION relserve CASCADE;   (as a superuser: plpython3u is an untrusted language)
-- The llm_* functions go into the extension's schema (the first on search_path, or SCHEMA x);
-- the configuration, the keys and the internal functions live in the schema "relserve".
-- The Python behind every function is the package relserve.postgres; who may do what:
-- "Security" in docs/server-postgres-spreadsheet.md.
\echo Use "CREATE EXTENSION relserve CASCADE" to load this file. \quit

-- The schema belongs to the extension: a schema "relserve" made earlier by anyone makes this fail.
CREATE SCHEMA relserve;
REVOKE ALL ON SCHEMA relserve FROM PUBLIC;
GRANT USAGE ON SCHEMA relserve TO PUBLIC;  -- use, not create: nobody else may put objects here

-- What only a superuser decides. Every role may read it (nothing secret), none but superusers write it.
--   python_path  site-packages folder(s), ':'-separated, where relserve is installed (their .pth files
--                run as the postgres OS user: never a setting)
--   url          the relserve server every call goes to (never a setting: see relserve.url below)
CREATE TABLE relserve.config (
    name text PRIMARY KEY CHECK (name IN ('python_path', 'url')),
    value text NOT NULL CHECK (name <> 'url' OR value ~ '^https?://[^/?#@]+/?$')
);
REVOKE ALL ON relserve.config FROM PUBLIC;
GRANT SELECT ON relserve.config TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('relserve.config', '');

CREATE FUNCTION relserve.configured_url() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT coalesce((SELECT value FROM relserve.config WHERE name = 'url'), 'http://127.0.0.1:8000') $$;

-- Tenant keys by role, like a user mapping's options: only superusers read the table. A key is sent
-- only to the server it was stored for (url, by default the configured one when it was stored).
CREATE TABLE relserve.api_keys (
    role name NOT NULL,
    api_key text NOT NULL,
    url text NOT NULL DEFAULT relserve.configured_url(),
    PRIMARY KEY (role, url)
);
REVOKE ALL ON relserve.api_keys FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('relserve.api_keys', '');

-- A role reads its own rows through this view (a view reads its tables with its owner's rights, but
-- current_user is the caller). security_barrier: a caller's own function in WHERE is not run before
-- the view's filter, so it sees no other role's row.
CREATE VIEW relserve.my_api_key WITH (security_barrier) AS
    SELECT k.api_key, k.url FROM relserve.api_keys k WHERE k.role = current_user;
REVOKE ALL ON relserve.my_api_key FROM PUBLIC;
GRANT SELECT ON relserve.my_api_key TO PUBLIC;

-- The C part: the settings (defined and checked when the library loads: a misspelt relserve.* setting
-- is an error) and the foreign data wrapper.
CREATE FUNCTION relserve.library_version() RETURNS text
AS 'MODULE_PATHNAME', 'relserve_library_version' LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp;

-- Loads the package once per backend, from the superuser's python_path.
CREATE FUNCTION relserve._load() RETURNS void
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $relserve$
import os
import site
import sys
plpy.execute("SELECT relserve.library_version()")
rows = plpy.execute("SELECT value FROM relserve.config WHERE name OPERATOR(pg_catalog.=) 'python_path'")
added = GD.setdefault("relserve.paths", [])
before = list(sys.path)
for entry in (rows[0]["value"] if rows else "").split(":"):
    if entry and not os.access(entry, os.R_OK | os.X_OK):  # checked as the server's OS user
        plpy.error(f"relserve: the python_path folder {entry} cannot be read by the database server's OS user",
                   sqlstate="58000", hint="Every folder from / down to it must be searchable (x) by that user (postgres) "
                   "and its files readable; an editable install's checkout too. Check: sudo -u postgres /usr/bin/python3 "
                   "-c \"import site; site.addsitedir('<folder>'); import relserve.postgres\"")
    if entry and entry not in added:
        site.addsitedir(entry)  # runs the folder's .pth files (editable installs): a superuser's folder only
        added.append(entry)
# the configured folders first, in their order, so their packages win over the system Python's
new = [p for p in sys.path if p not in before]
sys.path[:] = [p for p in added if p in new] + [p for p in new if p not in added] + before
try:
    import relserve.postgres
except (ImportError, OSError) as e:  # OSError: a file of the package the server's OS user cannot read
    plpy.error(f"relserve: cannot import the relserve package ({e})", sqlstate="58000",
               hint="A superuser sets python_path in relserve.config to what <environment>/bin/python -m "
               "relserve.postgres.python_path prints in the Python environment where relserve is installed: "
               "INSERT INTO relserve.config VALUES ('python_path', '/srv/relserve/.venv/lib/python3.11/site-packages') "
               "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value")
GD["relserve"] = relserve.postgres
$relserve$;

-- ---------------------------------------------------------------- scalar functions (one request per call)

-- llm_map('Is {r} positive?', review): placeholders take the values in order of first appearance
CREATE FUNCTION llm_map(template text, VARIADIC vals text[]) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "map", template, vals=vals)
$$;

-- llm_map('Is {review} about {product}?', to_jsonb(r)): placeholders by name
CREATE FUNCTION llm_map(template text, fields jsonb) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "map", template, fields=fields)
$$;

CREATE FUNCTION llm_filter(template text, VARIADIC vals text[]) RETURNS boolean
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "filter", template, vals=vals)
$$;

CREATE FUNCTION llm_filter(template text, fields jsonb) RETURNS boolean
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "filter", template, fields=fields)
$$;

CREATE FUNCTION llm_score(template text, VARIADIC vals text[]) RETURNS double precision
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "score", template, vals=vals)
$$;

CREATE FUNCTION llm_score(template text, fields jsonb) RETURNS double precision
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "score", template, fields=fields)
$$;

CREATE FUNCTION llm_classify(template text, labels text[], VARIADIC vals text[]) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "classify", template, vals=vals, spec=labels)
$$;

CREATE FUNCTION llm_classify(template text, labels text[], fields jsonb) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "classify", template, fields=fields, spec=labels)
$$;

CREATE FUNCTION llm_extract(template text, json_schema jsonb, VARIADIC vals text[]) RETURNS jsonb
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scalar(plpy, "extract", template, vals=vals, spec=json_schema)
$$;

-- ---------------------------------------------------------------- over a query (ONE relQuery for all its rows)
-- No SET search_path on these four: their query is the caller's and is read in the caller's
-- search_path, as a view's text would be; every statement of relserve's own is schema-qualified.

-- SELECT * FROM llm_map_query('Is {review} positive?', 'SELECT id, review FROM reviews', '{"max_tokens": 8}')
-- placeholders name the query's columns; ord is the row's position in the query's result (1-based);
-- input is the row itself, to join back: (input->>'id')::int
CREATE FUNCTION llm_map_query(template text, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer text, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query(plpy, "map", template, query, options)
$$;

CREATE FUNCTION llm_filter_query(template text, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer boolean, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query(plpy, "filter", template, query, options)
$$;

CREATE FUNCTION llm_classify_query(template text, labels text[], query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer text, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query(plpy, "classify", template, query, options, spec=labels)
$$;

CREATE FUNCTION llm_extract_query(template text, json_schema jsonb, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, answer jsonb, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].over_query(plpy, "extract", template, query, options, spec=json_schema)
$$;

-- ---------------------------------------------------------------- the foreign data wrapper
-- A scan reads its source query itself (the caller's rights) and sends each window of rows as one
-- relQuery through these three, which the C code calls directly: no role may call them (EXECUTE is
-- revoked), so no role can make the database send a request to an address or with a key of its own.

CREATE FUNCTION relserve._scan_open(url text, api_key text, kind text, template text, spec text,
                                    options text, rows text) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scan_open(plpy, url, api_key, kind, template, spec, options, rows)
$$;

CREATE FUNCTION relserve._scan_poll(handle text, wait_s float8) RETURNS text[]
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scan_poll(plpy, handle, wait_s)
$$;

CREATE FUNCTION relserve._scan_close(handle text) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].scan_close(plpy, handle)
$$;

-- a query's scalar llm_* calls, batched by the planner hook (batch_calls.c): the functions' own
-- server and the caller's key, as for a call of the scalar function itself
CREATE FUNCTION relserve._batch_open(kind text, template text, spec text, form text, rows text) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].batch_open(plpy, kind, template, spec, form, rows)
$$;

REVOKE EXECUTE ON FUNCTION relserve._scan_open(text, text, text, text, text, text, text),
                           relserve._scan_poll(text, float8), relserve._scan_close(text),
                           relserve._batch_open(text, text, text, text, text) FROM PUBLIC;

CREATE FUNCTION relserve.fdw_handler() RETURNS fdw_handler
AS 'MODULE_PATHNAME', 'relserve_fdw_handler' LANGUAGE C STRICT;

CREATE FUNCTION relserve.fdw_validator(text[], oid) RETURNS void
AS 'MODULE_PATHNAME', 'relserve_fdw_validator' LANGUAGE C STRICT;

-- USAGE on it is a superuser's to grant (CREATE SERVER); a server's url only a superuser sets.
CREATE FOREIGN DATA WRAPPER relserve_fdw HANDLER relserve.fdw_handler VALIDATOR relserve.fdw_validator;

-- ---------------------------------------------------------------- operators past one row (issue 26)
-- Aggregates: the state is a text[] (the template, for llm_topk also k, then the group's non-NULL
-- values); the final function sends the group to the server's /v1/operators endpoint. PostgreSQL
-- calls a final function once per group, so each group is its own request (and relQuery);
-- llm_reduce_query sends every group of a query in one request. The support functions are
-- internal: the aggregates run them with their owner's EXECUTE right, the caller's otherwise.

CREATE FUNCTION relserve._reduce_step(state text[], template text, value text) RETURNS text[]
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT coalesce(state, ARRAY[template]) || CASE WHEN value IS NULL THEN '{}'::text[] ELSE ARRAY[value] END
$$;

CREATE FUNCTION relserve._reduce_final(state text[]) RETURNS text
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].reduce_group(plpy, state)
$$;

-- SELECT stars, llm_reduce('Summarize these reviews:\n{review}', review) FROM reviews GROUP BY stars
CREATE AGGREGATE llm_reduce(template text, value text) (
    SFUNC = relserve._reduce_step, STYPE = text[], FINALFUNC = relserve._reduce_final
);

CREATE FUNCTION relserve._topk_step(state text[], template text, value text, k integer) RETURNS text[]
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT coalesce(state, ARRAY[template, k::text]) || CASE WHEN value IS NULL THEN '{}'::text[] ELSE ARRAY[value] END
$$;

CREATE FUNCTION relserve._topk_final(state text[]) RETURNS text[]
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].topk_group(plpy, state)
$$;

-- SELECT llm_topk('Is this review enthusiastic? {review}', review, 3) FROM reviews  -> text[], best first
CREATE AGGREGATE llm_topk(template text, value text, k integer) (
    SFUNC = relserve._topk_step, STYPE = text[], FINALFUNC = relserve._topk_final
);

REVOKE EXECUTE ON FUNCTION relserve._reduce_step(text[], text, text), relserve._reduce_final(text[]),
                           relserve._topk_step(text[], text, text, integer), relserve._topk_final(text[]) FROM PUBLIC;

-- every group of a query in ONE request (one relQuery per level of the reduction for all groups):
-- SELECT * FROM llm_reduce_query('Summarize:\n{review}', 'SELECT stars, review FROM reviews')
-- the placeholder names the column of values; the other columns are the group (grp, as jsonb).
-- No SET search_path: the query is the caller's, read in the caller's search_path (as llm_map_query).
CREATE FUNCTION llm_reduce_query(template text, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (grp jsonb, answer text, error text)
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].reduce_query(plpy, template, query, options)
$$;

-- ---------------------------------------------------------------- knowing before running, budgets (issue 47)
-- A role's budget ceiling, set by a superuser: no call of the role may ask for more engine tokens
-- (max_tokens_total) or seconds (max_seconds) than its row says, whatever its settings
-- (SET relserve.max_tokens_total = ...) or a *_query call's options ask; a role lowers its own
-- budget, never raises it past the ceiling. role '*': every role without a row of its own.
-- Only superusers write it; a role reads its own row (and the '*' row) through the view below.
CREATE TABLE relserve.budget_limits (
    role name PRIMARY KEY,
    max_tokens_total bigint CHECK (max_tokens_total > 0),
    max_seconds double precision CHECK (max_seconds > 0 AND max_seconds < 'infinity')
);
REVOKE ALL ON relserve.budget_limits FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('relserve.budget_limits', '');

CREATE VIEW relserve.my_budget_limit WITH (security_barrier) AS
    SELECT b.role = current_user AS own, b.max_tokens_total, b.max_seconds
    FROM relserve.budget_limits b WHERE b.role = current_user OR b.role = '*';
REVOKE ALL ON relserve.my_budget_limit FROM PUBLIC;
GRANT SELECT ON relserve.my_budget_limit TO PUBLIC;

-- llm_count_tokens('Summarize: {r}', review): the row's prompt tokens as the server's engine sees
-- them (chat template, system message, answer line), as llm_map's prompt; options name another
-- function's: llm_count_tokens('Is {r} positive?', jsonb_build_object('r', review), '{"function": "filter"}')
CREATE FUNCTION llm_count_tokens(template text, VARIADIC vals text[]) RETURNS integer
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].count_tokens(plpy, template, vals=vals)
$$;

CREATE FUNCTION llm_count_tokens(template text, fields jsonb, options jsonb DEFAULT '{}') RETURNS integer
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].count_tokens(plpy, template, fields=fields, options=options)
$$;

-- every row of a query in one request; no SET search_path: the query is the caller's
CREATE FUNCTION llm_count_tokens_query(template text, query text, options jsonb DEFAULT '{}')
RETURNS TABLE (ord bigint, prompt_tokens integer, error text, input jsonb)
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].count_tokens_query(plpy, template, query, options)
$$;

-- what ONE relQuery over the query's rows would cost, without running it: the engine's prompt
-- tokens, the most answer tokens, the seconds alone and behind the server's work now, and the
-- budget it would run under (jsonb); options as llm_count_tokens's
CREATE FUNCTION llm_estimate_query(template text, query text, options jsonb DEFAULT '{}') RETURNS jsonb
LANGUAGE plpython3u AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].estimate_query(plpy, template, query, options)
$$;

-- ---------------------------------------------------------------- label plans (issue 62)
-- The label plans of the calling role's tenant, kept by the server (an llm_filter / llm_classify
-- call's layout, worked examples and decision boundary, made from its first rows, like the
-- statistics ANALYZE keeps): listed, forgotten, pinned or unpinned, each a request to the
-- server's /v1/label-plans with the caller's key. The server scopes them by the key: a role sees
-- and changes its own tenant's plans only. One call refreshes its own plan with the option
-- '{"label_plan": "refresh"}' of a *_query function.

-- one kept plan: its call (function, template, labels), the model, whether pinned, when made, its
-- id (what the result cache keys the call's answers by), how it decides rows (plan) and the plan itself
CREATE TYPE relserve.label_plan AS (
    function text, template text, labels text[], model text, pinned boolean, created timestamptz,
    id text, plan text, detail jsonb
);

-- SELECT template, pinned, plan FROM relserve.label_plans();   (template: only that template's calls)
CREATE FUNCTION relserve.label_plans(template text DEFAULT NULL) RETURNS SETOF relserve.label_plan
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].label_plans(plpy, template)
$$;

-- forget plans (pinned: pinned ones too): the next statement of each call makes a new one; how many
CREATE FUNCTION relserve.forget_label_plans(template text DEFAULT NULL, pinned boolean DEFAULT false) RETURNS integer
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].forget_label_plans(plpy, template, pinned)
$$;

-- pin (unpin => true: unpin) the plans of a template's calls: a pinned plan is neither refreshed
-- (the call is refused) nor forgotten; how many changed
CREATE FUNCTION relserve.pin_label_plans(template text, unpin boolean DEFAULT false) RETURNS integer
LANGUAGE plpython3u SET search_path = pg_catalog, pg_temp AS $$
if "relserve" not in GD: plpy.execute("SELECT relserve._load()")
return GD["relserve"].pin_label_plans(plpy, template, unpin)
$$;
