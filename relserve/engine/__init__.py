"""The embedded vLLM engine with relQuery scheduling."""

from relserve.engine.engine import Engine, default_engine, running_default_engine, set_default_engine
from relserve.engine.handle import Progress, RelQueryHandle
from relserve.engine.settings import EngineSettings

__all__ = ["Engine", "EngineSettings", "Progress", "RelQueryHandle", "default_engine", "running_default_engine", "set_default_engine"]
