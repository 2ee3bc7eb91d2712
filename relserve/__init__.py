"""relserve: LLM calls over table rows, planned as relQueries and served by an embedded vLLM."""

from relserve.errors import (
    Cancelled,
    ConfigError,
    EngineError,
    RelServeError,
    RowError,
    TemplateError,
)

__version__ = "0.1.0"

__all__ = [
    "Cancelled",
    "ConfigError",
    "EngineError",
    "RelServeError",
    "RowError",
    "TemplateError",
    "__version__",
]
