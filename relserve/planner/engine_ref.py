"""The engine a call runs on, started only when a row actually has to run.

Starting the embedded engine takes ~25 s, so a call answered entirely from the result cache, or an
EXPLAIN, must not start it. ``EngineRef`` knows the model id (for cache keys) without the engine,
and asks for the engine (given, or the process's default one) only on first use.
"""

from __future__ import annotations

import threading

from relserve.backend import registry
from relserve.backend.protocol import Backend
from relserve.errors import ConfigError


class EngineRef:
    def __init__(self, engine: Backend | None = None, model: str | None = None) -> None:
        # no engine given: the one set with relserve.configure(engine=...), if any
        engine = engine if engine is not None else registry.chosen()
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

    def get(self) -> Backend:
        """The engine, starting the default one if none was given."""
        with self._lock:
            if self._engine is None:
                self._engine = _default_backend(self._model)
            return self._engine

    def peek(self) -> Backend | None:
        """The engine if it is already running, else None (never starts one)."""
        if self._engine is not None:
            return self._engine
        engine = registry.running_default_engine()
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


def _default_backend(model: str | None) -> Backend:
    engine = registry.default_engine(model=model) if model is not None else registry.default_engine()
    if model is not None and _model_id_of(model) not in (None, engine.model_id):
        raise ConfigError(
            f"model {model!r} was asked for, but this process's default engine serves {engine.model_id!r}; "
            "pass an engine that serves it"
        )
    return engine
