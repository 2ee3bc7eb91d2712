"""Figures of one pass of sessions: latency (mean, p95, max), tokens, and throughput."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from typing import Any

from e2e.sessions import Record
from relserve.percentile import percentile


def pass_result(records: list[Record], answers: dict[str, dict], wall: float, prompt_tokens: float, cached_tokens: float) -> dict[str, Any]:
    """One pass as the phase files store it (JSON): figures, every statement's record, the answers."""
    lat = [r.latency for r in records]
    return {
        "statements": len(records),
        "failed_statements": sum(r.error is not None for r in records),
        "errors": sorted({r.error for r in records if r.error})[:5],
        "mean_latency_s": statistics.fmean(lat) if lat else math.nan,
        "p95_latency_s": percentile(lat, 0.95),
        "max_latency_s": max(lat) if lat else math.nan,
        "wall_s": wall,
        "prompt_tokens": int(prompt_tokens),
        "prompt_tokens_cached": int(cached_tokens),
        "prompt_tokens_computed": int(prompt_tokens - cached_tokens),
        "records": [asdict(r) | {"latency": r.latency} for r in records],
        "answers": answers,
    }


def throughput(records: list[dict[str, Any]]) -> dict[str, float]:
    """Rows per second over the pass's makespan (first arrival to last end). ``rows_per_s`` counts
    the statements' table rows, the same work for every contender; ``llm_rows`` counts the rows the
    LLM functions were called on, which deduplication lowers."""
    span = (max(r["end"] for r in records) - min(r["arrival"] for r in records)) if records else 0.0
    table_rows = sum(r["rows"] for r in records)
    return {"makespan_s": span, "table_rows": table_rows, "rows_per_s": table_rows / span if span > 0 else float("nan"),
            "llm_rows": sum(r["llm_rows"] for r in records)}
