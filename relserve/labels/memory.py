"""The one label memory: every call's label plan, and the answer field chosen for a template,
kept per model and prefix-cache namespace in relserve's home (issue 62).

Plans are statistics about a call's rows, like the ones ``ANALYZE`` keeps for a table: made once,
from a sample of the first rows a call sees, then read by every later statement in any process
until refreshed. A relQuery asks the memory for its call's plan (``plan``), and one that made a
plan offers it (``keep``): the first plan kept for a key wins, so two processes that raced to
make one answer their rows with the same plan. A pinned plan is never replaced nor evicted; the
memory holds at most ``MAX_PLANS`` unpinned plans per namespace, the least recently used
forgotten first, and at most ``MAX_PINNED`` pinned ones: a pin past that is refused, so a
tenant cannot grow the server's file without bound.

The file holds worked examples, which are rows of the table that made the plan: it is created
readable by its owner only, and a namespace's plans are listed only to that namespace (the
server lists a tenant's own).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from relserve.errors import ConfigError
from relserve.labels.plan import LabelPlan, PlanKey

#: unpinned plans kept per namespace (the least recently used are forgotten past this)
MAX_PLANS = 1024
#: pinned plans kept per namespace (a pin past this is refused: unpin one first)
MAX_PINNED = 1024
#: plans kept in this process's memory in front of the file
MEMO_PLANS = 4096

_SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (
    namespace TEXT NOT NULL,
    digest    TEXT NOT NULL,
    model     TEXT NOT NULL,
    call      TEXT NOT NULL,
    function  TEXT NOT NULL,
    template  TEXT NOT NULL,
    labels    TEXT NOT NULL,
    plan      TEXT NOT NULL,
    created   REAL NOT NULL,
    used      REAL NOT NULL,
    pinned    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, digest)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fields (
    namespace TEXT NOT NULL,
    digest    TEXT NOT NULL,
    field     TEXT NOT NULL,
    PRIMARY KEY (namespace, digest)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class StoredPlan:
    """A plan as the memory holds it."""

    key: PlanKey
    plan: LabelPlan
    created: float
    pinned: bool = False


class PlanPinned(ConfigError):
    """A pinned plan cannot be refreshed."""


class TooManyPinned(ConfigError):
    """A namespace holds ``MAX_PINNED`` pinned plans already."""


def _ns(namespace: str | None) -> str:
    # SQLite's primary key treats NULLs as distinct: the process's own namespace is ""
    return namespace or ""


class LabelMemory:
    """Label plans (and chosen answer fields) per key; ``path`` None keeps them in this process only."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._memo: OrderedDict[tuple[str, str], StoredPlan | None] = OrderedDict()
        self._fields: dict[tuple[str, str], str] = {}
        self._conn: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            self._conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False, isolation_level=None)
            if new:
                os.chmod(self.path, 0o600)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.executescript(_SCHEMA)

    # -- plans ------------------------------------------------------------------------------------

    def plan(self, key: PlanKey) -> StoredPlan | None:
        """The plan kept for ``key`` (None: none yet)."""
        k = (_ns(key.namespace), key.digest)
        with self._lock:
            if k in self._memo:
                self._memo.move_to_end(k)
                got = self._memo[k]
                if got is not None or self._conn is None:
                    return got
            got = self._read(key)
            self._remember(k, got)
            return got

    def keep(self, key: PlanKey, plan: LabelPlan, *, replace: bool = False, pin: bool = False) -> StoredPlan:
        """Keep ``plan`` for ``key`` unless one is kept already (then that one is returned: the
        first plan wins); ``replace``: keep it over an unpinned one (a refresh); ``pin``: pin it."""
        k = (_ns(key.namespace), key.digest)
        now = time.time()
        with self._lock:
            current = self._read(key) if self._conn is not None else self._memo.get(k)
            if current is not None and (not replace or current.pinned):
                if replace and current.pinned:
                    raise PlanPinned(f"the label plan of {key.function}({key.template!r}) is pinned: unpin it "
                                     "(the call's label_plan option 'unpin', relserve.pin_label_plans(template, "
                                     "unpin => true) in PostgreSQL, or `relserve plans pin --unpin`) before "
                                     "refreshing it")
                if pin and not current.pinned:
                    self._check_pin_room(key)
                    current = StoredPlan(current.key, current.plan, current.created, True)
                    self._write(current, now)
                self._remember(k, current)
                return current
            if pin:
                self._check_pin_room(key)
            stored = StoredPlan(key, plan, now, pin)
            self._write(stored, now)
            self._remember(k, stored)
            self._evict(key.namespace)
            return stored

    def pin(self, key: PlanKey, pinned: bool = True) -> StoredPlan | None:
        """Pin (or unpin) ``key``'s plan; None when it has none."""
        k = (_ns(key.namespace), key.digest)
        with self._lock:
            current = self._read(key) if self._conn is not None else self._memo.get(k)
            if current is None:
                return None
            if pinned and not current.pinned:
                self._check_pin_room(key)
            current = StoredPlan(current.key, current.plan, current.created, pinned)
            self._write(current, time.time())
            self._remember(k, current)
            return current

    def forget(self, key: PlanKey | None = None, *, namespace: str | None = None, pinned: bool = False) -> int:
        """Forget ``key``'s plan, or every plan of ``namespace`` (``pinned``: pinned ones too);
        returns how many were forgotten."""
        with self._lock:
            if key is not None:
                k = (_ns(key.namespace), key.digest)
                current = self._read(key) if self._conn is not None else self._memo.get(k)
                if current is None or (current.pinned and not pinned):
                    return 0
                self._memo.pop(k, None)
                if self._conn is not None:
                    self._conn.execute("DELETE FROM plans WHERE namespace = ? AND digest = ?", k)
                return 1
            ns = _ns(namespace)
            gone = [k for k, v in self._memo.items() if k[0] == ns and (v is None or pinned or not v.pinned)]
            for k in gone:
                self._memo.pop(k)
            if self._conn is None:
                return sum(1 for k in gone)
            cur = self._conn.execute("DELETE FROM plans WHERE namespace = ?" + ("" if pinned else " AND pinned = 0"),
                                     (ns,))
            self._conn.execute("DELETE FROM fields WHERE namespace = ?", (ns,))
            return cur.rowcount

    def plans(self, namespace: str | None = None) -> list[StoredPlan]:
        """Every plan kept in ``namespace``, the most recently used first."""
        ns = _ns(namespace)
        with self._lock:
            if self._conn is None:
                return [v for k, v in reversed(self._memo.items()) if k[0] == ns and v is not None]
            rows = self._conn.execute(
                "SELECT model, call, function, template, labels, plan, created, pinned FROM plans "
                "WHERE namespace = ? ORDER BY used DESC", (ns,)).fetchall()
        out = []
        for model, call, function, template, labels, plan, created, pinned in rows:
            key = PlanKey(namespace, model, call, function, template, tuple(filter(None, labels.split("\x1f"))))
            out.append(StoredPlan(key, LabelPlan.from_json(plan), created, bool(pinned)))
        return out

    # -- answer fields ----------------------------------------------------------------------------

    def field(self, key: PlanKey) -> str | None:
        """The answer field chosen for ``key``'s template (``answer_field := 'auto'``), or None."""
        k = (_ns(key.namespace), key.digest)
        with self._lock:
            if k in self._fields:
                return self._fields[k]
            if self._conn is None:
                return None
            row = self._conn.execute("SELECT field FROM fields WHERE namespace = ? AND digest = ?", k).fetchone()
            if row is not None:
                self._fields[k] = row[0]
            return row[0] if row is not None else None

    def keep_field(self, key: PlanKey, name: str) -> str:
        """Keep the answer field chosen for ``key`` (the first kept wins); returns the one kept."""
        k = (_ns(key.namespace), key.digest)
        with self._lock:
            if self._conn is not None:
                self._conn.execute("INSERT OR IGNORE INTO fields VALUES (?, ?, ?)", (*k, name))
                name = self._conn.execute("SELECT field FROM fields WHERE namespace = ? AND digest = ?", k).fetchone()[0]
            self._fields[k] = self._fields.get(k, name) if self._conn is None else name
            return self._fields[k]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- the file ---------------------------------------------------------------------------------

    def _read(self, key: PlanKey) -> StoredPlan | None:
        if self._conn is None:
            return self._memo.get((_ns(key.namespace), key.digest))
        row = self._conn.execute("SELECT plan, created, pinned FROM plans WHERE namespace = ? AND digest = ?",
                                 (_ns(key.namespace), key.digest)).fetchone()
        if row is None:
            return None
        try:
            plan = LabelPlan.from_json(row[0])
        except (ValueError, KeyError, TypeError):
            return None  # written by another version: made again
        return StoredPlan(key, plan, row[1], bool(row[2]))

    def _write(self, stored: StoredPlan, now: float) -> None:
        if self._conn is None:
            return
        key = stored.key
        self._conn.execute(
            "INSERT INTO plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, digest) DO UPDATE SET "
            "plan = excluded.plan, created = excluded.created, used = excluded.used, pinned = excluded.pinned",
            (_ns(key.namespace), key.digest, key.model_id, key.call, key.function, key.template, "\x1f".join(key.labels),
             stored.plan.to_json(), stored.created, now, int(stored.pinned)))

    def _remember(self, k: tuple[str, str], stored: StoredPlan | None) -> None:
        self._memo[k] = stored
        self._memo.move_to_end(k)
        while len(self._memo) > MEMO_PLANS:
            self._memo.popitem(last=False)

    def _check_pin_room(self, key: PlanKey) -> None:
        ns = _ns(key.namespace)
        if self._conn is None:
            held = sum(1 for k, v in self._memo.items() if k[0] == ns and v is not None and v.pinned)
        else:
            held = self._conn.execute("SELECT count(*) FROM plans WHERE namespace = ? AND pinned = 1", (ns,)).fetchone()[0]
        if held >= MAX_PINNED:
            raise TooManyPinned(f"cannot pin the label plan of {key.function}({key.template!r}): {held:,} plans are "
                                f"pinned here already, the most kept (unpin some first: the call's label_plan option "
                                "'unpin', or `relserve plans pin --unpin`)")

    def _evict(self, namespace: str | None) -> None:
        ns = _ns(namespace)
        if self._conn is None:
            mine = [k for k, v in self._memo.items() if k[0] == ns and v is not None and not v.pinned]
            for k in mine[: max(0, len(mine) - MAX_PLANS)]:
                self._memo.pop(k)
            return
        self._conn.execute(
            "DELETE FROM plans WHERE namespace = ? AND pinned = 0 AND digest NOT IN (SELECT digest FROM plans "
            "WHERE namespace = ? AND pinned = 0 ORDER BY used DESC LIMIT ?)", (ns, ns, MAX_PLANS))


_process_memory: LabelMemory | None = None
_process_lock = threading.Lock()


_set_memory: LabelMemory | None = None


def process_memory() -> LabelMemory:
    """This process's label memory, in relserve's home (``$RELSERVE_HOME``): the one the surfaces
    pass on (``use_memory`` puts another in its place)."""
    global _process_memory
    from relserve import paths

    with _process_lock:
        if _set_memory is not None:
            return _set_memory
        path = paths.home() / "label_plans.sqlite"
        if _process_memory is None or _process_memory.path != path:
            _process_memory = LabelMemory(path)
        return _process_memory


def use_memory(memory: LabelMemory | None) -> None:
    """Make ``memory`` the process's label memory (None: the one in relserve's home again): tests
    and benchmarks that run every statement as a template's first give each a fresh one."""
    global _set_memory
    with _process_lock:
        _set_memory = memory


def forget_all() -> LabelMemory:
    """Put an empty label memory, in this process only, in place of the process's: benchmarks that
    run every statement as its call's first (relserve's home keeps its plans)."""
    memory = LabelMemory()
    use_memory(memory)
    return memory
