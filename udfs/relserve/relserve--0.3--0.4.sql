-- relserve 0.3 -> 0.4: ALTER EXTENSION relserve UPDATE (as a superuser). What 0.4 adds to 0.3:
-- llm_score, llm_count_tokens(_query), llm_estimate_query, the budget ceilings of roles
-- (relserve.budget_limits, relserve.my_budget_limit), a loader that names an unreadable
-- python_path folder, and the role's label plans (relserve.label_plans, relserve.forget_label_plans,
-- relserve.pin_label_plans). Nothing of 0.3 is dropped; the superuser's configuration rows stay.
\echo Use "ALTER EXTENSION relserve UPDATE TO '0.4'" to load this file. \quit

-- Loads the package once per backend, from the superuser's python_path.
CREATE OR REPLACE FUNCTION relserve._load() RETURNS void
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
