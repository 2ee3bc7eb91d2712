"""Waiting for a job in a non-streaming request, cancelling it if the client goes away."""

from __future__ import annotations

import asyncio

from fastapi import Request

from relserve.server.jobs import Job

_POLL_S = 0.25


async def wait_or_cancel(job: Job, request: Request, timeout: float | None = None, cancel: bool = True) -> bool:
    """Wait until ``job`` ends; if the client disconnects first, cancel the job (when ``cancel``)
    and stop waiting. False on timeout."""
    loop = asyncio.get_running_loop()
    end = None if timeout is None else loop.time() + timeout
    while not job.done:
        step = _POLL_S if end is None else max(min(_POLL_S, end - loop.time()), 0.0)
        try:
            await asyncio.wait_for(job.wait(), step)
        except TimeoutError:
            pass
        if job.done:
            break
        if await request.is_disconnected():
            if cancel:
                job.cancel("cancelled: the client disconnected")
                await job.wait()
            break
        if end is not None and loop.time() >= end:
            return False
    return True
