"""Errors with messages that name the problem. All derive from ``RelServeError``."""


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
