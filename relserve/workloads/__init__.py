"""Benchmark workloads: real tables, the five relQuery task types, and serving traces."""

from relserve.workloads.queries import MAX_TOKENS, QUERY_TYPES, QuerySpec, QueryType, queries_for, query_spec
from relserve.workloads.tables import (
    ENV_VAR,
    TABLE_NAMES,
    TABLES,
    DatasetNotFound,
    TableInfo,
    load_table,
    resolve_datasets_dir,
    table_info,
    table_path,
)
from relserve.workloads.traces import (
    TraceFormatError,
    TraceQuery,
    generate_long_trace,
    generate_trace,
    parse_trace_line,
    read_trace,
    scale_arrivals,
    trace_stats,
    write_trace,
)

__all__ = [
    "ENV_VAR",
    "MAX_TOKENS",
    "QUERY_TYPES",
    "TABLES",
    "TABLE_NAMES",
    "DatasetNotFound",
    "QuerySpec",
    "QueryType",
    "TableInfo",
    "TraceFormatError",
    "TraceQuery",
    "generate_long_trace",
    "generate_trace",
    "load_table",
    "parse_trace_line",
    "queries_for",
    "query_spec",
    "read_trace",
    "resolve_datasets_dir",
    "scale_arrivals",
    "table_info",
    "table_path",
    "trace_stats",
    "write_trace",
]
