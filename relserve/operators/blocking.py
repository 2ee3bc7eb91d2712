"""Blocking for a semantic join: keep each left row's k most similar right rows by embedding.

The embeddings are relserve's shipped sentence encoder's (relserve/sentence_encoder.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.errors import ConfigError
from relserve.operators.values import Value
from relserve.sentence_encoder import encode
from relserve.template import format_value


def embed(texts: Sequence[str], batch: int = 64):
    """Unit-length embeddings (a torch tensor, one row per text)."""
    import torch

    return torch.from_numpy(encode(texts, batch=batch))


def block(left: Sequence[Value], right: Sequence[Value], k: int) -> list[tuple[int, int]]:
    """(left, right) positions of each left row's ``k`` most similar right rows (NULLs: none)."""
    import torch

    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(f"llm_join: block must be a positive integer (right rows kept per left row), got {k!r}")
    li = [i for i, v in enumerate(left) if v is not None]
    ri = [j for j, v in enumerate(right) if v is not None]
    if not li or not ri:
        return []
    text = lambda v: v if isinstance(v, str) else format_value(v)  # noqa: E731
    sims = embed([text(left[i]) for i in li]) @ embed([text(right[j]) for j in ri]).T
    top = torch.topk(sims, min(k, len(ri)), dim=1).indices.tolist()
    return sorted((li[a], ri[b]) for a, row in enumerate(top) for b in row)


@dataclass
class KeptPairs:
    """The pairs ``keep_met_pairs`` kept, and what it counted on the way."""

    #: positions of the kept pairs among the values given
    positions: list[int] = field(default_factory=list)
    #: distinct pairs met, and kept
    pairs_met: int = 0
    pairs_kept: int = 0
    #: distinct pairs dropped because a value was NULL
    null_pairs: int = 0
    #: distinct left parts, and distinct right parts
    left_values: int = 0
    right_values: int = 0
    embed_s: float = 0.0


def keep_met_pairs(values: Sequence[tuple], left: Sequence[int], right: Sequence[int], k: int) -> KeptPairs:
    """Blocking among the pairs a join met: per distinct left part (the values at positions
    ``left`` of each tuple), the ``k`` most similar distinct right parts (positions ``right``)
    it was met with; a pair with a NULL value is dropped, not kept."""
    import torch

    parts: list[tuple[tuple, tuple] | None] = []
    met: dict[tuple, dict[tuple, None]] = {}
    for v in values:
        lp, rp = tuple(v[p] for p in left), tuple(v[p] for p in right)
        if any(x is None for x in lp + rp):
            parts.append(None)
            continue
        parts.append((lp, rp))
        met.setdefault(lp, {})[rp] = None
    out = KeptPairs(
        pairs_met=len({pr for pr in parts if pr is not None}),
        null_pairs=len({tuple(v) for v, pr in zip(values, parts) if pr is None}),
    )
    if not met:
        return out
    lefts = list(met)
    rights = list(dict.fromkeys(r for rs in met.values() for r in rs))
    out.left_values, out.right_values = len(lefts), len(rights)
    t0 = time.perf_counter()
    sims = embed([_part_text(p) for p in lefts]) @ embed([_part_text(p) for p in rights]).T
    out.embed_s = time.perf_counter() - t0
    where = {r: j for j, r in enumerate(rights)}
    kept: set[tuple[tuple, tuple]] = set()
    for i, lp in enumerate(lefts):
        cols = [where[r] for r in met[lp]]
        top = torch.topk(sims[i, cols], min(k, len(cols))).indices.tolist()
        kept.update((lp, rights[cols[t]]) for t in top)
    out.pairs_kept = len(kept)
    out.positions = [i for i, pr in enumerate(parts) if pr is not None and pr in kept]
    return out


def _part_text(part: tuple) -> str:
    return "\n".join(v if isinstance(v, str) else format_value(v) for v in part)
