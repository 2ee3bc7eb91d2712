"""Python of the relserve PostgreSQL extension (``CREATE EXTENSION relserve``).

The extension's SQL functions are three lines each: they load this package once per backend
(``relserve._load()``, from the superuser's ``relserve.config``) and call one function here with
``plpy`` passed in, as pgai does. Nothing here imports ``plpy``: the code is linted and unit-tested
with a fake one (tests/test_postgres_unit.py), and tested for real on a PostgreSQL cluster.

- ``calls``: the scalar functions (``llm_map(...)``) and the ``*_query`` functions.
- ``foreign_scan``: what the C part calls to send a window of rows as one relQuery and to read
  its answers as they finish: a foreign table's source rows, or a query's scalar ``llm_*`` calls
  (batched by the planner hook in udfs/relserve/batch_calls.c).
- ``operators``: ``llm_reduce`` / ``llm_topk`` aggregates and ``llm_reduce_query`` (issue 26),
  each call one request to the server's /v1/operators endpoints.
- ``settings``: the ``relserve.*`` settings, the options vocabulary (DuckDB's ``llm_options``
  names) and the superuser's configuration (server address, keys).
- ``estimates``: ``llm_count_tokens`` and ``llm_estimate_query``, what a call would cost before it runs,
  and ``budgets``: who may set which budget (issue 47).
- ``plans``: ``relserve.label_plans()``, ``relserve.forget_label_plans()`` and
  ``relserve.pin_label_plans()``, the role's tenant's label plans on the server (issue 62).
- ``answers``: the one loop that reads a relQuery's answer stream in a thread while the backend
  checks for interrupts.
- ``python_path``: ``python -m relserve.postgres.python_path`` prints the ``python_path`` a
  superuser stores for the environment it runs in (the install steps in the docs).
"""

from relserve.postgres.calls import over_query, scalar
from relserve.postgres.estimates import count_tokens, count_tokens_query, estimate_query
from relserve.postgres.foreign_scan import batch_open, scan_close, scan_open, scan_poll
from relserve.postgres.operators import reduce_group, reduce_query, topk_group
from relserve.postgres.plans import forget_label_plans, label_plans, pin_label_plans

__all__ = ["batch_open", "count_tokens", "count_tokens_query", "estimate_query", "forget_label_plans", "label_plans",
           "over_query", "pin_label_plans", "reduce_group", "reduce_query", "scalar", "scan_close", "scan_open", "scan_poll",
           "topk_group"]
