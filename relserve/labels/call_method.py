"""Which label method a call runs, and what of its label work belongs in its result-cache key: the
label policy of the call specification (relserve/functions.py asks it; it imports only the names
and the errors, so the specification can ask without importing the methods)."""

from __future__ import annotations

from collections.abc import Mapping

from relserve.errors import ConfigError
from relserve.labels.names import DEFAULT_LABEL_METHOD, LABEL_METHOD_ALIASES, LABEL_METHODS, LabelMethodName

#: the methods that score labels instead of decoding one
SCORING_METHODS: tuple[str, ...] = tuple(m for m in LABEL_METHODS if m != LabelMethodName.GENERATE)


def checked_method(method: str | None) -> str | None:
    """A call's ``method :=`` as the methods name it (old names accepted); ``ConfigError`` for
    one no method has."""
    method = LABEL_METHOD_ALIASES.get(method, method) if method is not None else None
    if method is not None and method not in LABEL_METHODS:
        raise ConfigError(f"method must be one of {', '.join(LABEL_METHODS)}, got {method!r}")
    return method


def label_method(closed: bool, temperature: float, method: str | None) -> str | None:
    """How a call picks its label: None for free text and JSON (``closed`` False); sampling
    (``temperature`` above 0) asks for variation, which scoring cannot give, so it decodes;
    else the method the call names, or the default."""
    if not closed:
        return None
    if temperature > 0:
        return LabelMethodName.GENERATE.value
    return method or DEFAULT_LABEL_METHOD


def cache_key_settings(method: str | None, *, prompt_shape: str, answer_field: str | None, template: str,
                       examples: str | None, plan_id: str | None) -> Mapping[str, object]:
    """What of a call's label work changes its answers, for its result-cache key (empty when it
    decodes: keys as before, so answers cached by earlier versions stay valid)."""
    if method is None or method == LabelMethodName.GENERATE:
        return {}
    out: dict[str, object] = {"method": method}
    if prompt_shape != "chat":
        out["prompt_shape"] = prompt_shape  # chat: keys as before issue 22
        if answer_field:
            out["answer_field"] = answer_field  # none: keys as before it existed
    if method != LabelMethodName.SCORE:
        # prior: the prior is measured on this template (and examples), so two templates
        # rendering one prompt differ; batch, bootstrap, adaptive: the answer also depends on
        # the call's label plan, read from its rows
        out["template"] = template
        out["examples"] = examples or None
        if plan_id is not None:
            out["label_plan"] = plan_id
    return out
