"""The engine a call runs on, started only when a row actually has to run.

Starting the embedded engine takes ~25 s, so a call answered entirely from the result cache, or an
EXPLAIN, must not start it. ``EngineRef`` knows the model id (for cache keys) without the engine,
and asks for the engine (given, or the process's default one) only on first use.
"""

from __future__ import annotations

import threading
from typing import Any

from relserve.errors import ConfigError


class EngineRef:
    def __init__(self, engine: Any = None, model: str | None = None) -> None:
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
        try:
            import relserve

            running = getattr(relserve, "running_default_engine", None)
            engine = running() if callable(running) else None
        except Exception:
            engine = None
        if engine is not None and (self._model is None or _model_id_of(self._model) == engine.model_id):
            return engine
        return None

    @property
    def model(self) -> str | None:
        return self._model


def _model_id_of(model: str | None) -> str | None:
    """The engine's name for a model without loading it (None when that cannot be told)."""
    try:
        from relserve.model import resolve_model
    except ImportError:
        return model
    try:
        return resolve_model(model, prepare=False).model_id
    except ConfigError as e:
        if model is not None and "unknown model" in str(e):
            raise
        return None


def _default_engine(model: str | None) -> Any:
    import relserve

    factory = getattr(relserve, "default_engine", None)
    if factory is None:
        raise ConfigError("no engine was given and relserve.default_engine() is not available")
    if model is None:
        return factory()
    try:
        return factory(model=model)
    except TypeError:
        engine = factory()
        if _model_id_of(model) not in (None, engine.model_id):
            raise ConfigError(f"the default engine serves {engine.model_id!r}, not {model!r}") from None
        return engine
