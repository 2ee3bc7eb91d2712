"""``llm_reduce`` and ``llm_topk`` in DuckDB: list-taking scalar functions plus a rewrite.

DuckDB's Python API has no aggregate UDFs, so the operators are scalar functions over a LIST:
``llm_reduce(template, list(value))`` and ``llm_topk(template, list(value), k)``. DuckDB hands a
scalar function a chunk of up to 2,048 rows at once, and after ``GROUP BY`` a row is a group, so
one call sees every group of the chunk and each level of a reduction is ONE relQuery for all of
them. On a plain connection users write the ``list()`` form; ``relserve.duckdb.sql`` (and
``explain``) also accept the aggregate form ``llm_reduce(template, value)`` and rewrite it to
``llm_reduce(template, ARRAY_AGG(value))`` (``rewrite``); an argument that is already an aggregate
(``list(v ORDER BY t)``) is left as written, so users can order a group's values. There a list
aggregate is also passed through ``relserve_prompt_values(...)`` (``values_macro_sql``), so a
value whose Arrow form is not the value reaches the prompt as DuckDB writes it, as a row
function's argument does (``udf.AS_TEXT_TYPES``).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Generic, TypeVar

import duckdb
import pyarrow as pa

from relserve.cell_values import Unreadable, arrow_values
from relserve.duckdb_ext import planned_sql
from relserve.duckdb_ext.arguments import hashable_key, opaque_type, option_values
from relserve.duckdb_ext.params import Params
from relserve.duckdb_ext.script import read_script
from relserve.duckdb_ext.statement import quiet_sqlglot
from relserve.duckdb_ext.udf import as_text_test, create_function
from relserve.errors import ConfigError, RelServeError
from relserve.functions import FUNCTIONS
from relserve.operators.reduce import ReduceCall, ReduceExplain, explain_reduce, reduce_call, run_reduce
from relserve.operators.topk import TopKCall, run_topk, topk_call
from relserve.operators.values import Group

OPERATORS = ("llm_reduce", "llm_topk")
#: the options a reduction or top-k takes from the connection's defaults
_DEFAULT_KEYS = ("model", "max_tokens", "system", "on_error")
_MARKER = "__llm_options__"
#: the macro ``rewrite`` passes a group's values through, and the fields of each value it gives:
#: the value, or NULL where its type is one of ``udf.AS_TEXT_TYPES``; then its text there, or NULL
VALUES_MACRO = "relserve_prompt_values"
_VALUE, _TEXT = "relserve_value", "relserve_text"

#: what makes rows share one operator run: template, options (sorted items), and k for top-k
CallKey = tuple[str | None, tuple[tuple[str, object], ...], object]
SpecT = TypeVar("SpecT", ReduceCall, TopKCall)  # the operator call the rows share
ValueT = TypeVar("ValueT")  # one group's answer: a reduce's text, a top-k's list
#: EXPLAIN of one run: a reduction's, or one top-k group's rounds
OperatorPlan = ReduceExplain | dict[str, object]


def rewrite(query: str) -> str:
    """The aggregate form as the list form; raises for a statement that mixes an operator with
    row-level calls (their planned passes would run the operator on stand-in answers)."""
    import sqlglot
    from sqlglot import exp

    try:
        with quiet_sqlglot():
            trees = sqlglot.parse(query, dialect="duckdb")
    except Exception:
        return query  # DuckDB will say what is wrong with it
    out = []
    for tree in trees:
        if tree is None:
            continue
        calls = [n for n in tree.find_all(exp.Anonymous)]
        ops = [n for n in calls if str(n.name).lower() in OPERATORS]
        rows = sorted({str(n.name).lower() for n in calls if str(n.name).lower() in FUNCTIONS})
        if ops and rows:
            raise ConfigError(
                f"{', '.join(sorted({str(n.name).lower() for n in ops}))} cannot share a statement with "
                f"{', '.join(rows)}: run the row-level calls first (CREATE TABLE ... AS SELECT ...), then aggregate"
            )
        for node in ops:
            args = node.expressions
            if len(args) >= 2 and not isinstance(args[1], exp.AggFunc):
                args[1].replace(exp.ArrayAgg(this=args[1].copy()))
                args = node.expressions
            if len(args) >= 2 and isinstance(args[1], exp.ArrayAgg):
                args[1].replace(exp.Anonymous(this=VALUES_MACRO, expressions=[args[1].copy()]))
        out.append(tree.sql(dialect="duckdb"))
    return ";\n".join(out)


# -- the functions ------------------------------------------------------------------------------


def _column(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _split_options(arrays: list[pa.Array]) -> tuple[list[pa.Array], list[dict | None] | None]:
    last = _column(arrays[-1]) if arrays else None
    if last is not None and pa.types.is_struct(last.type) and any(f.name == _MARKER for f in last.type):
        opts = [None if o is None else {k: v for k, v in option_values(o).items() if v is not None}
                for o in last.to_pylist()]
        return arrays[:-1], opts
    return arrays, None


def _whole(value: object) -> object:
    """A whole number as SQL may hand it over ('3', 3.0, DECIMAL 3) as an int; any other value as
    it is, for the operator's own check to refuse by name."""
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        return value
    return int(number) if number.is_finite() and number == number.to_integral_value() else value


