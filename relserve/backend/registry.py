"""The one registry of which ``Backend`` a call runs on when none is passed, and the factory
that starts the process's default one.

Two layers, both here: the backend chosen with ``relserve.configure(engine=...)`` (a test double,
an engine of the caller's) comes first; else the process's default backend, set with
``relserve.set_default_engine`` or started on first use by ``default_engine()``. They are kept
apart so that choosing a backend for a while and then ``configure(engine=None)`` returns to the
default one still running, rather than starting another.

The factory lives here, above ``engine/`` and ``cluster/``, so neither imports the other to build
the default.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping

from relserve.backend.protocol import Backend
from relserve.errors import ConfigError

_lock = threading.Lock()
_chosen: Backend | None = None
_default: Backend | None = None


def choose(backend: Backend | None) -> None:
    """Run calls on ``backend`` when none is passed (None: on the process's default one)."""
    global _chosen
    _chosen = backend


def chosen() -> Backend | None:
    """The backend set with ``relserve.configure(engine=...)``, if any."""
    return _chosen


def default_engine(**options: object) -> Backend:
    """The process-wide shared backend, started on first use (settings from ``RELSERVE_*``;
    ``RELSERVE_REPLICAS`` > 1 starts that many replicas on Ray instead: ``relserve.Cluster``)."""
    global _default
    with _lock:
        if _default is None or not _default.alive:
            if _default is not None:
                _default.close()  # a dead engine's processes still need stopping; a closed one returns at once
            _default = new_backend(options)
            atexit.register(_close_default)
        return _default


def running_default_engine() -> Backend | None:
    """The shared backend if one is running; never starts one (EXPLAIN uses this)."""
    backend = _default
    return backend if backend is not None and backend.alive else None


def set_default_engine(engine: Backend | None) -> None:
    """Make ``engine`` the process's default backend (tests, servers); None forgets it."""
    global _default
    with _lock:
        _default = engine


def new_backend(options: Mapping[str, object]) -> Backend:
    """An ``Engine``, or a ``Cluster`` of ``RELSERVE_REPLICAS`` replicas when that is above 1."""
    raw = os.environ.get("RELSERVE_REPLICAS", "").strip()
    try:
        replicas = int(raw) if raw else 1
    except ValueError:
        raise ConfigError(f"RELSERVE_REPLICAS must be a whole number of engine replicas, got {raw!r}") from None
    if replicas > 1:
        from relserve.cluster.cluster import Cluster

        return Cluster(replicas, **options)
    from relserve.engine.engine import Engine

    return Engine(**options)


def _close_default() -> None:
    backend = _default
    if backend is not None:
        backend.close()
