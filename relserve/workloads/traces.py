"""relQuery serving traces: a seeded generator, and a JSON Lines writer and reader.

One relQuery per line::

    {"id": "rq00000", "arrival_s": 0.81, "template": "... {review} ...", "max_tokens": 5,
     "rows": [{"review": "..."}, ...], "type": "filtering", "table": "rotten_tomatoes"}

Extra keys (``type``, ``table``, anything else) are kept. The reader accepts any file in this
format, whoever wrote it, and names the file, the line and the problem for a bad line.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

from relserve.errors import ConfigError, RelServeError, TemplateError
from relserve.template import Template
from relserve.workloads.queries import LONG_MAX_TOKENS, LONG_TEMPLATES, QuerySpec, QueryType, queries_for
from relserve.workloads.tables import load_table


class TraceFormatError(RelServeError, ValueError):
    """A trace file line is not a valid relQuery record."""


class TraceQuery(BaseModel):
    """One relQuery of a trace: a template, its rows, when it arrives and its output limit."""

    model_config = ConfigDict(extra="allow")

    id: StrictStr = Field(min_length=1)
    arrival_s: float = Field(ge=0, allow_inf_nan=False)
    template: StrictStr
    max_tokens: StrictInt = Field(gt=0)
    rows: list[dict[str, Any]] = Field(min_length=1)

    @model_validator(mode="after")
    def _rows_fill_the_template(self) -> TraceQuery:
        try:
            parsed = Template.parse(self.template)
            parsed.require_placeholders()
        except TemplateError as e:
            raise ValueError(f"bad template: {e}") from None
        for i, row in enumerate(self.rows):
            for col in parsed.columns:
                if col not in row:
                    raise ValueError(
                        f"rows[{i}] has no column {col!r} used by the template (row columns: {', '.join(map(repr, row)) or 'none'})"
                    )
                if row[col] is None:
                    raise ValueError(f"rows[{i}] column {col!r} is null")
        return self

    @property
    def num_requests(self) -> int:
        return len(self.rows)

    @property
    def extras(self) -> dict[str, object]:
        return dict(self.model_extra or {})


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


# -- reading and writing --------------------------------------------------------------------------


def parse_trace_line(text: str, *, source: str = "<trace>", lineno: int = 1) -> TraceQuery:
    """Validate one JSON line; errors read ``<source>:<lineno>: <what is wrong>``."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"{source}:{lineno}: bad JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{source}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    try:
        return TraceQuery.model_validate(obj)
    except ValidationError as e:
        raise TraceFormatError(f"{source}:{lineno}: {_describe(e)}") from None


def read_trace(path: str | os.PathLike[str]) -> list[TraceQuery]:
    """Read a JSON Lines trace; returns its relQueries sorted by arrival (file order breaks ties).

    Blank lines are skipped. A bad line raises ``TraceFormatError`` naming the file and line.
    """
    path = Path(path)
    queries: list[TraceQuery] = []
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for lineno, text in enumerate(f, start=1):
            if not text.strip():
                continue
            q = parse_trace_line(text, source=str(path), lineno=lineno)
            if q.id in first_line:
                raise TraceFormatError(f"{path}:{lineno}: duplicate relQuery id {q.id!r} (first on line {first_line[q.id]})")
            first_line[q.id] = lineno
            queries.append(q)
    queries.sort(key=lambda q: q.arrival_s)
    return queries


