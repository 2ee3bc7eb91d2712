"""When the engine's processes die (found by issue 68's soak): the rows cut short say that the
engine died, not vLLM's "see stack trace (above)", which points at a log the caller never sees."""

from __future__ import annotations

from types import SimpleNamespace

from relserve.engine.engine import DEAD, Engine
from relserve.engine.handle import RelQueryHandle


async def test_a_row_cut_short_by_the_engines_death_says_the_engine_died():
    from vllm.v1.engine.exceptions import EngineDeadError

    engine = Engine.__new__(Engine)  # the row's code alone: no processes to start
    engine._llm = SimpleNamespace(errored=True)  # vLLM's client once its engine core is gone
    handle = RelQueryHandle("r", 1, "null", cancel=lambda: None)
    running = SimpleNamespace(handle=handle, times={}, cancel_reason=None)

    async def generation():
        raise EngineDeadError()  # "EngineCore encountered an issue. See stack trace (above) ..."
        yield

    await engine._row(running, 0, 5, generation())
    assert handle.row(0).error == DEAD
