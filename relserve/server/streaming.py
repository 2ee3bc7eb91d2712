"""Streaming a job's rows as they finish, as NDJSON lines or server-sent events.

A stream that owns its job (the client submitted it and is reading it) cancels the job when
the client goes away: uvicorn reports the disconnect, Starlette stops the response, and the
response's ``finally`` cancels the unfinished rows in the engine.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from relserve.replies import StreamStart
from relserve.server.jobs import Job

NDJSON = "application/x-ndjson"
SSE = "text/event-stream"
_SSE_PING_S = 15.0


def ndjson_line(obj: dict[str, object]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, default=str) + "\n").encode()


def sse_event(event: str, obj: dict[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(obj, ensure_ascii=False, default=str)}\n\n".encode()


class JobStreamResponse(StreamingResponse):
    """A streaming response that cancels ``job`` if it ends before the job does."""

    def __init__(
        self,
        job: Job,
        events: AsyncIterator[bytes],
        media_type: str,
        cancel_on_disconnect: bool,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})}
        super().__init__(events, status_code=status_code, media_type=media_type, headers=headers)
        self.job = job
        self.cancel_on_disconnect = cancel_on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.cancel_on_disconnect and not self.job.done:
                self.job.cancel("cancelled: the client disconnected")


def job_stream(
    job: Job,
    fmt: str,
    *,
    header: StreamStart,
    row: Callable[[Any], dict[str, Any]],
    done: Callable[[Job], dict[str, object]],
    start: int = 0,
    cancel_on_disconnect: bool = True,
    row_event: str = "row",
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> JobStreamResponse:
    """``header`` first, then ``row(r)`` per finished row, then ``done(job)``; as NDJSON or SSE."""
    sse = fmt == "sse"

    def encode(kind: str, obj: dict[str, object]) -> bytes:
        return sse_event(kind, obj) if sse else ndjson_line({"event": kind, **obj})

    async def events() -> AsyncIterator[bytes]:
        yield encode(header.event, header.to_json())
        async for r in job.follow(start, idle_s=_SSE_PING_S if sse else None):
            if r is None:
                yield b": ping\n\n"  # a comment line keeps proxies from closing an idle stream
            else:
                yield encode(row_event, row(r))
        yield encode("done", done(job))

    return JobStreamResponse(job, events(), SSE if sse else NDJSON, cancel_on_disconnect, status_code, headers)
