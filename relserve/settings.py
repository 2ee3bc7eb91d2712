"""Process-wide defaults of the SQL and dataframe surfaces, set with ``relserve.configure``.

One place, checked like LOTUS's ``settings.configure``: an unknown key is an error that lists the
known ones, a wrong type is refused, and a key not given keeps its value.

>>> import relserve
>>> relserve.configure(progress=False)
>>> relserve.settings.current().progress
False
>>> relserve.configure(progres=True)
Traceback (most recent call last):
...
relserve.errors.ConfigError: unknown setting(s) progres; known settings: engine, optimize, progress
>>> relserve.configure(progress=True)
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict, SkipValidation, ValidationError

from relserve.backend import registry
from relserve.backend.protocol import Backend
from relserve.errors import ConfigError


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True)

    #: the engine calls run on when none is passed (None: the process's default engine, started
    #: on first use); kept in the backend registry, read back here. Not validated: a test double
    #: that has the members callers use is a backend too (``Backend`` is a protocol)
    engine: SkipValidation[Backend | None] = None
    #: order rows so that consecutive prompts share prefixes (GGR)
    optimize: bool = True
    #: show a progress bar while a call runs
    progress: bool = True


_current = Settings()
_lock = threading.Lock()


def configure(**changes: object) -> None:
    """Change the given settings; the others keep their values."""
    global _current
    unknown = sorted(set(changes) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known settings: {', '.join(Settings.model_fields)}")
    with _lock:
        try:
            new = Settings(**{**{k: getattr(_current, k) for k in Settings.model_fields}, **changes})
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
            raise ConfigError(f"relserve.configure: {problems}") from None
        if "engine" in changes:
            registry.choose(new.engine)
        _current = new.model_copy(update={"engine": None})


def current() -> Settings:
    """The settings now (an immutable snapshot)."""
    return _current.model_copy(update={"engine": registry.chosen()})
