"""How many tokens a prompt may hold: the engine's context minus room for the answer.

Operators that fold many values into one prompt (``llm_reduce``) must know, before anything
runs, which values fit together. They count tokens with the planner's ``TokenSource`` (the
engine's own tokenizer when it runs, else the model's tokenizer, else an approximation), so
EXPLAIN and the run agree and EXPLAIN never starts the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relserve.backend.protocol import Backend
from relserve.engine.settings import EngineSettings
from relserve.errors import ConfigError
from relserve.planner.tokens import TokenSource, token_source

#: the context an estimate assumes when no engine runs: the one the default engine would get
DEFAULT_CONTEXT: int = EngineSettings.model_fields["max_model_len"].default
#: tokens kept free besides the answer: tokenizing pieces apart and together can differ by a
#: few tokens at the seams, and the engine refuses a prompt that overflows by one
SAFETY_TOKENS = 16


@dataclass(frozen=True)
class TokenCounter:
    """Token counts of bare texts (no chat template), from a ``TokenSource`` that adds one."""

    source: TokenSource
    #: tokens the chat template adds around any text (measured on the empty prompt)
    wrapper: int

    @classmethod
    def of(cls, engine: Backend | None = None, model: str | None = None) -> TokenCounter:
        source = token_source(engine, model)
        return cls(source, len(source.tokenize("")))

    @property
    def kind(self) -> str:
        return self.source.kind

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [max(0, len(ids) - self.wrapper) for ids in self.source.many(list(texts))]

    def count_each(self, lists: Sequence[Sequence[str]]) -> list[list[int]]:
        """``count`` of each list of texts, all tokenized in one pass."""
        counts = self.count([t for texts in lists for t in texts])
        out, pos = [], 0
        for texts in lists:
            out.append(counts[pos : pos + len(texts)])
            pos += len(texts)
        return out

    def prompt(self, text: str) -> int:
        """Tokens of a whole prompt as the engine sees it (chat template included)."""
        return len(self.source.tokenize(text))


def context_of(engine: Backend | None, override: int | None) -> int:
    """The context a prompt plus its answer must fit in (``override`` may only shrink it)."""
    limit = getattr(engine, "max_model_len", None) if engine is not None else None
    limit = int(limit) if isinstance(limit, int) and limit > 0 else DEFAULT_CONTEXT
    if override is None:
        return limit
    if not isinstance(override, int) or isinstance(override, bool) or override <= 0:
        raise ConfigError(f"context_tokens must be a positive integer, got {override!r}")
    return min(limit, override)


def item_budget(context: int, max_tokens: int, overhead: int, who: str) -> int:
    """Tokens left for the folded values of one prompt.

    A tree reduction only ends if every prompt can hold at least two partial answers (each at
    most ``max_tokens`` long): otherwise a level would not shrink the group. Checked up front.
    """
    budget = context - max_tokens - overhead - SAFETY_TOKENS
    need = 2 * (max_tokens + 4)
    if budget < need:
        raise ConfigError(
            f"{who}: a context of {context} tokens leaves {max(budget, 0)} tokens for values after the template "
            f"({overhead} tokens) and the answer (max_tokens={max_tokens}); a tree reduction needs room for two "
            f"partial answers ({need} tokens): lower max_tokens or shorten the template"
        )
    return budget


def placeholders(template: str, who: str, count: int, example: str) -> None:
    """An operator's template names exactly ``count`` distinct placeholders (checked before
    ``make_call``, so the error names the operator, not the row-level function it runs)."""
    from relserve.errors import TemplateError
    from relserve.template import Template

    parsed = Template.parse(template)
    if len(parsed.columns) != count:
        what = "one placeholder" if count == 1 else f"{count} placeholders"
        raise TemplateError(
            f"{who}: template {template!r} must have exactly {what}, e.g. {example!r}; "
            f"it has {len(parsed.columns)}" + (f": {', '.join(parsed.columns)}" if parsed.columns else "")
        )