def write_trace(queries: Iterable[TraceQuery | Mapping[str, object]], path: str | os.PathLike[str]) -> Path:
    """Write relQueries as JSON Lines (validating dicts on the way); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for q in queries:
            if not isinstance(q, TraceQuery):
                q = TraceQuery.model_validate(q)
            f.write(json.dumps(q.model_dump(mode="json"), ensure_ascii=False))
            f.write("\n")
    return path


# -- generating -----------------------------------------------------------------------------------


def _usable_rows(columns: Mapping[str, Sequence[object]], wanted: Sequence[str]) -> list[int]:
    """Indices of rows whose wanted fields are all present and not blank."""
    n = len(next(iter(columns.values())))
    keep = []
    for i in range(n):
        ok = True
        for c in wanted:
            v = columns[c][i]
            if v is None or (isinstance(v, str) and not v.strip()):
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


class _TablePool:
    """A table's columns as Python lists plus, per query spec, the rows it can use."""

    def __init__(self, table: str, specs: list[QuerySpec], datasets_dir: str | os.PathLike[str] | None) -> None:
        cols = sorted({c for s in specs for c in s.columns})
        df = load_table(table, datasets_dir, columns=cols)
        self.columns = {c: df[c].to_list() for c in cols}
        self.usable = {s.type: _usable_rows(self.columns, s.columns) for s in specs}

    def rows(self, spec: QuerySpec, indices: list[int]) -> list[dict[str, object]]:
        return [{c: self.columns[c][i] for c in spec.columns} for i in indices]


def generate_trace(
    table: str | Sequence[str],
    num_relqueries: int,
    rate: float,
    *,
    rows: tuple[int, int] = (1, 100),
    types: Sequence[str | QueryType] | None = None,
    seed: int = 0,
    datasets_dir: str | os.PathLike[str] | None = None,
    id_prefix: str = "rq",
) -> list[TraceQuery]:
    """A reproducible trace of ``num_relqueries`` relQueries over real tables.

    Arrivals are a Poisson process of ``rate`` relQueries per second (``math.inf``: all at 0).
    Each relQuery picks a table (uniformly, when several are given), a query type (uniformly among
    ``types``, default all five), a row count uniform in ``rows`` (inclusive) and that many
    distinct rows at random among those whose template fields are non-blank, kept in table order
    as a filtered scan would return them. Only the template's columns are stored.
    """
    hi = _check_sizes(rows, rate)
    if num_relqueries < 0:
        raise ConfigError(f"num_relqueries must be >= 0, got {num_relqueries}")
    tables = [table] if isinstance(table, str) else list(table)
    if not tables:
        raise ConfigError("no table given")
    specs = {t: queries_for(t, list(types) if types is not None else None) for t in tables}
    pools = {t: _TablePool(t, specs[t], datasets_dir) for t in dict.fromkeys(tables)}
    for t, pool in pools.items():
        for qtype, usable in pool.usable.items():
            if len(usable) < hi:
                raise ConfigError(
                    f"table {t!r} has only {len(usable)} rows usable for {qtype.value} queries, fewer than rows upper bound {hi}"
                )


    def draw(rng: random.Random, t: str) -> dict[str, object]:
        spec = specs[t][rng.randrange(len(specs[t]))]
        usable = pools[t].usable[spec.type]
        picked = _pick(rng, rows, len(usable))
        rows_ = pools[t].rows(spec, [usable[i] for i in picked])
        return {"template": spec.template, "max_tokens": spec.max_tokens, "rows": rows_, "type": spec.type.value, "table": t}

    return _generate(random.Random(seed), num_relqueries, rate, tables, id_prefix, draw)


#: characters a row's fields need in the long workload (about 4 characters a token)
_LONG_MIN_CHARS = 420


