"""The result cache after a kill: the file on disk holds no half-written entry, and the restarted
server answers from it the rows it had answered before.

``check_file`` reads a copy of the cache (the database and its write-ahead log, as the killed
server left them) with SQLite's own integrity check, and looks for entries a torn write would
leave (a short key, an empty model, a missing answer). ``replay`` sends rows the steady tenant
had answered before the kill again, as the same relQuery, and expects every one from the cache
with the same text.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from relserve.client import Client, ServerError
from soak.clients.relqueries import MAX_TOKENS, TEMPLATE, CachedAnswer
from soak.config import STEADY_KEY

CACHE_FILE = "results.sqlite"
#: rows sent again after a kill
REPLAY_ROWS = 24


@dataclass
class CacheFileCheck:
    """What a copy of the cache file held right after a kill (before the restart opened it)."""

    after: str
    opened: bool = False
    integrity: str = ""
    entries: int = 0
    #: entries a torn write would leave
    half_written: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.opened and self.integrity == "ok" and self.half_written == 0 and not self.problems


def check_file(home: Path, after: str) -> CacheFileCheck:
    out = CacheFileCheck(after)
    src = home / CACHE_FILE
    if not src.exists():
        out.opened, out.integrity = True, "ok"  # nothing written yet: nothing torn
        return out
    with tempfile.TemporaryDirectory(prefix="soak-cache-copy-") as tmp:
        for suffix in ("", "-wal"):  # -shm is rebuilt from the log by whoever opens it
            f = home / (CACHE_FILE + suffix)
            if f.exists():
                shutil.copy2(f, Path(tmp) / f.name)
        try:
            db = sqlite3.connect(Path(tmp) / CACHE_FILE)
            try:
                out.integrity = "; ".join(r[0] for r in db.execute("PRAGMA integrity_check").fetchall())
                out.entries = db.execute("SELECT count(*) FROM results").fetchone()[0]
                out.half_written = db.execute(
                    "SELECT count(*) FROM results WHERE length(key) != 16 OR model IS NULL OR model = '' "
                    "OR answer IS NULL OR typeof(answer) != 'text' OR created IS NULL"
                ).fetchone()[0]
                out.opened = True
            finally:
                db.close()
        except sqlite3.Error as e:
            out.problems.append(f"{type(e).__name__}: {e}")
    return out


@dataclass
class ReplayCheck:
    """The rows answered before a kill, sent again after it."""

    after: str
    rows: int = 0
    from_cache: int = 0
    same_text: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems and self.from_cache == self.rows == self.same_text


def replay(url: str, rows: list[CachedAnswer], after: str) -> ReplayCheck:
    out = ReplayCheck(after)
    seen: dict[str, CachedAnswer] = {}
    for r in rows:
        seen.setdefault(r.review, r)
    chosen = list(seen.values())[-REPLAY_ROWS:]
    out.rows = len(chosen)
    if not chosen:
        return out
    try:
        with Client(url, api_key=STEADY_KEY, timeout=300) as c:
            res = c.run(TEMPLATE, [{"review": r.review} for r in chosen], max_tokens=MAX_TOKENS)
    except ServerError as e:
        out.problems.append(f"the replay failed: {e}")
        return out
    for want, got in zip(chosen, res.rows):
        out.from_cache += bool(got.cached)
        out.same_text += got.text == want.text
        if not got.cached or got.text != want.text:
            out.problems.append(f"{want.review[:40]!r}: before {want.text!r}, after {got.text!r} "
                                f"({'from the cache' if got.cached else 'not from the cache'}, error {got.error})")
    return out


def answered(url: str, reviews: list[str]) -> list[CachedAnswer]:
    """``reviews`` answered as the steady client's relQuery (the cache keeps them once its job
    has ended); raises if a row fails."""
    with Client(url, api_key=STEADY_KEY, timeout=600) as c:
        res = c.run(TEMPLATE, [{"review": r} for r in reviews], max_tokens=MAX_TOKENS)
    bad = [row.error for row in res.rows if row.error is not None]
    if bad:
        raise RuntimeError(f"a check's relQuery failed: {bad[0]}")
    now = time.monotonic()
    return [CachedAnswer(r, row.text or "", now) for r, row in zip(reviews, res.rows)]