def values_macro_sql() -> str:
    """The macro ``rewrite`` passes a group's list through: each value beside its text where its
    type is one of ``udf.AS_TEXT_TYPES`` (``_group_values`` takes the text there)."""
    test = as_text_test("x")
    return (f"CREATE OR REPLACE TEMP MACRO {VALUES_MACRO}(l) AS list_transform(l, lambda x: "
            f"{{'{_VALUE}': CASE WHEN {test} THEN NULL ELSE x END, '{_TEXT}': CASE WHEN {test} THEN CAST(x AS VARCHAR) END}})")


def _list_column(array: pa.Array | pa.ChunkedArray, who: str) -> pa.Array:
    """An operator's values argument, which must be a list per group."""
    column = _column(array)
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise ConfigError(f"{who}: the values must be a list (list(column) on a plain connection), got {column.type}")
    return column


def _group_values(array: pa.Array | pa.ChunkedArray, who: str) -> list[Group]:
    """Each group's values as the row functions read theirs: an interval at any depth as DuckDB
    writes it (``arrow_values``), a value ``VALUES_MACRO`` gave a text as that text; values that
    reach Python as opaque bytes (a BIGNUM in ``list(v)``, or inside a STRUCT) are refused."""
    column = _list_column(array, who)
    element = column.type.value_type
    wrapped = pa.types.is_struct(element) and sorted(f.name for f in element) == sorted((_VALUE, _TEXT))
    inner = element.field(_VALUE).type if wrapped else element
    found = opaque_type(inner)
    if found is not None and not (wrapped and found[1]):  # (wrapped: that value is its text)
        opaque, whole = found
        held = "are" if whole else "hold values of"
        raise ConfigError(f"{who}: the values {held} DuckDB's {opaque.upper()}, which reaches Python as opaque "
                          "bytes; cast them to VARCHAR")
    groups = arrow_values(column)
    for group in groups:
        if isinstance(group, Unreadable):
            raise ConfigError(f"{who}: a group's values {group.why}")
    if not wrapped:
        return groups
    return [None if g is None else [None if v is None else v[_TEXT] if v[_TEXT] is not None else v[_VALUE] for v in g]
            for g in groups]


def _group_key(group: Group) -> Hashable:
    """A group (a list of values, or NULL) as a dict key."""
    try:
        return hashable_key(tuple(group) if group is not None else None)
    except TypeError:  # not a list at all
        return json.dumps(group, sort_keys=True, default=str)


