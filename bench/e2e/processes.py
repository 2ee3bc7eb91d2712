"""Servers the benchmark starts (vLLM's OpenAI server, ``relserve serve``): ports, readiness, stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 900.0) -> None:
    """Until ``url`` answers 200; fails at once if the server exits first."""
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it answered {url}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no answer from {url} after {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    """SIGINT to the server's process group (it started its own session), SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def vllm_env() -> dict[str, str]:
    """The environment vLLM runs in: every core bound, offline, quiet."""
    env = dict(os.environ)
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", cores)  # all cores, as relserve's engine does
    env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return env
