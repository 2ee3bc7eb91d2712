"""Prompt tokens as the engine will see them, before anything runs (issue 47).

The engine tokenizes what it is sent with the model's chat template and the system message, or,
for a label scored in one of the scoring layouts, without the chat template and with the answer
field after the prompt (relserve/prompt_shapes.py). ``PromptTokenizer`` does exactly that, through
the engine's own function (``relserve.engine.admission.layout_token_ids``), with the running
engine's tokenizer or, when no engine runs in this process, the model's tokenizer loaded on its
own (a fraction of a second; no engine is started). So a count here is the engine's count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relserve.engine.admission import layout_token_ids
from relserve.errors import ConfigError, RowError
from relserve.functions import LLMCall
from relserve.label_names import SCORING_METHODS
from relserve.prompt_rendering import null_error, render
from relserve.prompt_shapes import AUTO_ANSWER_FIELD, answer_field_text
from relserve.relquery import encodable


@dataclass(frozen=True)
class Layout:
    """How the engine lays out a call's prompts: the chat template (``shape`` "chat"), or a
    scoring layout ending with ``answer_field``."""

    shape: str = "chat"
    system: str | None = None
    answer_field: str = "Answer:"
    #: the answer field is relserve's to choose and not chosen yet: ``answer_field`` stands in
    field_unknown: bool = False


def layout_of(call: LLMCall, method: str | None) -> Layout:
    """The layout of ``call``'s prompts when its relQuery runs label method ``method`` (the
    planner's: relserve/labels/resolution.method_ran). A scoring method lays the prompt out in the call's
    prompt shape; decoding (``generate``, and map / extract) always uses the chat template."""
    system = call.options.system
    if method not in SCORING_METHODS or call.prompt_shape == "chat":
        return Layout("chat", system)
    name = call.options.answer_field
    if name == AUTO_ANSWER_FIELD:
        return Layout(call.prompt_shape, system, answer_field_text(None), field_unknown=True)
    return Layout(call.prompt_shape, system, answer_field_text(name))


@dataclass
class PromptTokenizer:
    """Token ids of prompts as the engine computes them (see the module docstring)."""

    tokenizer: Any
    #: the ``ChatPrompter`` of a system message
    prompter: Callable[[str | None], Any]
    #: "engine" or "tokenizer <model id>"
    source: str

    def ids(self, prompts: Sequence[str], layout: Layout = Layout()) -> list[list[int]]:
        return layout_token_ids(self.tokenizer, self.prompter(layout.system), list(prompts), layout.system,
                                layout.shape, layout.answer_field)

    def counts(self, prompts: Sequence[str], layout: Layout = Layout()) -> list[int]:
        return [len(ids) for ids in self.ids(prompts, layout)]

    def text_tokens(self, text: str) -> int:
        """Tokens of a piece of text on its own (no template): what it adds inside a prompt,
        to within a token at its two ends."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def engine_tokenizer(engine: object) -> PromptTokenizer:
    """The running engine's own tokenizer and chat prompters."""
    return PromptTokenizer(engine.tokenizer, engine._prompter, "engine")


_loaded: dict[str, PromptTokenizer] = {}
_lock = threading.Lock()


def model_tokenizer(model: str | None = None) -> PromptTokenizer:
    """The tokenizer of ``model`` (None: the default model) loaded without an engine, kept for
    the life of the process. ConfigError when the model is not prepared."""
    from relserve.model import resolve_model

    spec = resolve_model(model, prepare=False)
    with _lock:
        got = _loaded.get(spec.path)
        if got is not None:
            return got
    from transformers import AutoTokenizer

    from relserve.engine.chat_template import ChatPrompter

    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    prompters: dict[str | None, ChatPrompter] = {}

    def prompter(system: str | None) -> ChatPrompter:
        p = prompters.get(system)
        if p is None:
            p = prompters[system] = ChatPrompter(tokenizer, system)
        return p

    made = PromptTokenizer(tokenizer, prompter, f"tokenizer {spec.model_id}")
    with _lock:
        return _loaded.setdefault(spec.path, made)


def prompt_tokenizer(engine: object = None, model: str | None = None) -> PromptTokenizer:
    """The engine's tokenizer when ``engine`` is given (and has one), else the model's."""
    if engine is not None and getattr(engine, "tokenizer", None) is not None and hasattr(engine, "_prompter"):
        return engine_tokenizer(engine)
    try:
        return model_tokenizer(model)
    except ConfigError:
        raise
    except Exception as e:  # a broken model folder: say so rather than guess a count
        raise ConfigError(f"cannot load the tokenizer of model {model or 'smollm2'!r} to count tokens: {e}") from None


def count_row_tokens(call: LLMCall, rows: Sequence[tuple], tokens: PromptTokenizer) -> list[int | str]:
    """Each row's prompt tokens as the engine would see them for ``call`` (its layout: the chat
    template and system message, or the scoring shape of a filter / classify), or the error the
    row gets (a NULL placeholder value) as text. One row at a time: no deduplication, result
    cache or bootstrapped examples (EXPLAIN counts those for a whole call)."""
    layout = layout_of(call, call.label_method)
    out: list[int | str] = [0] * len(rows)
    good: list[int] = []
    texts: list[str] = []
    for i, values in enumerate(rows):
        err = null_error(call, values)
        if err is not None:
            out[i] = err
            continue
        try:
            text = encodable(render(call, values))
        except RowError as e:
            text = e
        if isinstance(text, RowError):
            out[i] = str(text)
            continue
        texts.append(text)
        good.append(i)
    for i, n in zip(good, tokens.counts(texts, layout)):
        out[i] = n
    return out
