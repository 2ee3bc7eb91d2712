"""The engine a call runs on, started only when a row actually has to run.

Starting the embedded engine takes ~25 s, so a call answered entirely from the result cache, or an
EXPLAIN, must not start it. ``EngineRef`` knows the model id (for cache keys) without the engine,
and asks for the engine (given, or the process's default one) only on first use.
"""

from __future__ import annotations

import threading
from typing import Any

from relserve import settings
from relserve.errors import ConfigError


class EngineRef:
    def __init__(self, engine: Any = None, model: str | None = None) -> None:
        # no engine given: the one set with relserve.configure(engine=...), if any
        engine = engine if engine is not None else settings.current().engine
        self._engine = engine
        self._model = model
        self._model_id: str | None = None
        self._lock = threading.Lock()
        if engine is not None and model is not None:
            wanted = _model_id_of(model)
            if wanted is not None and wanted != engine.model_id:
                raise ConfigError(
                    f"model {model!r} was asked for, but the engine given serves {engine.model_id!r}; "
                    "leave model unset or pass an engine that serves it"
                )

    @property
    def model_id(self) -> str:
        if self._engine is not None:
            return self._engine.model_id
        if self._model_id is None:
            self._model_id = _model_id_of(self._model) or self.get().model_id
        return self._model_id

    def get(self) -> Any:
        """The engine, starting the default one if none was given."""
        with self._lock:
            if self._engine is None:
                self._engine = _default_engine(self._model)
            return self._engine

    def peek(self) -> Any:
        """The engine if it is already running, else None (never starts one)."""
        if self._engine is not None:
            return self._engine
        engine = _running_default_engine()
        if engine is not None and (self._model is None or _model_id_of(self._model) == engine.model_id):
            return engine
        return None

    @property
    def model(self) -> str | None:
        return self._model


_resolved: dict[str | None, str] = {}


def _model_id_of(model: str | None) -> str | None:
    """The engine's name for a model without loading it (None when that cannot be told)."""
    if model in _resolved:
        return _resolved[model]
    from relserve.model import resolve_model

    try:
        model_id = resolve_model(model, prepare=False).model_id
    except ConfigError as e:
        if model is not None and "unknown model" in str(e):
            raise
        return None  # not prepared yet: ask again next time
    _resolved[model] = model_id
    return model_id


def _default_engine(model: str | None) -> Any:
    from relserve.engine import default_engine

    engine = default_engine(model=model) if model is not None else default_engine()
    if model is not None and _model_id_of(model) not in (None, engine.model_id):
        raise ConfigError(
            f"model {model!r} was asked for, but this process's default engine serves {engine.model_id!r}; "
            "pass an engine that serves it"
        )
    return engine


def _running_default_engine() -> Any:
    """The process's default engine if it has been started (EXPLAIN uses it, never starts it)."""
    from relserve.engine import running_default_engine

    return running_default_engine()
