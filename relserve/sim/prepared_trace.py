"""Turning a trace into what the simulator needs per request: prompt length, block hashes, output length.

Prompts are rendered by a caller-supplied ``render(query, row) -> str`` and tokenized by a
caller-supplied ``tokenize(text) -> list[int]``, so the simulator sees the real model's token
counts and prefix sharing when the caller wires the real chat template and tokenizer. The
defaults (plain template text, ``word_tokenizer``) need nothing installed.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from relserve.block_hashes import BlockHash, block_hashes
from relserve.call_key import template_call_key
from relserve.errors import ConfigError
from relserve.template import Template
from relserve.workloads.traces import TraceQuery

Tokenizer = Callable[[str], Sequence[int]]
Renderer = Callable[[TraceQuery, Mapping[str, object]], str]
#: measured output lengths: relQuery id -> one length per row, or a function (query, row index) -> length
OutputLengths = Mapping[str, Sequence[int]] | Callable[[TraceQuery, int], int]

_WORD = re.compile(r"\w+|[^\w\s]")


def word_tokenizer(text: str) -> list[int]:
    """A deterministic stand-in tokenizer: words and punctuation marks, each hashed to an int.

    Real subword tokenizers give somewhat more tokens per text; wire the model's tokenizer for
    calibrated runs.
    """
    return [zlib.crc32(w.encode()) for w in _WORD.findall(text)]


@lru_cache(maxsize=1024)
def _parsed(template: str) -> Template:
    return Template.parse(template)


def template_renderer(wrap: Callable[[str], str] | None = None) -> Renderer:
    """Render a row with the query's template, then optionally ``wrap`` it (e.g. a chat template)."""

    def render(query: TraceQuery, row: Mapping[str, object]) -> str:
        text = _parsed(query.template).render(row)
        return wrap(text) if wrap is not None else text

    return render


@dataclass(frozen=True, slots=True)
class PreparedRelQuery:
    id: str
    arrival: float
    max_tokens: int
    #: per request (row): prompt length in tokens
    prompt_tokens: tuple[int, ...]
    #: per request: chained hashes of its full prompt blocks
    hashes: tuple[tuple[BlockHash, ...], ...]
    #: per request: how many tokens it will generate (1 .. max_tokens)
    output_tokens: tuple[int, ...]
    #: the call it runs (its template and max_tokens, keyed as ``RelQuery`` keys a template's)
    call_key: str = ""
    #: the size the policy sees (``Req.rel_size``) when the requests are a sample of a bigger
    #: relQuery (an estimate's replay of a long queue); 0: its requests' count
    sampled_from: int = 0

    @property
    def size(self) -> int:
        return len(self.prompt_tokens)

    @property
    def rel_size(self) -> int:
        return self.sampled_from or self.size

    def at(self, arrival: float) -> PreparedRelQuery:
        """The same relQuery arriving at another time (for isolated runs)."""
        return PreparedRelQuery(self.id, arrival, self.max_tokens, self.prompt_tokens, self.hashes, self.output_tokens,
                                self.call_key, self.sampled_from)


@dataclass(frozen=True, slots=True)
class PreparedTrace:
    relqueries: tuple[PreparedRelQuery, ...]
    block_size: int

    @property
    def num_requests(self) -> int:
        return sum(q.size for q in self.relqueries)


def _output_length(query: TraceQuery, row: int, source: OutputLengths | None) -> int:
    if source is None:
        n = query.max_tokens
    elif callable(source):
        n = int(source(query, row))
    else:
        lengths = source.get(query.id)
        if lengths is None:
            n = query.max_tokens
        elif len(lengths) != len(query.rows):
            raise ConfigError(
                f"output_lengths[{query.id!r}] has {len(lengths)} entries but the relQuery has {len(query.rows)} rows"
            )
        else:
            n = int(lengths[row])
    # the engine always produces at least one token and never more than max_tokens
    return min(max(n, 1), query.max_tokens)


def prepare_trace(
    trace: Sequence[TraceQuery],
    *,
    block_size: int,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    output_lengths: OutputLengths | None = None,
) -> PreparedTrace:
    """Render and tokenize every row once (identical prompts are tokenized once), sorted by arrival."""
    tokenize = tokenize or word_tokenizer
    render = render or template_renderer()
    memo: dict[str, tuple[int, tuple[BlockHash, ...]]] = {}
    out = []
    for q in sorted(trace, key=lambda q: q.arrival_s):
        lens, hashes = [], []
        for row in q.rows:
            text = render(q, row)
            hit = memo.get(text)
            if hit is None:
                toks = list(tokenize(text))
                if not toks:
                    raise ConfigError(f"relQuery {q.id!r}: a row rendered to an empty prompt")
                hit = memo[text] = (len(toks), block_hashes(toks, block_size))
            lens.append(hit[0])
            hashes.append(hit[1])
        outs = tuple(_output_length(q, i, output_lengths) for i in range(len(q.rows)))
        out.append(PreparedRelQuery(q.id, q.arrival_s, q.max_tokens, tuple(lens), tuple(hashes), outs,
                                    template_call_key(q.template, q.max_tokens)))
    return PreparedTrace(tuple(out), block_size)
