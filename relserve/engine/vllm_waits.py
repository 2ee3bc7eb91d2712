"""How vLLM's processes wait for each other: spinning (vLLM's own) or sleeping until woken.

vLLM-CPU runs the model in a worker process and schedules in the engine-core process; each
reads the other's messages from a shared-memory queue. A reader that read anything in the last
second *spins* (``sched_yield`` in a loop) instead of sleeping on the queue's wake-up socket. On a
machine with as many cores as the model's threads (2 here) the spinning engine core takes CPU
from the model's threads while they compute, and every step waits for the slowest of them.
With ``EngineSettings.cpu_wait = "sleep"`` the readers block on the wake-up socket, which the
writer pings on every message (vLLM's own idle mode, from the first wait on).

This runs in vLLM's processes as part of relserve's vLLM general plugin
(``relserve.engine.lifetime.install``); the engine passes the setting through the environment
of the processes it starts (``WAIT_ENV``).
"""

from __future__ import annotations

import os

#: environment variable carrying ``EngineSettings.cpu_wait`` to vLLM's processes
WAIT_ENV = "RELSERVE_VLLM_WAIT"
_patched = False


def install() -> None:
    """Make vLLM's shared-memory queue readers sleep until woken (when ``WAIT_ENV`` says so)."""
    global _patched
    if _patched or os.environ.get(WAIT_ENV) != "sleep":
        return
    try:
        from vllm.distributed.device_communicators.shm_broadcast import SpinCondition
    except ImportError:  # another vLLM: leave its waits alone
        return
    init = SpinCondition.__init__

    def sleeping_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        if self.is_reader:
            self.busy_loop_s = 0  # every wait blocks on the wake-up socket

    SpinCondition.__init__ = sleeping_init
    _patched = True
