"""The embedded vLLM engine with relQuery scheduling."""

from relserve.engine.engine import Engine
from relserve.engine.handle import Progress, RelQueryHandle
from relserve.engine.scheduler_steps import SchedulerStep
from relserve.engine.settings import EngineSettings

__all__ = ["Engine", "EngineSettings", "Progress", "RelQueryHandle", "SchedulerStep"]