class _Operator(Generic[SpecT, ValueT]):
    """Shared by both functions: the connection's defaults, options per row, and the passes.

    DuckDB may hand a function the groups of one GROUP BY in several chunks (one per hash
    partition and thread), so one call per chunk would split a level into several relQueries.
    ``relserve.duckdb.sql`` therefore runs the statement twice, as the row-level planner does:
    a "collect" pass in which the function records every group and returns NULL, then ONE run
    per call over all recorded groups, then an "answer" pass that returns the answers. On a plain
    connection the mode stays "inline": each chunk runs as it comes.
    """

    name = ""
    #: the SQL arguments the function takes (llm_options(...) aside) and how it says so when
    #: it gets another number of them
    arity = 0
    usage = ""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        from relserve.duckdb_ext.connections import session_of

        self.session = session_of(con)
        self.mode = "inline"
        self.lock = threading.Lock()
        #: call key -> (operator call, group key -> group), recorded in the collect pass
        self.pending: dict[CallKey, tuple[SpecT, dict[Hashable, Group]]] = {}
        #: call key -> group key -> (value, error)
        self.answers: dict[CallKey, dict[Hashable, tuple[ValueT | None, str | None]]] = {}

    def _options(self, row_options: dict[str, object] | None) -> dict[str, object]:
        d = self.session.defaults
        base = {k: getattr(d, k) for k in _DEFAULT_KEYS}
        base.update(row_options or {})
        return {k: v for k, v in base.items() if v is not None}

    def _arguments(self, arrays: Sequence[pa.Array]) -> tuple[list[pa.Array], list[dict | None] | None]:
        """The argument columns and the options per row, the number of arguments checked."""
        values, options = _split_options(list(arrays))
        if len(values) != self.arity:
            raise ConfigError(f"{self.usage}, got {len(values)} arguments")
        return values, options

    def _answers(self, templates: list[str | None], options: list[dict | None] | None, groups: list[Group],
                 extra: list[object] | None = None) -> list[ValueT | None]:
        """One value per row: rows that share a call are resolved together, each over its group."""
        out: list[ValueT | None] = [None] * len(templates)
        for key, rows in self._by_call(templates, options, extra).items():
            template, opts, extra_arg = key
            spec = self._spec(template, extra_arg, self._options(dict(opts)), len(rows))
            if spec is None:
                continue
            for r, (value, _) in zip(rows, self._resolve(key, spec, [groups[r] for r in rows])):
                out[r] = value
        return out

    def _spec(self, template: str | None, extra: object, options: dict[str, object], rows: int) -> SpecT | None:
        """The operator call for ``rows`` rows that share template, options and extra argument,
        or None when those rows get NULL."""
        raise NotImplementedError

    def _by_call(self, templates: list[str | None], options: list[dict | None] | None,
                 extra: list[object] | None = None) -> dict[CallKey, list[int]]:
        """Rows that share template, options (and k): one operator run per such set."""
        groups: dict[CallKey, list[int]] = {}
        for r, t in enumerate(templates):
            o = options[r] if options is not None else None
            key = (t, tuple(sorted((o or {}).items())), extra[r] if extra is not None else None)
            groups.setdefault(key, []).append(r)
        return groups

    def _resolve(self, key: CallKey, spec: SpecT, groups: list[Group]) -> list[tuple[ValueT | None, str | None]]:
        """(value, error) per group: recorded in the collect pass, else known or run now."""
        keys = [_group_key(g) for g in groups]
        with self.lock:
            if self.mode == "collect":
                bucket = self.pending.setdefault(key, (spec, {}))[1]
                for k, g in zip(keys, groups):
                    bucket.setdefault(k, g)
                return [(None, None)] * len(groups)
            known = self.answers.setdefault(key, {})
            missing = {k: g for k, g in zip(keys, groups) if k not in known}
        if missing:
            results = self._run(spec, list(missing.values()))
            with self.lock:
                known.update(zip(missing.keys(), results))
        return [known[k] for k in keys]

    def flush(self) -> None:
        """Run every call recorded in the collect pass, each over all of its groups at once."""
        with self.lock:
            todo, self.pending = self.pending, {}
        for key, (spec, bucket) in todo.items():
            results = self._run(spec, list(bucket.values()))
            with self.lock:
                self.answers.setdefault(key, {}).update(zip(bucket.keys(), results))

    def explain_pending(self) -> list[OperatorPlan | list[OperatorPlan]]:
        with self.lock:
            todo, self.pending = self.pending, {}
        return [self._explain(spec, list(bucket.values())) for spec, bucket in todo.values()]

    def reset(self) -> None:
        with self.lock:
            self.mode, self.pending, self.answers = "inline", {}, {}

    def _record(self, template: str, errors: Sequence[tuple[str, str | None]]) -> None:
        from relserve.duckdb_ext.session import RowFailure

        with self.session.lock:
            for args, err in errors:
                if err is not None:
                    self.session.failures.append(RowFailure(self.name, template, args, err))

    def _run(self, spec: SpecT, groups: list[Group]) -> list[tuple[ValueT | None, str | None]]:
        raise NotImplementedError

    def _explain(self, spec: SpecT, groups: list[Group]) -> OperatorPlan | list[OperatorPlan]:
        raise NotImplementedError


