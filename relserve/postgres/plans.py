"""The label plans of the calling role's tenant, from SQL (issue 62): ``relserve.label_plans()``
lists them (a ``pg_stats`` of its ``llm_filter`` / ``llm_classify`` calls), ``relserve.forget_label_plans()``
forgets them and ``relserve.pin_label_plans()`` pins or unpins them, each one request to the
server's ``/v1/label-plans`` with the role's key, as ``relserve plans list|forget|pin`` does for a
process's own plans. The server scopes every request by the key: a role reaches its own tenant's
plans only (they hold worked examples, rows of its tables). One call refreshes its plan with the
option ``'{"label_plan": "refresh"}'`` of a ``*_query`` function instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from relserve.postgres import backend
from relserve.postgres.arguments import required
from relserve.postgres.errors import PgError, raise_as_sql, server_error

if TYPE_CHECKING:
    from relserve.client import Client

T = TypeVar("T")


def _checked_template(name: str, template: str | None) -> None:
    # the endpoint reads no template as "every plan": an empty one is refused, not widened to all
    if template is not None and not template.strip():
        raise PgError(f"{name}: the template is empty (NULL: every plan of the role's tenant)")


def _ask(plpy: object, name: str, ask: Callable[[Client], T]) -> T:
    """One request to the server's ``/v1/label-plans`` with the caller's key; its refusal (or its
    absence) as ``name``'s error."""
    from relserve.client import ServerError

    client = backend.client(plpy, backend.settings(plpy).timeout_s)
    try:
        return ask(client)
    except ServerError as e:
        raise server_error(name, e.status, e.message) from None


def as_row(plan: dict[str, Any]) -> dict[str, object]:
    """One plan of the endpoint's listing as a row of ``relserve.label_plan`` (timestamptz as
    ISO text, jsonb as JSON text: PL/Python would spell a dict as Python's repr)."""
    return {
        "function": plan["function"],
        "template": plan["template"],
        "labels": list(plan["labels"]),
        "model": plan["model"],
        "pinned": bool(plan["pinned"]),
        "created": datetime.fromtimestamp(plan["created"], UTC).isoformat(),
        "id": plan["id"],
        "plan": plan["plan"],
        "detail": json.dumps(plan["detail"], sort_keys=True),
    }


def label_plans(plpy: object, template: str | None) -> list[dict[str, object]]:
    """The role's tenant's kept plans (of ``template``'s calls, or all), the most recently used first."""
    name = "relserve.label_plans"
    try:
        _checked_template(name, template)
        return [as_row(p) for p in _ask(plpy, name, lambda c: c.label_plans(template))]
    except PgError as e:
        raise_as_sql(plpy, e)


def forget_label_plans(plpy: object, template: str | None, pinned: bool | None) -> int:
    """Forget the role's tenant's plans (of ``template``'s calls, or all; ``pinned``: pinned ones
    too); the next statement of each call makes a new one. How many were forgotten."""
    name = "relserve.forget_label_plans"
    try:
        required(name, pinned=pinned)
        _checked_template(name, template)
        return _ask(plpy, name, lambda c: c.forget_label_plans(template, pinned=bool(pinned)))
    except PgError as e:
        raise_as_sql(plpy, e)


def pin_label_plans(plpy: object, template: str | None, unpin: bool | None) -> int:
    """Pin (``unpin``: unpin) the role's tenant's plans of ``template``'s calls: a pinned plan is
    neither refreshed nor forgotten. How many changed."""
    name = "relserve.pin_label_plans"
    try:
        required(name, template=template, unpin=unpin)
        _checked_template(name, template)
        return _ask(plpy, name, lambda c: c.pin_label_plans(template, unpin=bool(unpin)))
    except PgError as e:
        raise_as_sql(plpy, e)
