"""OpenAI-compatible single calls: /v1/models, /v1/completions, /v1/chat/completions.

A list of prompts in one /v1/completions request is one relQuery. Prompts go through the
model's chat template (the engine serves instruction-tuned chat models), so /v1/completions
behaves like a one-message chat without a system prompt.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from relserve.results import RowResult
from relserve.server.batches import plan_prompts
from relserve.server.budget import call_max_tokens, check_template, prompts_cost
from relserve.server.errors import ApiError
from relserve.server.jobs import Job
from relserve.server.schemas import CallFields, ChatRequest, CompletionRequest, _OpenAIBase
from relserve.server.state import ServerState, current_tenant, get_state
from relserve.server.streaming import SSE, JobStreamResponse
from relserve.server.tenants import Tenant
from relserve.server.waiting import wait_or_cancel

router = APIRouter(prefix="/v1", tags=["openai"])

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_CHAT_TOKENS = 256


def _model_names(engine) -> set[str]:
    names = {engine.model_id, Path(str(engine.model_id)).name, "default"}
    settings = getattr(engine, "settings", None)
    if settings is not None:
        names.add(settings.model)
    return names


def _check_model(body: _OpenAIBase, state: ServerState) -> str:
    model_id = state.engine.model_id
    if body.model is not None and body.model not in _model_names(state.engine):
        raise ApiError(404, f"model {body.model!r} is not served here; this server serves {model_id!r}")
    return model_id


@router.get("/models", summary="The model this server serves")
async def models(tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)):
    return {"object": "list", "data": [{"id": state.engine.model_id, "object": "model", "created": 0, "owned_by": "relserve"}]}


async def _start(state: ServerState, tenant: Tenant, body: _OpenAIBase, prompts: list[str], kind: str, **call: Any) -> Job:
    """One relQuery for ``prompts``: the body's sampling settings and hints, plus ``call``'s fields."""
    state.check_size(len(prompts), tenant, "prompts")
    state.check_priority(body.priority, tenant)
    shared = ("temperature", "top_p", "seed", "priority", "deadline_s")
    fields = CallFields(**{name: getattr(body, name) for name in shared}, **call)
    check_template("{prompt}", fields.system, tenant, "system message")
    spec = fields.call("{prompt}")
    reservation = state.reserve(prompts_cost(prompts, spec, call_max_tokens(spec)), tenant)
    try:
        batch = await run_in_threadpool(plan_prompts, fields, prompts, state.engine.model_id, state.cache_for(tenant))
        job = Job(batch, tenant.name, kind, fields.hints(), state.tenancy(tenant))
        return state.launch(job, tenant, reservation)
    finally:
        state.jobs.release(reservation)


def _usage(rows: list[RowResult]) -> dict:
    p = sum(r.prompt_tokens for r in rows)
    c = sum(r.output_tokens for r in rows)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _finish_reason(r: RowResult) -> str:
    return r.finish_reason if r.finish_reason in ("stop", "length") else "stop"


def _raise_row_error(job: Job) -> None:
    """A prompt the engine could not run (too long, NULL) fails the request, as in OpenAI's API.

    An answer that ran but does not parse (JSON cut off by max_tokens) is still returned as text."""
    failed = [r for r in job.rows if r is not None and r.error is not None and r.text is None]
    if failed:
        r = failed[0]
        raise ApiError(400, f"prompt {r.index}: {r.error}")


def _sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


@router.post("/completions", summary="OpenAI-compatible completions (a list of prompts is one relQuery)")
async def completions(
    body: CompletionRequest, request: Request, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)
):
    model = _check_model(body, state)
    job = await _start(state, tenant, body, body.prompts, "completion", max_tokens=body.max_tokens or DEFAULT_COMPLETION_TOKENS)
    rid, created = f"cmpl-{job.id}", int(time.time())

    if body.stream:

        async def events() -> AsyncIterator[bytes]:
            async for r in job.follow():
                if r is None:
                    continue
                choice = {"text": r.text or "", "index": r.index, "logprobs": None, "finish_reason": _finish_reason(r)}
                chunk = {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
                if r.text is None:
                    chunk["error"] = {"message": f"prompt {r.index}: {r.error}", "type": "invalid_request", "code": 400}
                yield _sse(chunk)
            yield _sse("[DONE]")

        return JobStreamResponse(job, events(), SSE, cancel_on_disconnect=True)

    await wait_or_cancel(job, request)
    _raise_row_error(job)
    rows = [r for r in job.rows if r is not None]
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"text": r.text, "index": r.index, "logprobs": None, "finish_reason": _finish_reason(r)} for r in rows],
        "usage": _usage(rows),
    }


@router.post("/chat/completions", summary="OpenAI-compatible chat completions (single turn)")
async def chat_completions(
    body: ChatRequest, request: Request, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)
):
    model = _check_model(body, state)
    function, schema = "map", None
    if body.response_format is not None and body.response_format.type != "text":
        function = "extract"
        if body.response_format.type == "json_object":
            schema = {"type": "object"}
        else:
            spec = body.response_format.json_schema or {}
            schema = spec.get("schema", spec)
            if not schema:
                raise ApiError(400, "response_format json_schema needs a schema: {'json_schema': {'schema': {...}}}")
    job = await _start(
        state, tenant, body, [body.user], "chat", function=function, json_schema=schema, system=body.system,
        max_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_CHAT_TOKENS,
    )
    rid, created = f"chatcmpl-{job.id}", int(time.time())

    if body.stream:

        async def events() -> AsyncIterator[bytes]:
            async for r in job.follow():
                if r is None:
                    continue
                head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
                if r.text is None:
                    yield _sse({**head, "choices": [], "error": {"message": r.error, "type": "invalid_request", "code": 400}})
                    continue
                yield _sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": r.text or ""}, "finish_reason": None}]})
                yield _sse({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish_reason(r)}]})
            yield _sse("[DONE]")

        return JobStreamResponse(job, events(), SSE, cancel_on_disconnect=True)

    await wait_or_cancel(job, request)
    _raise_row_error(job)
    r = job.rows[0]
    assert r is not None
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text}, "finish_reason": _finish_reason(r)}],
        "usage": _usage([r]),
    }
