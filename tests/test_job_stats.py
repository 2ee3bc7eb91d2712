"""A job's figures cross HTTP as one pydantic model: the server sends only the figures that
apply, the client reads back the same model, and reading it as a mapping still works."""

from __future__ import annotations

import json

import pytest

from relserve.job_stats import JobStats


def test_only_the_figures_set_are_sent_and_read_back_alike():
    sent = JobStats(rows=3, errors=1, cached_rows=0, engine_rows=2, latency_s=0.5)
    sent.prompt_tokens = 40
    sent.labels = None  # set, though empty: sent as null, as before
    wire = json.loads(json.dumps(sent.to_json()))
    assert wire == {"rows": 3, "errors": 1, "cached_rows": 0, "engine_rows": 2, "latency_s": 0.5,
                    "prompt_tokens": 40, "labels": None}
    got = JobStats.from_json(wire)
    assert got == sent and got.to_json() == wire


def test_the_client_reads_the_figures_as_a_mapping_too():
    got = JobStats.from_json({"rows": 2, "errors": 0, "a_newer_figure": 7})
    assert got["rows"] == 2 and got.rows == 2 and got["a_newer_figure"] == 7
    assert "policy" not in got and got.get("policy", "-") == "-"
    with pytest.raises(KeyError):
        got["prompt_tokens"]
    assert JobStats.from_json(None).to_json() == {}
