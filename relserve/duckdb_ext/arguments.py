"""How SQL arguments become an ``LLMCall`` and the rows' placeholder values.

    llm_map(template, value, ... [, llm_options(...)])
    llm_filter(template, value, ... [, llm_options(...)])
    llm_classify(template, labels, value, ... [, llm_options(...)])
    llm_extract(template, json_schema, value, ... [, llm_options(...)])

Binding placeholders to values (``relserve.binding``, as on every surface):
* one STRUCT value (a table alias such as ``r`` in ``FROM reviews r``, ``struct_pack(...)`` or
  ``{'review': text}``) binds by field name, and a placeholder with no such field is an error;
* otherwise the values fill the distinct placeholders in order of first appearance, and their
  number must match.

DuckDB hands a scalar UDF its arguments as Arrow arrays of one chunk (constants repeated), so the
template, labels, schema and options are read per row; in practice they are constant and a chunk
is one group.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from relserve.binding import Binding
from relserve.cell_values import arrow_values
from relserve.errors import ConfigError, TemplateError
from relserve.functions import OPTION_NAMES, CallOptions, LLMCall, LLMFunction, make_call
from relserve.template import Template

#: field that marks the struct built by the ``llm_options(...)`` macro
OPTIONS_MARKER = "__llm_options__"


def options_macro_sql() -> str:
    params = ", ".join(f"{name} := NULL" for name in OPTION_NAMES)
    fields = ", ".join(f"'{name}': {name}" for name in OPTION_NAMES)
    return f"CREATE OR REPLACE TEMP MACRO llm_options({params}) AS {{'{OPTIONS_MARKER}': true, {fields}}}"


@dataclass
class ChunkGroup:
    """Rows of one chunk that share a call (template, labels or schema, options)."""

    call: LLMCall
    #: positions in the chunk
    rows: list[int] = field(default_factory=list)
    #: placeholder values, one tuple per row, aligned with ``call.template.columns``
    values: list[tuple] = field(default_factory=list)


@dataclass
class DecodedChunk:
    size: int
    groups: list[ChunkGroup]
    #: chunk position -> why that row cannot run (NULL template, NULL struct, ...)
    errors: dict[int, str]


def decode_chunk(fn: LLMFunction, arrays: Sequence[pa.Array], defaults: CallOptions) -> DecodedChunk:
    # nested types can arrive as chunked arrays
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    size = len(arrays[0]) if arrays else 0
    if not arrays:
        raise TemplateError(f"{fn.name} needs a template as its first argument")
    options_array = arrays.pop() if len(arrays) > 1 and _is_options(arrays[-1]) else None
    template_array = arrays[0]
    spec_array = None
    if fn.spec_argument is not None:
        if len(arrays) < 2:
            raise ConfigError(f"{fn.name}(template, {fn.spec_argument}, value, ...) needs its {fn.spec_argument}")
        spec_array = arrays[1]
        value_arrays = arrays[2:]
    else:
        value_arrays = arrays[1:]
    if not value_arrays:
        raise TemplateError(
            f"{fn.name} got no values for its template's placeholders; pass them after the "
            f"template{', ' + fn.spec_argument if fn.spec_argument else ''}, e.g. {_example(fn)}"
        )
    _check_options_last(fn, value_arrays)

    errors: dict[int, str] = {}
    templates = _per_row(template_array)
    specs = _per_row(spec_array) if spec_array is not None else None
    options = _per_row(options_array) if options_array is not None else None

    calls: dict[Any, LLMCall] = {}
    groups: dict[LLMCall, ChunkGroup] = {}
    binders: dict[Template, _Binder] = {}
    for row_ids, t, s, o in _rows_by_call(size, templates, specs, options):
        if t is None:
            for r in row_ids:
                errors[r] = f"{fn.name}: the template is NULL in this row"
            continue
        if fn.spec_argument is not None and s is None:
            for r in row_ids:
                errors[r] = f"{fn.name}: the {fn.spec_argument} argument is NULL in this row"
            continue
        key = (t, hashable_key(s), hashable_key(o))
        call = calls.get(key)
        if call is None:
            call = calls[key] = _make_call(fn, t, s, o, defaults)
        binder = binders.get(call.template)
        if binder is None:
            binder = binders[call.template] = _Binder(fn, call.template, value_arrays)
        group = groups.get(call)
        if group is None:
            group = groups[call] = ChunkGroup(call)
        for r in row_ids:
            if binder.struct_nulls is not None and binder.struct_nulls[r]:
                errors[r] = f"{fn.name}: the struct of values is NULL in this row"
                continue
            group.rows.append(r)
            group.values.append(binder.row(r))
    return DecodedChunk(size, [g for g in groups.values() if g.rows], errors)


def _example(fn: LLMFunction) -> str:
    return {
        "map": "llm_map('Summarize {review}', review)",
        "filter": "llm_filter('Is {review} positive?', review)",
        "classify": "llm_classify('Sentiment of {review}', ['positive', 'negative'], review)",
        "extract": "llm_extract('Extract from {review}', '{\"type\": \"object\"}', review)",
    }[fn.kind]


def option_values(options: Mapping[str, object]) -> dict[str, object]:
    """``llm_options(...)``'s struct as the options it names: without its marker, and a SQL
    literal such as 0.95, which arrives as DECIMAL, as a plain number."""
    return {k: float(v) if isinstance(v, Decimal) else v for k, v in options.items() if k != OPTIONS_MARKER}


def _make_call(fn: LLMFunction, template: str, spec: Any, options: Any, defaults: CallOptions) -> LLMCall:
    # llm_options(...) apart from the connection's defaults: make_call refuses an option the
    # function would ignore when the call names it, not when the connection does
    given = option_values(options) if options is not None else {}
    if fn.kind == "classify":
        return make_call(fn, template, labels=spec, options=defaults, **given)
    if fn.kind == "extract":
        return make_call(fn, template, json_schema=spec, options=defaults, **given)
    return make_call(fn, template, options=defaults, **given)


class _Binder:
    """Reads one row's placeholder values from the value arrays (see ``relserve.binding``)."""

    def __init__(self, fn: LLMFunction, template: Template, value_arrays: list[pa.Array]) -> None:
        binding = Binding(template, fn.name)
        self.struct_nulls = None
        if len(value_arrays) == 1 and pa.types.is_struct(value_arrays[0].type):
            struct = value_arrays[0]
            fields = {struct.type.field(i).name: i for i in range(struct.type.num_fields)}
            picked = binding.columns(fields=fields, described_as="the struct argument has fields")
            arrays = [struct.field(i) for i in picked]
            if struct.null_count:
                self.struct_nulls = struct.is_null().to_pylist()
        else:
            arrays = binding.columns(positional=value_arrays, hint=STRUCT_HINT)
        for name, array in zip(template.columns, arrays):
            _check_not_opaque(fn, name, array.type)
        self.columns = [arrow_values(a) for a in arrays]

    def row(self, r: int) -> tuple:
        return tuple(col[r] for col in self.columns)


