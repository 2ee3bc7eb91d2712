"""Who may set which budget in PostgreSQL (issue 47).

* A role sets its own budget for a session (``SET relserve.max_tokens_total = 5000``,
  ``relserve.max_seconds``, ``relserve.on_budget``) or for one ``*_query`` call (its options).
* A superuser sets each role's ceiling in ``relserve.budget_limits`` (a row per role, or ``'*'``
  for every role, field by field where the role's own row leaves a field NULL), which only
  superusers write and each role reads only its own row of (the view ``relserve.my_budget_limit``).
  A call's budget is the smaller of the two: a role can lower its budget, never raise it past its
  ceiling, whatever its settings or options (the operators' included). Without a setting the
  ceiling is the budget; what happens at it is the role's ``on_budget``.
* The server's tenant a role's key names may have its own ``max_tokens_per_day`` (the tenants
  file of ``relserve serve``), which the server holds whatever the database sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: the budget settings a superuser's ceiling bounds
LIMITED = ("max_tokens_total", "max_seconds")


def ceilings_of(rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """The caller's ceilings from ``relserve.my_budget_limit``'s rows, field by field: the role's
    own row's value where it sets one (``own``), else the ``'*'`` row's. So a role row that only
    sets ``max_seconds`` keeps the token ceiling every role has."""
    own = [r for r in rows if r.get("own")]
    every = [r for r in rows if not r.get("own")]
    out: dict[str, object] = {}
    for name in LIMITED:
        for row in (*own, *every):
            if row.get(name) is not None:
                out[name] = row[name]
                break
    return out


def within_ceilings(chosen: Mapping[str, object], ceilings: Mapping[str, object]) -> dict[str, object]:
    """``chosen`` options with each budget no larger than its ceiling (the ceiling itself when
    the role chose none)."""
    out = dict(chosen)
    for name, limit in ceilings.items():
        asked = out.get(name)
        out[name] = limit if asked is None else min(asked, limit)
    return out
