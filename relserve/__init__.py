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

from relserve import settings  # noqa: E402
from relserve.backend import Backend, default_engine, set_default_engine  # noqa: E402
from relserve.engine import Engine, EngineSettings, RelQueryHandle  # noqa: E402
from relserve.policy import POLICY_NAMES, CostModel, PolicySettings  # noqa: E402
from relserve.relquery import RelQuery  # noqa: E402
from relserve.results import RelQueryResult, RelQueryStats, RowResult  # noqa: E402
from relserve.settings import configure  # noqa: E402

__all__ = [
    "POLICY_NAMES",
    "Backend",
    "Cluster",
    "CostModel",
    "Engine",
    "EngineSettings",
    "PolicySettings",
    "RelQuery",
    "RelQueryHandle",
    "RelQueryResult",
    "RelQueryStats",
    "RowResult",
    "default_engine",
    "set_default_engine",
    "Cancelled",
    "ConfigError",
    "EngineError",
    "RelServeError",
    "RowError",
    "TemplateError",
    "__version__",
    "configure",
    "settings",
]


def __getattr__(name: str):
    if name == "Cluster":  # engine replicas on Ray; imported only when used
        from relserve.cluster.cluster import Cluster

        return Cluster
    if name in ("llm_reduce", "llm_topk", "llm_join"):  # issue 26: relserve/operators, imported when used
        import relserve.operators

        return getattr(relserve.operators, name)
    raise AttributeError(f"module 'relserve' has no attribute {name!r}")
