"""Engine processes end with the process that started them.

vLLM starts its engine core (and, with several workers, worker processes) with multiprocessing.
If the parent is killed (``kill -9`` of ``relserve serve``, an OOM kill), nothing tells them to
stop: they keep their memory and CPU, owned by init. This module is a vLLM *general plugin*
(entry point ``vllm.general_plugins``), which vLLM runs in every process it starts; in a child
it asks the kernel to send SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``), and vLLM's
own SIGTERM handler shuts the process down. A process whose handler cannot run (its main thread
busy in native code: a worker was seen still running two minutes after its engine core died) is
killed by a watchdog thread ``GRACE_S`` seconds after its parent is gone.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1
#: the names vLLM gives the processes it starts (engine core, multiprocessing workers)
_VLLM_PROCESSES = ("EngineCore", "VllmWorker")
#: the process that installed it (a forked child inherits the value, not the parent's tie)
_installed_in: int | None = None
#: seconds a process whose parent died has for vLLM's own shutdown before it is killed
GRACE_S = 10.0


def install() -> None:
    """Tie this process's life to its parent's (no-op in the parent process and off Linux)."""
    global _installed_in
    if _installed_in == os.getpid() or not sys.platform.startswith("linux"):
        return
    parent = multiprocessing.parent_process()
    # only vLLM's own processes: vLLM loads plugins in the user's process too, which may itself
    # be a multiprocessing child with a life of its own
    if parent is None or not multiprocessing.current_process().name.startswith(_VLLM_PROCESSES):
        return
    _installed_in = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    threading.Thread(target=_kill_when_orphaned, args=(parent.pid,), name="relserve-lifetime", daemon=True).start()
    # the parent may have died before the request took effect
    if os.getppid() != parent.pid:
        os.kill(os.getpid(), signal.SIGTERM)


def _kill_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    time.sleep(GRACE_S)  # SIGTERM came with the parent's death: vLLM's own shutdown goes first
    os.kill(os.getpid(), signal.SIGKILL)
