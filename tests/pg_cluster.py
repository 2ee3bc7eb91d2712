"""A throwaway PostgreSQL 15 cluster for tests: initdb into a temp dir, start on a free
loopback port with its socket in that dir, stop and delete afterwards.

PostgreSQL refuses to run as root, so as root the server commands run as the ``postgres``
OS user (``runuser``), which owns the temp dir.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

PG_BIN = Path(os.environ.get("RELSERVE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def missing_requirements() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL 15 is not installed ({PG_BIN}/postgres missing); scripts/install.sh --test installs it"
    lib = subprocess.run([str(PG_BIN / "pg_config"), "--pkglibdir"], capture_output=True, text=True).stdout.strip() if (PG_BIN / "pg_config").exists() else "/usr/lib/postgresql/15/lib"
    if not (Path(lib) / "plpython3.so").exists():
        return "plpython3u is not installed (postgresql-plpython3-15); scripts/install.sh --test installs it"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="relserve-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o755)

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        args = [str(c) for c in cmd]
        if self.as_root:
            args = ["runuser", "-u", "postgres", "--", *args]
        out = subprocess.run(args, capture_output=True, text=True, cwd=self.root)
        if out.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}\n{tail}")
        return out

    def start(self) -> PgCluster:
        self._run(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=20"
        self._run(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.root / "server.log", "-o", opts, "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(PG_BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    @property
    def log(self) -> str:
        p = self.root / "server.log"
        return p.read_text() if p.exists() else ""
