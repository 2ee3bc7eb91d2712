"""Which ``relserve.*`` values a call reads inside a ``SECURITY DEFINER`` function (issue 63).

A definer function's ``llm_*`` call goes out with its owner's key and under its owner's budget
ceiling, so the caller must not choose how it runs: its system message, examples, ``max_tokens``,
cache or budget. PostgreSQL gives a caller's ``SET`` and the function's own ``SET`` clauses the same
source, so the extension's library keeps with each value the role that was current when it was
set (udfs/relserve/settings.c), and ``relserve.chosen_by_others`` names the settings whose value
another role chose.

Inside a call where ``current_user`` is not the session's role (the login role, or the role of
``SET ROLE``): a definer context. There a setting applies only if the definer chose it (a ``SET``
clause of its function, a ``set_config`` in its body) or nobody did (the defaults, the server's
configuration files, ``ALTER DATABASE ... SET``, ``ALTER ROLE ALL SET``). A value the caller chose
(its ``SET``, its ``set_config``, its own role's defaults, its connection options) is ignored and
the definer's own defaults take its place, as a session of the definer would start with them:
``ALTER ROLE definer IN DATABASE db SET``, else ``ALTER ROLE definer SET``, else ``ALTER DATABASE db
SET``, else ``ALTER ROLE ALL SET``; with none of them the setting is unset (relserve's default).
With a library older than this Python (``relserve.chosen_by_others`` missing: reinstall it), every
value is treated as the caller's, the function's ``SET`` clauses too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: what the settings row holds besides the values: whether the call runs in a definer context,
#: and the settings another role chose (NULL with a library that does not know)
CONTEXT_COLUMNS = (
    "pg_catalog.current_setting('relserve.chosen_by_others', true) AS chosen_by_others",
    "(current_user::pg_catalog.text OPERATOR(pg_catalog.<>) CASE "
    "WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none' THEN session_user::pg_catalog.text "
    "ELSE pg_catalog.current_setting('role') END) AS in_definer",
)

#: the definer's defaults and the database's, as a session of the definer would start with them:
#: (role-specific, database-specific, 'relserve.name=value')
DEFAULTS_SQL = """
SELECT s.setrole OPERATOR(pg_catalog.<>) 0 AS for_role, s.setdatabase OPERATOR(pg_catalog.<>) 0 AS for_database, c.setting
FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) AS c(setting)
WHERE s.setrole OPERATOR(pg_catalog.=) ANY (ARRAY[0::pg_catalog.oid,
        (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user)])
  AND s.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0::pg_catalog.oid,
        (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())])
  AND c.setting OPERATOR(pg_catalog.~~) 'relserve.%'
"""


def chosen_by_others(row: Mapping[str, object], names: Iterable[str]) -> frozenset[str] | None:
    """The settings a call must not read as they are (None: it reads every one). Outside a
    definer context, none; inside, those another role chose, or every one when the library
    cannot tell."""
    if not row.get("in_definer"):
        return None
    listed = row.get("chosen_by_others")
    if listed is None:
        return frozenset(names)
    return frozenset(n for n in str(listed).split(",") if n)


def definer_defaults(rows: Iterable[Mapping[str, object]]) -> dict[str, str]:
    """The definer's defaults by name (without the ``relserve.`` prefix), PostgreSQL's order of
    precedence applied: its role in this database, its role, this database, every role."""
    rank = {(True, True): 0, (True, False): 1, (False, True): 2, (False, False): 3}
    best: dict[str, tuple[int, str]] = {}
    for r in rows:
        name, _, value = str(r["setting"]).partition("=")
        name = name.removeprefix("relserve.")
        order = rank[(bool(r["for_role"]), bool(r["for_database"]))]
        if name not in best or order < best[name][0]:
            best[name] = (order, value)
    return {name: value for name, (_, value) in best.items()}


def as_the_definer_chose(row: Mapping[str, object], ignored: frozenset[str], defaults: Mapping[str, str]) -> dict[str, object]:
    """The settings row with each ignored value replaced by the definer's default (or unset)."""
    out = dict(row)
    for name in ignored:
        if name in out:
            out[name] = defaults.get(name)
    return out
