"""The result cache's disk: a small tmpfs the harness can fill to the last byte and free again.

The mount is made in a mount namespace private to the harness and its children (the server,
PostgreSQL), so no other process on the machine sees it and it goes away with them even if the
harness is killed. Mounting needs root; without it ``CacheDisk.open`` says why and the run goes
on with the cache on an ordinary folder and the full-disk fault left out.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_CLONE_NEWNS = 0x00020000
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_FILLER = "filler.bin"


def enter_private_mount_namespace() -> str | None:
    """Give this process (and what it starts from now on) mounts of its own; None when done,
    else why not. Call it before any thread starts (unshare refuses a threaded process)."""
    if os.geteuid() != 0:
        return "not root: no tmpfs for the result cache"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}"
    # mounts made here must not propagate back to the machine's namespace
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"mount --make-rprivate / failed: {os.strerror(ctypes.get_errno())}"
    return None


class CacheDisk:
    """A folder for ``$RELSERVE_HOME`` (the result cache lives there), on a tmpfs of ``size_mb``."""

    def __init__(self, size_mb: int) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="relserve-soak-home-"))
        self.size_mb = size_mb
        self.tmpfs = False
        #: why there is no tmpfs (None: there is one)
        self.why_not: str | None = None

    def open(self, private_namespace_problem: str | None) -> CacheDisk:
        if private_namespace_problem is not None:
            self.why_not = private_namespace_problem
            return self
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", str(self.path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            self.why_not = f"mount -t tmpfs failed: {done.stderr.strip()}"
        else:
            self.tmpfs = True
        return self

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self) -> int:
        """Take every free byte (a file of zeros); returns how many were taken."""
        taken = 0
        fd = os.open(self.path / _FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            block = b"\0" * (1 << 16)
            while True:
                try:
                    taken += os.write(fd, block)
                except OSError:  # ENOSPC: the last block did not fit, try smaller ones
                    if len(block) == 1:
                        break
                    block = block[: len(block) // 16 or 1]
        finally:
            os.close(fd)
        return taken

    def unfill(self) -> None:
        (self.path / _FILLER).unlink(missing_ok=True)

    def close(self) -> None:
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        shutil.rmtree(self.path, ignore_errors=True)
