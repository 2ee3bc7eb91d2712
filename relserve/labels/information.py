"""How much a label call's answers tell its rows apart: the mutual information between rows and
answers (Sorensen et al., "An Information-theoretic Approach to Prompt Engineering Without
Ground Truth Labels", ACL 2022), read without labels.

It is the entropy of the mean answer minus the mean entropy of each row's answer (nats): high
when each row gets a confident answer and the answers differ between rows, 0 when every row
gets the same distribution over the labels, whatever that distribution is. The adaptive method
chooses its layout by it (relserve/labels/adaptive.py), and every method's answers are
checked with it for guesses (relserve/labels/guesses.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def mutual_information(margins: Sequence[float]) -> float:
    """I(row; answer) for two answers whose log-odds per row are ``margins``: the entropy of the
    mean answer minus the mean entropy of each row's answer (nats)."""
    ps = [1 / (1 + math.exp(-max(min(m, 50.0), -50.0))) for m in margins if math.isfinite(m)]
    if not ps:
        return 0.0

    def h(p: float) -> float:
        return -sum(q * math.log(q) for q in (p, 1 - p) if q > 0)

    return max(0.0, h(sum(ps) / len(ps)) - sum(h(p) for p in ps) / len(ps))


def categorical_information(logprobs: Sequence[Mapping[str, float]]) -> float:
    """I(row; answer) when the answer is one of several values (a layout of a row's own value:
    which of the column's values the row is), from each distinct row's log-probabilities over
    the same values (nats)."""
    dists = _distributions(logprobs)
    if not dists:
        return 0.0
    return max(0.0, _entropy(_mean(dists)) - sum(_entropy(d) for d in dists) / len(dists))


def explained_share(logprobs: Sequence[Mapping[str, float]]) -> float:
    """The share of the answer's entropy that the row explains (the uncertainty coefficient,
    ``categorical_information`` over the entropy of the mean answer): 1 when each row is sure of
    its answer, whatever the labels' shares (a rare label as a common one), 0 when every row gets the
    same distribution. 1 also when every row is sure of the same label (nothing to explain)."""
    dists = _distributions(logprobs)
    if not dists:
        return 0.0
    spread = _entropy(_mean(dists))
    if spread < 1e-9:
        return 1.0
    return categorical_information(logprobs) / spread


def _distributions(logprobs: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
    out = []
    for lp in logprobs:
        top = max(lp.values())
        exp = {k: math.exp(v - top) for k, v in lp.items()}
        z = sum(exp.values())
        out.append({k: v / z for k, v in exp.items()})
    return out


def _mean(dists: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {k: sum(d.get(k, 0.0) for d in dists) / len(dists) for k in dists[0]}


def _entropy(p: Mapping[str, float]) -> float:
    return -sum(q * math.log(q) for q in p.values() if q > 0)
