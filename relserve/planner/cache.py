"""The persistent result cache: answers of greedy (temperature 0) calls, shared across queries and
processes, in one SQLite file (``relserve.paths.result_cache_path()``, under ``$RELSERVE_HOME``).

Key = sha256(model id, sampling settings, prompt). Only deterministic calls are stored: with
sampling, a cached answer would hide the variation the user asked for. SQLite's WAL mode lets
several processes read while one writes; writers wait (``busy_timeout``) instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from relserve import paths

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key     BLOB PRIMARY KEY,
    model   TEXT NOT NULL,
    answer  TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""
# SQLite's default limit on bound parameters is 999 in old builds; stay below it.
_BATCH = 900


def cache_key(model_id: str, settings: Mapping[str, Any], prompt: str) -> bytes:
    h = hashlib.sha256()
    h.update(model_id.encode())
    h.update(b"\0")
    h.update(json.dumps(settings, sort_keys=True, separators=(",", ":")).encode())
    h.update(b"\0")
    h.update(prompt.encode("utf-8", "surrogatepass"))
    return h.digest()


class ResultCache:
    """Prompt -> answer store. Thread-safe; one instance per file is enough per process."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else paths.result_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # DuckDB and polars may call us from their worker threads; the lock serialises use.
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(_SCHEMA)

    def get_many(self, model_id: str, settings: Mapping[str, Any], prompts: Sequence[str]) -> dict[int, str]:
        """Cached answers by position in ``prompts`` (missing positions are not cached)."""
        keys = [cache_key(model_id, settings, p) for p in prompts]
        where: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            where.setdefault(k, []).append(i)
        found: dict[int, str] = {}
        distinct = list(where)
        with self._lock:
            for start in range(0, len(distinct), _BATCH):
                batch = distinct[start : start + _BATCH]
                marks = ",".join("?" * len(batch))
                for key, answer in self._db.execute(f"SELECT key, answer FROM results WHERE key IN ({marks})", batch):
                    for i in where[key]:
                        found[i] = answer
        return found

    def put_many(self, model_id: str, settings: Mapping[str, Any], items: Iterable[tuple[str, str]]) -> int:
        """Store (prompt, answer) pairs; returns how many were written."""
        now = time.time()
        rows = [(cache_key(model_id, settings, p), model_id, a, now) for p, a in items if a is not None]
        if not rows:
            return 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return len(rows)

    def clear(self, model_id: str | None = None) -> int:
        """Forget cached answers (of one model, or all); returns how many were removed."""
        with self._lock:
            if model_id is None:
                cur = self._db.execute("DELETE FROM results")
            else:
                cur = self._db.execute("DELETE FROM results WHERE model = ?", (model_id,))
            return cur.rowcount

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM results").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


_shared: dict[Path, ResultCache] = {}
_shared_lock = threading.Lock()


def shared_cache() -> ResultCache:
    """The process's cache for the current ``result_cache_path()`` (follows ``RELSERVE_HOME``)."""
    path = paths.result_cache_path()
    with _shared_lock:
        cache = _shared.get(path)
        if cache is None:
            cache = _shared[path] = ResultCache(path)
        return cache


def clear_result_cache(model_id: str | None = None) -> int:
    """Empty the persistent result cache (or only one model's answers)."""
    return shared_cache().clear(model_id)
