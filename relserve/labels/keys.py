"""Whose per-template memory a relQuery shares: the keys of the label methods' memories (the
content-free prior, bootstrap's examples, pooled label means, the adaptive method's choice and
margins, the answer field chosen).

What a label method learns from a template's relQueries is kept per prefix-cache namespace (one
server tenant, or one ``cache_group``, or the library user's own process): it holds what a
tenant's rows scored, or reveals that a template was run, and another tenant must not read it.
"""

from __future__ import annotations

from relserve.functions import LLMCall


def template_key(call: LLMCall, model_id: str) -> tuple:
    """What a call's per-template measurements depend on: the model, the function, the template,
    the labels, the instruction, the user's examples, the system message, the prompt shape and
    its answer field; not its rows."""
    return (model_id, call.function.kind, call.template.source, call.choices, call.answer_instruction, call.examples_prefix,
            call.options.system, call.prompt_shape, call.options.answer_field)


def namespace_of(engine) -> str | None:
    """``engine``'s prefix-cache namespace (None: the process's own, or no engine yet)."""
    return getattr(engine, "prefix_cache_namespace", None)


def namespace_key(call: LLMCall, namespace: str | None, model_id: str) -> tuple:
    """``call_key`` for a namespace known without its engine (the planner's side)."""
    return (namespace, *template_key(call, model_id))


def call_key(call: LLMCall, engine, model_id: str) -> tuple:
    """A call's per-template memory in ``engine``'s prefix-cache namespace: a server tenant's
    (server/tenant_engine.py), None for the process's own."""
    return namespace_key(call, namespace_of(engine), model_id)