def generate_long_trace(
    table: str | Sequence[str],
    num_relqueries: int,
    rate: float,
    *,
    rows: tuple[int, int] = (1, 40),
    seed: int = 0,
    datasets_dir: str | os.PathLike[str] | None = None,
    id_prefix: str = "lq",
) -> list[TraceQuery]:
    """A trace of the "long" workload (``queries.LONG_TEMPLATES``): prompts of 200-700 tokens,
    answers of 64-128 tokens (``ignore_eos``, so every row runs to its ``max_tokens``).

    Arrivals, table choice and row sampling work as in ``generate_trace``.
    """
    hi = _check_sizes(rows, rate)
    tables = [table] if isinstance(table, str) else list(table)
    unknown = [t for t in tables if t not in LONG_TEMPLATES]
    if unknown or not tables:
        raise ConfigError(f"no long templates for table(s) {unknown or tables}; choose from {', '.join(LONG_TEMPLATES)}")
    pools: dict[str, tuple[str, list[str], dict[str, list[Any]], list[int]]] = {}
    for t in dict.fromkeys(tables):
        template = LONG_TEMPLATES[t][0]
        cols = list(Template.parse(template).columns)
        df = load_table(t, datasets_dir, columns=cols)
        columns = {c: df[c].to_list() for c in cols}
        # rows whose fields are long enough for a prompt of at least ~200 tokens
        usable = [i for i in _usable_rows(columns, cols) if sum(len(str(columns[c][i])) for c in cols) >= _LONG_MIN_CHARS]
        if len(usable) < hi:
            raise ConfigError(f"table {t!r} has only {len(usable)} rows long enough for the long workload, fewer than {hi}")
        pools[t] = (template, cols, columns, usable)

    def draw(rng: random.Random, t: str) -> dict[str, object]:
        template, cols, columns, usable = pools[t]
        picked = _pick(rng, rows, len(usable))
        return {
            "template": template,
            "max_tokens": LONG_MAX_TOKENS[rng.randrange(len(LONG_MAX_TOKENS))],
            "rows": [{c: columns[c][usable[i]] for c in cols} for i in picked],
            "type": "long",
            "table": t,
            "ignore_eos": True,
        }

    return _generate(random.Random(seed), num_relqueries, rate, tables, id_prefix, draw)


def _check_sizes(rows: tuple[int, int], rate: float) -> int:
    """Check the generators' shared arguments; the most rows a relQuery may take."""
    lo, hi = rows
    if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 1 or hi < lo:
        raise ConfigError(f"rows must be a pair of integers 1 <= lo <= hi, got {rows!r}")
    if not rate > 0:
        raise ConfigError(f"rate must be > 0 relQueries/s, got {rate}")
    return hi


def _generate(
    rng: random.Random, num: int, rate: float, tables: Sequence[str], id_prefix: str,
    draw: Callable[[random.Random, str], dict[str, Any]],
) -> list[TraceQuery]:
    """Poisson arrivals of ``rate`` relQueries per second, each on a table drawn uniformly; the
    rest of each record (template, rows, limits, extras) from ``draw``, called in arrival order so
    that a seed fixes the trace."""
    width = max(5, len(str(max(num - 1, 0))))
    clock = 0.0
    out: list[TraceQuery] = []
    for k in range(num):
        clock += 0.0 if math.isinf(rate) else rng.expovariate(rate)
        t = tables[rng.randrange(len(tables))]
        out.append(TraceQuery(id=f"{id_prefix}{k:0{width}d}", arrival_s=round(clock, 6), **draw(rng, t)))
    return out


def _pick(rng: random.Random, rows: tuple[int, int], available: int) -> list[int]:
    """A uniform row count in ``rows``, that many distinct positions among ``available``, in order."""
    return sorted(rng.sample(range(available), rng.randint(*rows)))


def scale_arrivals(trace: Sequence[TraceQuery], factor: float) -> list[TraceQuery]:
    """The same relQueries arriving ``factor`` times as fast (the load of Fig. 9)."""
    return [q.model_copy(update={"arrival_s": q.arrival_s / factor}) for q in trace]


def trace_stats(queries: Sequence[TraceQuery]) -> dict[str, float]:
    """Counts for reports: relQueries, requests, rows per relQuery, span of arrivals."""
    n = len(queries)
    reqs = sum(q.num_requests for q in queries)
    return {
        "relqueries": n,
        "requests": reqs,
        "mean_rows": reqs / n if n else 0.0,
        "first_arrival_s": queries[0].arrival_s if n else 0.0,
        "last_arrival_s": max(q.arrival_s for q in queries) if n else 0.0,
    }
