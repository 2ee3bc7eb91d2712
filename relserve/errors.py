"""Errors with messages that name the problem. All derive from ``RelServeError``."""

import functools
import sys
import warnings


class RelServeError(Exception):
    """Base class of every error relserve raises on purpose."""


class TemplateError(RelServeError, ValueError):
    """The template is malformed or names a column that does not exist."""


class RowError(RelServeError, ValueError):
    """One row cannot be turned into a request (NULL value, prompt too long, ...).

    Surfaces as that row's error; the other rows still run.
    """


class ConfigError(RelServeError, ValueError):
    """Unknown model or policy, bad setting, invalid schema or labels."""


class EngineError(RelServeError, RuntimeError):
    """The engine failed or was shut down."""


class Cancelled(RelServeError):
    """The relQuery was cancelled before this row finished."""


class LabelWarning(UserWarning):
    """The model does not tell a closed question's rows apart well: its answers are close to
    guesses (relserve/labels/adaptive.py). The rows are answered all the same."""


#: the packages a call passes through on its way from the user's line to relserve's warning: the
#: warning names the first frame outside them (a DuckDB UDF and a polars expression run relserve
#: from inside their own code)
_PASS_THROUGH = ("relserve", "duckdb", "polars")


def warn_at_caller(message: str, category: type[Warning] = LabelWarning) -> None:
    """``warnings.warn`` at the user's line: the first frame outside relserve and the libraries
    that call it (Python 3.12's ``skip_file_prefixes``, by hand for 3.11). Where the stack has
    none (DuckDB runs a planned statement's functions on threads of its own while the result is
    fetched), at the line of the last statement ``remember_statement`` saw; with neither, at
    relserve's line that called this."""
    frame = _outside_frame()
    if frame is None and _last_statement is not None:
        filename, lineno, module, registry = _last_statement
        warnings.warn_explicit(message, category, filename, lineno, module, registry)
        return
    level, here = 2, sys._getframe(1)
    while frame is not None and here is not frame:
        here, level = here.f_back, level + 1
    # no user's frame and no statement (a server's worker thread): relserve's own line that warned
    warnings.warn(message, category, stacklevel=level)


def remember_statement() -> None:
    """Called where a statement enters relserve (``relserve.duckdb.sql``): the user's line, for
    warnings raised later on another thread. The process's last statement: two threads' statements
    at once may name each other's line."""
    global _last_statement
    frame = _outside_frame()
    if frame is not None:
        g = frame.f_globals
        _last_statement = (frame.f_code.co_filename, frame.f_lineno, g.get("__name__", "<unknown>"),
                           g.setdefault("__warningregistry__", {}))


_last_statement: tuple[str, int, str, dict] | None = None


def _outside_frame():
    """The innermost frame outside relserve, DuckDB and polars, or None: also where the frames
    above relserve's are only a thread's start (a worker of relserve's own thread pool)."""
    import concurrent.futures.thread
    import threading

    roots = _package_dirs()
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(roots):
        frame = frame.f_back
    starts = (threading.__file__, concurrent.futures.thread.__file__)
    outer = frame
    while outer is not None and outer.f_code.co_filename in starts:
        outer = outer.f_back
    return frame if outer is not None else None


@functools.cache
def _package_dirs() -> tuple[str, ...]:
    import importlib.util
    import os

    origins = [__file__] + [getattr(importlib.util.find_spec(name), "origin", None) for name in _PASS_THROUGH[1:]]
    return tuple(os.path.dirname(os.path.abspath(o)) + os.sep for o in origins if o)
