"""OpenAI-compatible single calls: /v1/models, /v1/completions, /v1/chat/completions.

A list of prompts in one /v1/completions request is one relQuery. Prompts go through the
model's chat template (the engine serves instruction-tuned chat models), so /v1/completions
behaves like a one-message chat without a system prompt.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request

from relserve.functions import validate_schema
from relserve.results import RowResult
from relserve.server.api_relqueries import start_job
from relserve.server.batches import plan_prompts
from relserve.server.budget import call_max_tokens, check_template, prompts_cost
from relserve.server.errors import ApiError
from relserve.server.jobs import CANCELLED, FAILED, Job
from relserve.server.schemas import CallBody, ChatRequest, CompletionRequest, _OpenAIBase
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
    fields = CallBody(**{name: getattr(body, name) for name in shared}, **call)
    check_template("{prompt}", fields.system, tenant, "system message")
    spec = fields.call("{prompt}")
    cost = prompts_cost(prompts, spec, call_max_tokens(spec), state.engine)
    job, _ = await start_job(state, tenant, cost, partial(plan_prompts, fields, prompts), kind, fields.hints())
    return job


def _usage(rows: list[RowResult]) -> dict:
    p = sum(r.prompt_tokens for r in rows)
    c = sum(r.output_tokens for r in rows)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _finish_reason(r: RowResult) -> str:
    return r.finish_reason if r.finish_reason in ("stop", "length") else "stop"


def _raise_row_error(job: Job) -> None:
    """A prompt the engine could not run (too long, NULL) fails the request, as in OpenAI's API.
    A request the server could not finish (its engine died, the server is stopping) is a 503
    naming why: the prompt was not at fault, and the same request may be sent again.

    An answer that ran but does not parse (JSON cut off by max_tokens) is still returned as text."""
    if job.status in (FAILED, CANCELLED):
        raise ApiError(503, job.error or "the request was cancelled before it finished", {"Retry-After": "5"})
    failed = [r for r in job.rows if r is not None and r.error is not None and r.text is None]
    if failed:
        r = failed[0]
        raise ApiError(400, f"prompt {r.index}: {r.error}")


def _sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


@dataclass(frozen=True)
class _Shape:
    """How one endpoint lays out its answer; the rest of the response is the same for both."""

    #: the response's "object" when it is sent whole, and each streamed chunk's
    whole_object: str
    chunk_object: str
    #: a finished row as streamed chunks (given the chunk's head: id, object, created, model)
    chunks: Callable[[dict, RowResult], list[dict]]
    #: a finished row as one of the whole response's choices
    choice: Callable[[RowResult], dict]


async def _reply(job: Job, request: Request, stream: bool, rid: str, model: str, shape: _Shape) -> Any:
    """Streamed: each row's chunks as Server-Sent Events as it finishes, then ``[DONE]``;
    otherwise, once every row is done, one choice per row and the usage."""
    created = int(time.time())
    if stream:
        head = {"id": rid, "object": shape.chunk_object, "created": created, "model": model}

        async def events() -> AsyncIterator[bytes]:
            async for r in job.follow():
                for chunk in shape.chunks(head, r) if r is not None else ():
                    yield _sse(chunk)
            yield _sse("[DONE]")

        return JobStreamResponse(job, events(), SSE, cancel_on_disconnect=True)

    await wait_or_cancel(job, request)
    _raise_row_error(job)
    rows = [r for r in job.rows if r is not None]
    head = {"id": rid, "object": shape.whole_object, "created": created, "model": model}
    return {**head, "choices": [shape.choice(r) for r in rows], "usage": _usage(rows)}


@router.post("/completions", summary="OpenAI-compatible completions (a list of prompts is one relQuery)")
async def completions(
    body: CompletionRequest, request: Request, tenant: Tenant = Depends(current_tenant), state: ServerState = Depends(get_state)
):
    model = _check_model(body, state)
    job = await _start(state, tenant, body, body.prompts, "completion", max_tokens=body.max_tokens or DEFAULT_COMPLETION_TOKENS)
    return await _reply(job, request, body.stream, f"cmpl-{job.id}", model, _COMPLETION)


def _completion_choice(r: RowResult) -> dict:
    return {"text": r.text, "index": r.index, "logprobs": None, "finish_reason": _finish_reason(r)}


def _completion_chunks(head: dict, r: RowResult) -> list[dict]:
    chunk = {**head, "choices": [{**_completion_choice(r), "text": r.text or ""}]}
    if r.text is None:
        chunk["error"] = {"message": f"prompt {r.index}: {r.error}", "type": "invalid_request", "code": 400}
    return [chunk]


_COMPLETION = _Shape("text_completion", "text_completion", _completion_chunks, _completion_choice)


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
            validate_schema(schema, "response_format")  # a bad schema names the field it came in
    job = await _start(
        state, tenant, body, [body.user], "chat", function=function, json_schema=schema, system=body.system,
        max_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_CHAT_TOKENS,
    )
    return await _reply(job, request, body.stream, f"chatcmpl-{job.id}", model, _CHAT)


def _chat_choice(r: RowResult) -> dict:
    return {"index": 0, "message": {"role": "assistant", "content": r.text}, "finish_reason": _finish_reason(r)}


def _chat_chunks(head: dict, r: RowResult) -> list[dict]:
    if r.text is None:
        return [{**head, "choices": [], "error": {"message": r.error, "type": "invalid_request", "code": 400}}]
    return [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": r.text or ""}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish_reason(r)}]},
    ]


_CHAT = _Shape("chat.completion", "chat.completion.chunk", _chat_chunks, _chat_choice)
