"""Refuse request bodies larger than the tenant's ``max_body_bytes`` with 413, before parsing.

Checked twice: the ``Content-Length`` header (answered at once, the body is never read) and the
bytes actually received (a chunked body has no length up front).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit_for: Callable[[str | None], int], on_reject: Callable[[int], None] | None = None) -> None:
        self.app = app
        self.limit_for = limit_for
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization")
        limit = self.limit_for(auth.decode("latin-1") if auth else None)
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            if self.on_reject is not None:
                self.on_reject(413)
            await _send_413(send, int(length), limit)
            return
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # FastAPI re-raises an HTTPException met while reading the body
                    raise HTTPException(413, _message(seen, limit, partial=True))
            return message

        await self.app(scope, limited_receive, send)


def _message(size: int, limit: int, partial: bool = False) -> str:
    got = f"more than {size}" if partial else str(size)
    return f"request body too large: {got} bytes, the limit is {limit} bytes; send fewer rows per request"


async def _send_413(send: Send, size: int, limit: int) -> None:
    body = json.dumps({"error": {"message": _message(size, limit), "type": "request_too_large", "code": 413}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})
