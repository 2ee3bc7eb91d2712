"""HTTP errors with messages that name the problem, in the OpenAI error shape
``{"error": {"message": ..., "type": ..., "code": <status>}}`` so OpenAI clients show them."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from relserve.budget import BudgetExceeded
from relserve.errors import ConfigError, EngineError, RowError, TemplateError
from relserve.server.budget import DailyBudgetExceeded, LimitExceeded, RequestTooLarge
from relserve.server.tenants import AuthError

_TYPES = {400: "invalid_request", 401: "authentication_error", 404: "not_found", 413: "request_too_large",
          422: "invalid_request", 429: "rate_limit", 503: "unavailable"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": _TYPES.get(status, "error"), "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def describe_validation(errors: list[dict[str, Any]]) -> tuple[int, str]:
    """A readable summary of pydantic's errors: 400 for a body that is not JSON, else 422."""
    for e in errors:
        if e.get("type") == "json_invalid":
            detail = (e.get("ctx") or {}).get("error", "")
            pos = e["loc"][-1] if e.get("loc") else "?"
            return 400, f"request body is not valid JSON: {detail} (at character {pos})"
    parts = []
    for e in errors[:10]:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        msg = e.get("msg", "invalid")
        if e.get("type") == "missing" and not loc:
            parts.append("the request body is missing: send a JSON object with Content-Type: application/json")
            continue
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        parts.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    return 422, "invalid request: " + "; ".join(parts) + more


def install_error_handlers(app: FastAPI, on_reject=None) -> None:
    def _reject(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        if on_reject is not None:
            on_reject(status)
        return error_response(status, message, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = describe_validation(list(exc.errors()))
        return _reject(status, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such endpoint: {request.method} {request.url.path}"
        if exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        return _reject(exc.status_code, message, getattr(exc, "headers", None))

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return _reject(exc.status, exc.message, exc.headers)

    @app.exception_handler(AuthError)
    async def _auth(request: Request, exc: AuthError) -> JSONResponse:
        return _reject(401, str(exc), {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestTooLarge)
    async def _too_large(request: Request, exc: RequestTooLarge) -> JSONResponse:
        return _reject(413, str(exc))

    @app.exception_handler(BudgetExceeded)
    async def _budget(request: Request, exc: BudgetExceeded) -> JSONResponse:
        return _reject(422, str(exc))

    @app.exception_handler(DailyBudgetExceeded)
    async def _daily(request: Request, exc: DailyBudgetExceeded) -> JSONResponse:
        return _reject(429, str(exc), {"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(LimitExceeded)
    async def _limit(request: Request, exc: LimitExceeded) -> JSONResponse:
        return _reject(429, str(exc), {"Retry-After": "1"})

    @app.exception_handler(EngineError)
    async def _engine(request: Request, exc: EngineError) -> JSONResponse:
        # the engine failed (its processes died): the server cannot serve the request now, and
        # the same request may be sent again once it has restarted
        return _reject(503, str(exc), {"Retry-After": "5"})

    for cls in (TemplateError, ConfigError, RowError):

        @app.exception_handler(cls)
        async def _bad_input(request: Request, exc: Exception) -> JSONResponse:
            return _reject(400, str(exc))
