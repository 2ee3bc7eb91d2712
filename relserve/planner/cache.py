"""The persistent result cache: answers of greedy (temperature 0) calls, shared across queries and
processes, in one SQLite file (``relserve.paths.result_cache_path()``, under ``$RELSERVE_HOME``).

Key = sha256(model id, sampling settings, prompt), first 16 bytes. Only deterministic calls are
stored: with sampling, a cached answer would hide the variation the user asked for. SQLite's WAL
mode lets several processes read while one writes; writers wait (``busy_timeout``) instead of
failing. Answers read or written by this process are also kept in memory (LRU), so a repeated
query does not go back to SQLite; answers are deterministic, so a copy never disagrees with the
file, and ``clear()`` drops this process's copies too.

A file SQLite cannot read (not a database, or malformed: a crash or a copy cut short tore it) is
moved aside as ``results.sqlite.corrupt-<UTC time>`` with a warning, and an empty cache starts in
its place: a cache only saves work, and must not keep a server from starting.

Answers a label method warned about (close to guesses: relserve/labels/guesses.py) are stored
with that warning, so that a query answered from the cache says it again instead of handing the
same guesses back silently.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from relserve import paths

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key     BLOB PRIMARY KEY,
    model   TEXT NOT NULL,
    answer  TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""
#: the warning a label method gave with an answer (an answer without a row here had none)
_GUESSES = """
CREATE TABLE IF NOT EXISTS guesses (
    key     BLOB PRIMARY KEY,
    model   TEXT NOT NULL,
    warning TEXT NOT NULL
) WITHOUT ROWID
"""
# bound parameters per query: SQLite >= 3.32 allows 32766, older builds 999
_BATCH = 30_000 if sqlite3.sqlite_version_info >= (3, 32, 0) else 900
#: answers remembered in memory per process (a repeated query skips SQLite)
MEMO_ENTRIES = 500_000
_KEY_BYTES = 16
#: SQLite's primary result codes for a damaged file
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

log = logging.getLogger(__name__)


def _key_prefix(model_id: str, settings: Mapping[str, object]) -> hashlib._Hash:
    h = hashlib.sha256()
    h.update(model_id.encode())
    h.update(b"\0")
    h.update(json.dumps(settings, sort_keys=True, separators=(",", ":")).encode())
    h.update(b"\0")
    return h


def cache_key(model_id: str, settings: Mapping[str, object], prompt: str) -> bytes:
    h = _key_prefix(model_id, settings)
    h.update(prompt.encode("utf-8", "surrogatepass"))
    return h.digest()[:_KEY_BYTES]


def _keys(model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> list[bytes]:
    base = _key_prefix(model_id, settings)
    out = []
    for p in prompts:
        h = base.copy()
        h.update(p.encode("utf-8", "surrogatepass"))
        out.append(h.digest()[:_KEY_BYTES])
    return out


def _is_corrupt(e: sqlite3.DatabaseError) -> bool:
    """Whether SQLite says the file is not a database or is malformed (not: locked, unreadable,
    a full disk, which moving the file aside would not mend)."""
    return (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def _set_aside(path: Path) -> Path:
    """Rename the cache file and its write-ahead log and shared memory to ``<name>.corrupt-<UTC
    time>``; returns the file's new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = path.with_name(path.name + suffix)
        if src.exists():
            src.replace(aside.with_name(aside.name + suffix))
    return aside