def _shown(group: Group) -> str:
    values = [v for v in (group or []) if v is not None]
    text = json.dumps({"values": len(values), "first": values[0] if values else None}, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


class ReduceFunction(_Operator[ReduceCall, str]):
    """``llm_reduce(template, list [, llm_options(...)])`` -> VARCHAR, one value per group."""

    name = "llm_reduce"
    arity = 2
    usage = (
        "llm_reduce(template, values [, llm_options(...)]) takes a template and the group's values "
        "(in relserve.duckdb.sql: a column; on a plain connection: list(column))"
    )

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        values, options = self._arguments(arrays)
        templates = _column(values[0]).to_pylist()
        return pa.array(self._answers(templates, options, _group_values(values[1], self.name)), pa.string())

    def _spec(self, template: str | None, extra: object, options: dict[str, object], rows: int) -> ReduceCall | None:
        if template is None:
            self._record("", [("{}", "llm_reduce: the template is NULL in this row")] * rows)
            return None
        return reduce_call(template, **options)

    def _run(self, rc: ReduceCall, groups: list[Group]) -> list[tuple[str | None, str | None]]:
        # the connection's result cache (connect(cache=False): none), as its row functions use it
        cache = getattr(self.session.runner, "cache", None)
        outcome = run_reduce(rc, groups, engine=self.session.engine, progress=self.session.progress,
                             cache=True if cache is None else cache)
        self._record(rc.call.template.source, [(_shown(g), e) for g, e in zip(groups, outcome.errors)])
        return list(zip(outcome.values, outcome.errors))

    def _explain(self, rc: ReduceCall, groups: list[Group]) -> ReduceExplain:
        return explain_reduce(rc, groups, engine=self.session.engine)


class TopKFunction(_Operator[TopKCall, list[str]]):
    """``llm_topk(template, list, k [, llm_options(...)])`` -> VARCHAR[], best first."""

    name = "llm_topk"
    arity = 3
    usage = (
        "llm_topk(template, values, k [, llm_options(...)]) takes a template, the values (a column in "
        "relserve.duckdb.sql, list(column) on a plain connection) and k"
    )

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        values, options = self._arguments(arrays)
        templates = _column(values[0]).to_pylist()
        lists = [v or [] for v in _group_values(values[1], self.name)]
        ks = _column(values[2]).to_pylist()
        return pa.array(self._answers(templates, options, lists, ks), pa.list_(pa.string()))

    def _spec(self, template: str | None, k: object, options: dict[str, object], rows: int) -> TopKCall | None:
        if template is None or k is None:
            return None
        return topk_call(template, _whole(k), **options)

    def _run(self, tc: TopKCall, groups: list[Group]) -> list[tuple[list[str] | None, str | None]]:
        results = []
        for group in groups:  # each group's rounds are its own relQueries
            outcome = run_topk(tc, group, engine=self.session.engine, progress=self.session.progress)
            self._record(tc.score.template.source, [(_shown([group[i]]), e) for i, e in enumerate(outcome.errors)])
            results.append(([v if isinstance(v, str) else str(v) for v in outcome.values], None))
        return results

    def _explain(self, tc: TopKCall, groups: list[Group]) -> list[OperatorPlan]:
        from relserve.operators.topk import explain_topk

        return [explain_topk(tc, g) for g in groups]


_functions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def install(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Register ``llm_reduce`` and ``llm_topk`` on ``con`` (the row-level functions too, if not yet)."""
    functions = (ReduceFunction(con), TopKFunction(con))
    _functions[con] = functions
    for name, udf, returns in (
        ("llm_reduce", functions[0], "VARCHAR"),
        ("llm_topk", functions[1], "VARCHAR[]"),
    ):
        create_function(con, name, _raising(udf), returns, replace=True)
    con.execute(values_macro_sql())
    return con



def _raising(udf: Callable[..., pa.Array]) -> Callable[..., pa.Array]:
    """Errors surface as relserve's own (DuckDB wraps them; ``sql`` unwraps via ``last_error``)."""

    def call(*arrays: pa.Array) -> pa.Array:
        try:
            return udf(*arrays)
        except RelServeError as e:
            _last_error.value = e
            raise

    return call


class _LastError:
    # DuckDB runs a UDF on its own threads: the error is kept per connection call, not per thread
    value: BaseException | None = None


_last_error = _LastError()


def ensure_installed(con: duckdb.DuckDBPyConnection) -> tuple[_Operator, ...]:
    """The connection's operator functions, registered now if they are not yet."""
    found = _functions.get(con)
    if found is None:
        install(con)
        found = _functions[con]
    return found


def run_sql(con: duckdb.DuckDBPyConnection, query: str, params: Params = None) -> duckdb.DuckDBPyRelation | None:
    """``relserve.duckdb.sql`` for a statement with an operator: rewritten, then run in two
    passes (collect every group, run each call once over all of them, answer)."""
    functions = ensure_installed(con)
    text = rewrite(query)
    _last_error.value = None
    try:
        for f in functions:
            f.reset()
            f.mode = "collect"
        rel = planned_sql.sql(con, read_script(text), params)
        if rel is not None:
            rel.materialize()
        for f in functions:
            f.flush()
            f.mode = "answer"
        session = functions[0].session
        with session.lock:
            failed = list(session.failures)  # the groups that failed in flush()
        rel = planned_sql.sql(con, read_script(text), params)  # (which starts a fresh error log: put them back)
        with session.lock:
            session.failures.extendleft(reversed(failed))
        # materialized now, once: a lazy relation would run the functions again at every
        # fetch (outside these passes), and their errors would surface later, wrapped by DuckDB;
        # held by DuckDB, not passed through Arrow, whose form of some types is not the value
        return rel.materialize() if rel is not None else None
    except duckdb.Error:
        err, _last_error.value = _last_error.value, None
        if err is not None:
            raise err.with_traceback(None) from None
        raise
    finally:
        for f in functions:
            f.reset()


@dataclass
class OperatorExplain:
    """EXPLAIN of a statement's ``llm_reduce`` / ``llm_topk`` calls (nothing runs on the engine)."""

    statement: str
    items: list[OperatorPlan]

    def to_dict(self) -> dict[str, object]:
        return {"statement": self.statement,
                "operators": [i.to_dict() if isinstance(i, ReduceExplain) else {"llm_topk": i} for i in self.items]}

    def __str__(self) -> str:
        lines = [f"LLM EXPLAIN: {len(self.items)} operator call(s)"]
        for item in self.items:
            if isinstance(item, ReduceExplain):
                lines.extend("   " + line for line in str(item).splitlines())
            else:
                lines.append(f"   llm_topk: {item['rows']} rows, k={item['k']}, rounds: "
                             + ", ".join(f"{r['name']} {r['prompts']} prompts" for r in item["rounds"])
                             + f" (all pairs would be {item['all_pairs_prompts']})")
        return "\n".join(lines)


def explain_sql(con: duckdb.DuckDBPyConnection, query: str, params: Params = None) -> OperatorExplain:
    """One collect pass, then the EXPLAIN of each operator call over all its groups."""
    functions = ensure_installed(con)
    text = rewrite(query)
    try:
        for f in functions:
            f.reset()
            f.mode = "collect"
        rel = con.sql(text, params=params) if params is not None else con.sql(text)
        if rel is not None:
            rel.fetchall()
        items: list[OperatorPlan] = []
        for f in functions:
            for item in f.explain_pending():
                items.extend(item if isinstance(item, list) else [item])
    finally:
        for f in functions:
            f.reset()
    return OperatorExplain(query, items)
