"""The result cache's file after a crash (issue 68's soak): a file SQLite cannot read is set aside
and a new cache starts, instead of stopping whoever opens it (a server, at its start)."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from relserve.planner.cache import ResultCache


def _torn_cache(path) -> bytes:
    """A cache with answers whose first page (SQLite's header) a crash has overwritten."""
    cache = ResultCache(path)
    cache.put_many("m", {}, [(f"prompt {i}", f"answer {i}") for i in range(50)])
    cache.close()
    with open(path, "r+b") as f:
        f.write(b"torn by a crash " * 8)
    return path.read_bytes()


def test_a_cache_file_with_a_torn_header_is_set_aside_and_a_new_cache_answers(tmp_path, caplog):
    path = tmp_path / "results.sqlite"
    torn = _torn_cache(path)
    with caplog.at_level(logging.WARNING, logger="relserve.planner.cache"):
        cache = ResultCache(path)  # raised "file is not a database" before
    assert len(cache) == 0
    cache.put_many("m", {}, [("prompt 1", "new answer")])
    assert cache.get_many("m", {}, ["prompt 1", "prompt 2"]) == {0: "new answer"}
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("results.sqlite.corrupt-")]
    assert [p.read_bytes() for p in aside] == [torn]  # kept as it was, for whoever wants to look
    assert f"the result cache {path} could not be read (file is not a database); it was moved to {aside[0]}" in caplog.text


def test_a_cache_path_sqlite_cannot_open_is_an_error_and_nothing_is_moved(tmp_path):
    path = tmp_path / "results.sqlite"
    path.mkdir()  # not a damaged file: moving it aside would mend nothing
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        ResultCache(path)
    assert [p.name for p in tmp_path.iterdir()] == ["results.sqlite"]
