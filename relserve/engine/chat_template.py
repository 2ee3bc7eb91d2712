"""Rendering user prompts through the model's chat template into token ids."""

from __future__ import annotations

from collections.abc import Sequence

_SENTINEL = "\x00relserve-prompt\x00"
#: "the prompter's own system message" (None means "no system message")
_OWN = object()


class ChatPrompter:
    """Applies the chat template to user prompts and tokenizes them, in bulk.

    The template is rendered once around a sentinel and split into a prefix and a suffix, so a
    relQuery of 10,000 rows costs one Jinja render, not 10,000. Templates that transform the
    message text (the sentinel does not come back exactly once) fall back to per-prompt renders.
    """

    def __init__(self, tokenizer, system: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.system = system
        self._split = self._split_template(system)

    def _messages(self, text: str, system: str | None) -> list[dict]:
        msgs = [{"role": "system", "content": system}] if system else []
        return msgs + [{"role": "user", "content": text}]

    def _split_template(self, system: str | None) -> tuple[str, str] | None:
        if getattr(self.tokenizer, "chat_template", None) is None:
            return ("", "")
        rendered = self.tokenizer.apply_chat_template(
            self._messages(_SENTINEL, system), tokenize=False, add_generation_prompt=True
        )
        if rendered.count(_SENTINEL) != 1:
            return None
        prefix, suffix = rendered.split(_SENTINEL)
        return prefix, suffix

    def text(self, prompt: str, system: str | None | object = _OWN) -> str:
        if system is _OWN:
            system = self.system
        split = self._split if system == self.system else self._split_template(system)
        if split is not None:
            return split[0] + prompt + split[1]
        return self.tokenizer.apply_chat_template(
            self._messages(prompt, system), tokenize=False, add_generation_prompt=True
        )

    def token_ids(self, prompts: Sequence[str], system: str | None | object = _OWN) -> list[list[int]]:
        if not prompts:
            return []
        texts = [self.text(p, system) for p in prompts]
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def prefix_text(self, system: str | None | object = _OWN) -> str:
        """The chat template's text before the user's words (shared by every prompt)."""
        if system is _OWN:
            system = self.system
        split = self._split if system == self.system else self._split_template(system)
        return split[0] if split else ""


class ChatTokenizing:
    """Token ids of user prompts for an engine that has a ``tokenizer``: one ``ChatPrompter``
    per system message, kept (the Engine and the Ray Cluster share this)."""

    tokenizer: object
    _prompters: dict

    def _prompter(self, system: str | None) -> ChatPrompter:
        p = self._prompters.get(system)
        if p is None:
            p = self._prompters[system] = ChatPrompter(self.tokenizer, system)
        return p

    def prompt_token_ids(self, text: str, system: str | None = None) -> list[int]:
        """The token ids the engine sees for a user prompt (chat template applied)."""
        return self._prompter(system).token_ids([text])[0]

    def prompt_token_ids_many(self, texts: Sequence[str], system: str | None = None) -> list[list[int]]:
        """``prompt_token_ids`` for many prompts in one tokenizer call."""
        return self._prompter(system).token_ids(list(texts))