def _check_not_opaque(fn: LLMFunction, name: str, arrow_type: pa.DataType) -> None:
    """Refuse a placeholder whose values DuckDB hands over as bytes only it can read (Arrow's
    opaque type: BIGNUM, where relserve cannot cast it to VARCHAR first: a plain connection, or
    inside a list or a struct)."""
    found = opaque_type(arrow_type)
    if found is not None:
        opaque, whole = found
        held = "is" if whole else "holds values of"
        raise ConfigError(f"{fn.name}: placeholder {{{name}}} {held} DuckDB's {opaque.upper()}, which reaches Python "
                          "as opaque bytes; cast it to VARCHAR")


def opaque_type(arrow_type: pa.DataType) -> tuple[str, bool] | None:
    """The name DuckDB gives an opaque type (Arrow's ``arrow.opaque``) in ``arrow_type``, at any
    depth, and whether ``arrow_type`` is that type itself rather than holding it; None if none."""
    if getattr(arrow_type, "extension_name", None) == "arrow.opaque":
        return str(getattr(arrow_type, "type_name", "") or "opaque"), True
    for i in range(arrow_type.num_fields):
        found = opaque_type(arrow_type.field(i).type)
        if found is not None:
            return found[0], False
    return None


STRUCT_HINT = (
    "pass one value per placeholder in order of first appearance, or one struct whose fields are named like "
    "the placeholders"
)


def _check_options_last(fn: LLMFunction, value_arrays: list[pa.Array]) -> None:
    for a in value_arrays:
        if _is_options(a):
            raise ConfigError(f"{fn.name}: llm_options(...) must be the last argument")


def _is_options(array: pa.Array | None) -> bool:
    return array is not None and pa.types.is_struct(array.type) and array.type.get_field_index(OPTIONS_MARKER) >= 0


def _per_row(array: pa.Array | None) -> list | None:
    """Python values of a per-row argument; a one-element list when the whole chunk is constant."""
    if array is None:
        return None
    if len(array) > 1 and _is_constant(array):
        return [array[0].as_py()]
    return array.to_pylist()


def _is_constant(array: pa.Array) -> bool:
    if array.null_count not in (0, len(array)):
        return False
    if array.null_count == len(array):
        return True
    t = array.type
    if pa.types.is_struct(t):
        return all(_is_constant(array.field(i)) for i in range(t.num_fields))
    if pa.types.is_null(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        first = array[0].as_py()
        return all(v == first for v in array.to_pylist())
    try:
        return pc.count_distinct(array).as_py() == 1
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        first = array[0].as_py()
        return all(v == first for v in array.to_pylist())


def _all_constant(*per_row: list | None) -> bool:
    return all(p is None or len(p) == 1 for p in per_row)


def _rows_by_call(size: int, templates: list, specs: list | None, options: list | None):
    """(row positions, template, spec, options) for each distinct combination in the chunk."""
    if _all_constant(templates, specs, options):
        yield (
            list(range(size)),
            templates[0] if size else None,
            specs[0] if specs else None,
            options[0] if options else None,
        )
        return
    combos: dict[Any, tuple[list[int], Any, Any, Any]] = {}

    def at(values: list | None, r: int) -> Any:
        if values is None:
            return None
        return values[0] if len(values) == 1 else values[r]

    for r in range(size):
        t, s, o = at(templates, r), at(specs, r), at(options, r)
        key = (t, hashable_key(s), hashable_key(o))
        entry = combos.get(key)
        if entry is None:
            entry = combos[key] = ([], t, s, o)
        entry[0].append(r)
    yield from combos.values()


class _NaN:
    """Float NaN in a key: NaN equals nothing, itself included, so a row holding it would never
    be found again (the planner's next pass would ask it again, and never settle)."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


def hashable_key(value: object) -> Hashable:
    """``value`` (a row's values, a spec, options) as a dict key that equal values share: itself,
    with float NaN as one marker (not the string 'nan'), or its JSON text when it holds a list or a
    struct (dict), where NaN is the token NaN."""
    try:
        hash(value)
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, tuple):
        if any(isinstance(v, float) and v != v for v in value):
            return tuple(_NAN if isinstance(v, float) and v != v else v for v in value)
        return value
    return _NAN if isinstance(value, float) and value != value else value
