"""Engine processes end with the process that started them.

vLLM starts its engine core (and, with several workers, worker processes) with multiprocessing.
If the parent is killed (``kill -9`` of ``relserve serve``, an OOM kill), nothing tells them to
stop: they keep their memory and CPU, owned by init. This module is a vLLM *general plugin*
(entry point ``vllm.general_plugins``), which vLLM runs in every process it starts; in a child
it asks the kernel to send SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``), and vLLM's
own SIGTERM handler shuts the process down.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
#: the names vLLM gives the processes it starts (engine core, multiprocessing workers)
_VLLM_PROCESSES = ("EngineCore", "VllmWorker")
_installed = False


def install() -> None:
    """Tie this process's life to its parent's (no-op in the parent process and off Linux)."""
    global _installed
    if _installed or not sys.platform.startswith("linux"):
        return
    parent = multiprocessing.parent_process()
    # only vLLM's own processes: vLLM loads plugins in the user's process too, which may itself
    # be a multiprocessing child with a life of its own
    if parent is None or not multiprocessing.current_process().name.startswith(_VLLM_PROCESSES):
        return
    _installed = True
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    # the parent may have died before the request took effect
    if os.getppid() != parent.pid:
        os.kill(os.getpid(), signal.SIGTERM)
