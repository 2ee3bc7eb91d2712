"""One measured pass: the sessions of one load against one contender, with its token counters
read before and after."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from e2e.prometheus import TokenReader
from e2e.sessions import Conn, StatementAnswer, run_sessions
from e2e.stats import pass_result
from e2e.workload import Scheduled


def measured_pass(
    work: list[Scheduled],
    connect: Callable[[int], Conn],
    execute: Callable[[Conn, Scheduled], StatementAnswer],
    tokens: TokenReader,
) -> dict[str, Any]:
    prompt0, cached0 = tokens()
    t0 = time.perf_counter()
    records, answers = run_sessions(work, connect, execute)
    wall = time.perf_counter() - t0
    prompt1, cached1 = tokens()
    return pass_result(records, answers, wall, prompt1 - prompt0, cached1 - cached0)