def _private(path: Path) -> None:
    """Create the cache file readable by its owner only (0600: it holds every cached prompt and
    answer; SQLite gives its -wal and -shm files the same mode), and tighten one we own."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return  # sqlite reports the problem with the path
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class ResultCache:
    """Prompt -> answer store. Thread-safe; one instance per file is enough per process."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else paths.result_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private(self.path)
        self._lock = threading.Lock()
        self._memo: OrderedDict[bytes, str] = OrderedDict()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as e:
            if not _is_corrupt(e):
                raise
            # a cache only saves work: a torn file (a crash, a full disk, a copy cut short) must
            # not stop a server from starting. It is kept aside for whoever wants to look.
            aside = _set_aside(self.path)
            log.warning("the result cache %s could not be read (%s); it was moved to %s and a new, empty cache "
                        "started", self.path, e, aside)
            _private(self.path)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        # DuckDB and polars may call us from their worker threads; the lock serialises use.
        db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("PRAGMA mmap_size=268435456")
            db.execute(_SCHEMA)
            db.execute(_GUESSES)
            db.execute("SELECT 1 FROM results LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        return db

    def get_many(self, model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> dict[int, str]:
        """Cached answers by position in ``prompts`` (missing positions are not cached)."""
        keys = _keys(model_id, settings, prompts)
        found: dict[int, str] = {}
        where: dict[bytes, list[int]] = {}
        with self._lock:
            memo = self._memo
            for i, k in enumerate(keys):
                hit = memo.get(k)
                if hit is not None:
                    found[i] = hit
                else:
                    where.setdefault(k, []).append(i)
            for key, answer in self._select("answer", "results", where):
                for i in where[key]:
                    found[i] = answer
                self._remember(key, answer)
        return found

    def _select(self, column: str, table: str, keys: Iterable[bytes]) -> Iterator[tuple[bytes, str]]:
        """(key, ``column``) of the rows of ``table`` whose key is among ``keys``, in batches of
        bound parameters (the caller holds the lock)."""
        # sorted keys walk the B-tree in order: about twice as fast as random order
        distinct = sorted(keys)
        for start in range(0, len(distinct), _BATCH):
            batch = distinct[start : start + _BATCH]
            marks = ",".join("?" * len(batch))
            yield from self._db.execute(f"SELECT key, {column} FROM {table} WHERE key IN ({marks})", batch)

    def _has_guesses(self) -> bool:
        """Whether any answer is stored with a warning (the caller holds the lock): when none is,
        as usual, reads and writes skip the guesses table."""
        return self._db.execute("SELECT 1 FROM guesses LIMIT 1").fetchone() is not None

    def put_many(self, model_id: str, settings: Mapping[str, object], items: Iterable[tuple[str, str]],
                 *, warning: str | None = None) -> int:
        """Store (prompt, answer) pairs; returns how many were written. ``warning``: the label
        method's warning about these answers, kept with them (None: they had none)."""
        pairs = [(p, a) for p, a in items if a is not None]
        if not pairs:
            return 0
        now = time.time()
        keys = _keys(model_id, settings, [p for p, _ in pairs])
        rows = [(k, model_id, a, now) for k, (_, a) in zip(keys, pairs)]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)", rows)
                if warning is not None:
                    self._db.executemany("INSERT OR REPLACE INTO guesses VALUES (?, ?, ?)",
                                         [(k, model_id, warning) for k in keys])
                elif self._has_guesses():  # an answer stored again without a warning loses the old one
                    self._db.executemany("DELETE FROM guesses WHERE key = ?", [(k,) for k in keys])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            for k, _, a, _ in rows:
                self._remember(k, a)
        return len(rows)

    def warnings_of(self, model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> dict[int, str]:
        """The warnings stored with these prompts' answers, by position in ``prompts`` (prompts
        whose answers came with none, or are not cached, are left out)."""
        found: dict[int, str] = {}
        with self._lock:
            if not self._has_guesses():
                return found
            where: dict[bytes, list[int]] = {}
            for i, k in enumerate(_keys(model_id, settings, prompts)):
                where.setdefault(k, []).append(i)
            for key, warning in self._select("warning", "guesses", where):
                for i in where[key]:
                    found[i] = warning
        return found

    def cached_warning(self, model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> str | None:
        """What to say of these prompts' cached answers: ``repeated_warning`` of theirs."""
        return repeated_warning(self.warnings_of(model_id, settings, prompts))

    def scoped(self, **extra: object) -> ResultCache | CacheView:
        """A view whose keys also hold ``extra`` (entries that are None are left out, so
        ``scoped()`` is this cache itself): e.g. a server's tenant."""
        extra = {k: v for k, v in extra.items() if v is not None}
        return CacheView(self, extra) if extra else self

    def _remember(self, key: bytes, answer: str) -> None:
        self._memo[key] = answer
        if len(self._memo) > MEMO_ENTRIES:
            self._memo.popitem(last=False)

    def clear(self, model_id: str | None = None) -> int:
        """Forget cached answers (of one model, or all); returns how many were removed."""
        with self._lock:
            self._memo.clear()
            if model_id is None:
                self._db.execute("DELETE FROM guesses")
                cur = self._db.execute("DELETE FROM results")
            else:
                self._db.execute("DELETE FROM guesses WHERE model = ?", (model_id,))
                cur = self._db.execute("DELETE FROM results WHERE model = ?", (model_id,))
            return cur.rowcount

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM results").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def repeated_warning(stored: Mapping[int, str]) -> str | None:
    """What to say when answers came from the cache and ``stored`` of them were kept with a label
    method's warning: that warning again (the most frequent, when several). None when none had
    one. The text names no count, so that the chunks of one DuckDB statement warn once."""
    if not stored:
        return None
    texts = list(stored.values())
    text = max(set(texts), key=lambda t: (texts.count(t), t))
    return f"{text} (answers from the result cache, which kept this warning with them)"


class CacheView:
    """A ``ResultCache`` seen through extra key fields: the same answers under other keys.

    The server keys answers by who may read them (the tenant, or the tenants' shared cache
    group), so a tenant never learns another's prompts from a cache hit. What changes an answer
    is the call's own key (``LLMCall.sampling_settings``), the system message included.
    """

    def __init__(self, cache: ResultCache, extra: Mapping[str, object]) -> None:
        self.cache = cache
        self.extra = dict(extra)

    def _settings(self, settings: Mapping[str, object]) -> dict[str, object]:
        clash = set(settings) & set(self.extra)
        if clash:
            raise ValueError(f"cache view fields {sorted(clash)} are already call settings")
        return {**settings, **self.extra}

    def scoped(self, **extra: object) -> CacheView:
        more = {k: v for k, v in extra.items() if v is not None}
        return CacheView(self.cache, {**self.extra, **more}) if more else self

    def get_many(self, model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> dict[int, str]:
        return self.cache.get_many(model_id, self._settings(settings), prompts)

    def put_many(self, model_id: str, settings: Mapping[str, object], items: Iterable[tuple[str, str]],
                 *, warning: str | None = None) -> int:
        return self.cache.put_many(model_id, self._settings(settings), items, warning=warning)

    def warnings_of(self, model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> dict[int, str]:
        return self.cache.warnings_of(model_id, self._settings(settings), prompts)

    def cached_warning(self, model_id: str, settings: Mapping[str, object], prompts: Sequence[str]) -> str | None:
        return self.cache.cached_warning(model_id, self._settings(settings), prompts)


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
