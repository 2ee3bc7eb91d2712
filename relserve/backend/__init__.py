"""Where a call runs: the ``Backend`` protocol and the one default-backend registry."""

from relserve.backend.protocol import Backend
from relserve.backend.registry import default_engine, running_default_engine, set_default_engine

__all__ = ["Backend", "default_engine", "running_default_engine", "set_default_engine"]
