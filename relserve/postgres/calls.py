"""The SQL functions: ``llm_map(template, VARIADIC values)`` and friends, one request per call,
and ``llm_map_query(template, query, options)`` and friends, ONE relQuery over a query's rows."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from relserve.binding import Binding
from relserve.cascade.report import CascadeReport
from relserve.errors import TemplateError
from relserve.job_stats import JobStats
from relserve.postgres import backend
from relserve.postgres.answers import Accepted, Answer, AnswerStream, Broken, Finished
from relserve.postgres.arguments import options_object, required
from relserve.postgres.errors import DATA_EXCEPTION, QUERY_CANCELED, PgError, raise_as_sql, server_error
from relserve.postgres.settings import CallRequest, call_request
from relserve.postgres.source import read_rows
from relserve.results import RowResult, in_input_order
from relserve.template import Template

WAIT_SLICE_S = 0.1


def scalar(plpy: object, function: str, template: str, vals: object = None, fields: object = None, spec: object = None) -> object:
    """One value of ``llm_<function>``: one request to the server."""
    name = f"llm_{function}"
    try:
        required(name, template=template, **_spec_argument(function, spec))
        request = call_request(name, backend.settings(plpy), function, spec)
        row = bind(name, template, vals, fields)
        rows, error = run(plpy, name, request, template, [row])
        if error is not None:
            if request.on_server_error == "null":
                plpy.warning(f"{name}: relserve server error, NULL returned: {error.message}")
                return None
            raise error
        r = rows[0]
        if r.error is not None:
            if request.on_error == "raise":
                raise PgError(f"{name}: {r.error}", DATA_EXCEPTION)
            plpy.notice(f"{name}: NULL for this row: {r.error}")
            return None
        return as_sql_value(function, r.value)
    except PgError as e:
        raise_as_sql(plpy, e)


def over_query(plpy: object, function: str, template: str, query: str, options: object, spec: object = None) -> list[dict]:
    """Every row of ``query``: ONE relQuery. (ord, answer, error, input) rows in the query's order.

    A list, not a generator: an error then surfaces with its own message, not as a failed iteration."""
    name = f"llm_{function}_query"
    try:
        required(name, template=template, **_spec_argument(function, spec), query=query)
        given = options_object(name, options)
        request = call_request(name, backend.settings(plpy), function, spec, given)
        rows, inputs = read_rows(plpy, name, query)
        if not rows:
            return []
        answers, error = run(plpy, name, request, template, rows)
        if error is not None:
            if request.on_server_error != "null":
                raise error
            reason = error.message.removeprefix(f"{name}: ")
            plpy.warning(f"{name}: relserve server error, NULL returned for every row: {reason}")
            return [{"ord": i + 1, "answer": None, "error": reason, "input": t} for i, t in enumerate(inputs)]
        if request.on_error == "raise":
            bad = next((r for r in answers if r.error is not None), None)
            if bad is not None:
                raise PgError(f"{name}: row {bad.index + 1}: {bad.error}", DATA_EXCEPTION)
        return [{"ord": r.index + 1, "answer": as_sql_value(function, r.value), "error": r.error, "input": t}
                for r, t in zip(answers, inputs)]
    except PgError as e:
        raise_as_sql(plpy, e)


def _spec_argument(function: str, spec: object) -> dict[str, object]:
    """The labels of a classify, the JSON schema of an extract: SQL arguments that must be given."""
    if function == "classify":
        return {"labels": spec}
    if function == "extract":
        return {"json_schema": spec}
    return {}


def as_sql_value(function: str, value: object) -> object:
    # jsonb results go back as JSON text; PL/Python would spell a dict as Python's repr
    if function == "extract" and value is not None and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return value


def bind(name: str, template: str, vals: object, fields: object) -> dict[str, object]:
    """Placeholders take the values in order of first appearance, or by name from a jsonb object
    (relserve.binding: the binding of every surface)."""
    obj = None
    if fields is not None:
        obj = json.loads(fields)
        if not isinstance(obj, dict):
            raise PgError(f"{name}: the jsonb argument must be an object of placeholder values, got {type(obj).__name__}")
    try:
        binding = Binding(Template.parse(template), name)
        values = binding.row(args=list(vals or []), values=obj)
    except TemplateError as e:
        raise PgError(str(e) if str(e).startswith(name) else f"{name}: {e}") from None
    return dict(zip(binding.names, values))


def run(plpy: object, name: str, request: CallRequest, template: str, rows: list[dict]) -> tuple[list[RowResult], PgError | None]:
    """Send ``rows`` as one relQuery and wait for every answer in slices that let PostgreSQL
    interrupt the call; interrupted (or past relserve.timeout) the relQuery is cancelled on the
    server and the interrupt raised again, with PostgreSQL's own error.

    Returns the rows in input order (a row with no answer says so) and the server's error, if any."""
    client = backend.client(plpy, request.timeout_s)
    stream = AnswerStream(client, template, rows, request.call)
    answered: list[RowResult] = []
    end = time.monotonic() + request.timeout_s
    try:
        while True:
            for event in stream.poll(WAIT_SLICE_S):
                if isinstance(event, Answer):
                    answered.append(event.row)
                elif isinstance(event, Broken):
                    return [], server_error(name, event.status, event.message)
                elif isinstance(event, Finished):
                    notice_cascade(plpy, name, event.stats)
                    return in_input_order(answered, len(rows)), None
                elif isinstance(event, Accepted):
                    pass
            backend.check_for_interrupts(plpy)
            if time.monotonic() > end:
                cancel(plpy, stream)
                raise PgError(f"{name}: no answer from the relserve server within relserve.timeout = "
                              f"{request.timeout_s:g} s; its relQuery was cancelled", QUERY_CANCELED,
                              hint="SET relserve.timeout = <seconds> for longer calls")
    except plpy.SPIError:  # a cancel or statement timeout arrived while waiting
        cancel(plpy, stream)
        raise


def notice_cascade(plpy: object, name: str, stats: JobStats | Mapping[str, object]) -> None:
    """A model cascade's figures (sample, audit, threshold, proxy rows, estimated agreement) as a
    NOTICE: what EXPLAIN ANALYZE shows on the other surfaces. ``stats``: the job's, parsed or as sent."""
    stats = stats if isinstance(stats, JobStats) else JobStats.from_json(stats)
    got = stats.cascade
    if got is not None and "rows" in got:
        plpy.notice(f"{name}: model cascade\n{CascadeReport.from_dict(got)}")
    notice_labels(plpy, name, stats)


def notice_labels(plpy: object, name: str, stats: JobStats) -> None:
    """The label method's warning that the answers are close to guesses (the model does not tell
    the rows apart), as a NOTICE naming what to check: a Python warning on the other surfaces."""
    warning = stats.warning
    if warning:
        plpy.notice(f"{name}: {warning.split(': ', 1)[1] if warning.startswith(name) else warning}")


def cancel(plpy: object, stream: AnswerStream) -> None:
    problem = stream.cancel()
    if problem:
        plpy.warning(problem)
