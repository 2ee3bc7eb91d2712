"""Score every label of a closed question by the model's log-probability of the whole label.

Constrained decoding picks a label token by token and so follows whatever the first token
prefers; a small model's first-token prior then decides most answers (issue 12: one label for
every row). Scoring instead reads ``log p(label | prompt)`` for every label and picks the best,
optionally after dividing out the model's prior over the labels (contextual calibration, Zhao et
al. 2021; the prior is measured by ``relserve.planner.label_prior``).

How it runs on vLLM v1, cheaply: a label's log-probability is the sum over its tokens of
``log p(token | prompt + earlier label tokens)``. The labels' token sequences form a trie; every
inner node (the empty prefix included) is one request ``prompt + node`` that generates one token
and asks for the log-probabilities of exactly the node's children (``logprob_token_ids``, read
from the raw distribution, so the constraint does not distort them). All of a row's requests
share the row's prompt, so the prefix cache prefills it once. ``prompt_logprobs`` would score a
whole label in one request, but vLLM v1 then skips the prefix cache for the request (it must
recompute every scored token), which costs a full prompt prefill per label.

Each label is scored in its written form and capitalised ("yes" and "Yes"): a chat model starts
its reply capitalised as often as not, and both mean the same answer.

Labels of several tokens (issue 22): the sum of a label's token log-probabilities favours short
labels (fewer terms, each below zero), so a surface form is scored by the MEAN log-probability of
its tokens (``LABEL_NORM = "mean"``, the default, chosen in docs/quality.md); "sum" (the whole
label's log-probability, before issue 22) and "first" (its first token only) are there for the
benchmark (environment variable ``RELSERVE_LABEL_NORM``). With one token per label all three agree.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: how a label's tokens are combined into its score: "mean", "sum" or "first" (see above)
LABEL_NORMS = ("mean", "sum", "first")
LABEL_NORM = os.environ.get("RELSERVE_LABEL_NORM", "mean")
if LABEL_NORM not in LABEL_NORMS:
    raise ValueError(f"RELSERVE_LABEL_NORM must be one of {', '.join(LABEL_NORMS)}, got {LABEL_NORM!r}")


def surface_forms(label: str) -> list[str]:
    """The spellings of a label that count as answering it."""
    forms = [label]
    cap = label[:1].upper() + label[1:]
    if cap != label:
        forms.append(cap)
    return forms


@dataclass(frozen=True)
class LabelTrie:
    """The requests that score a fixed set of labels, and how to sum their answers."""

    labels: tuple[str, ...]
    #: per label, the token sequences of its surface forms (each ending with ``end_id`` if needed)
    sequences: tuple[tuple[tuple[int, ...], ...], ...]
    #: inner nodes: token prefix -> the next-token ids whose log-probabilities it needs
    nodes: Mapping[tuple[int, ...], tuple[int, ...]]

    @classmethod
    def build(cls, labels: Sequence[str], encode: Callable[[str], list[int]], end_id: int | None,
              free_forms_only: bool = False) -> LabelTrie:
        """``free_forms_only``: a label's other spellings ("Pale ale" for "pale ale") are scored
        only when they are one token, so they add no request (every form of one token is read
        from the same first request); the written form is always scored."""
        seqs = [[tuple(encode(f)) for f in surface_forms(label)] for label in labels]
        if free_forms_only:
            seqs = [[forms[0]] + [f for f in forms[1:] if len(f) == 1] for forms in seqs]
        flat = {s for forms in seqs for s in forms}
        if () in flat:
            raise ValueError("a label encodes to no tokens")
        # A form that is a proper prefix of another needs its end token scored too, else the
        # shorter label would always win (its probability is a sum of fewer terms).
        prefixes = {s[:k] for s in flat for k in range(1, len(s))}
        if end_id is not None:
            seqs = [[s + (end_id,) if s in prefixes else s for s in forms] for forms in seqs]
        nodes: dict[tuple[int, ...], set[int]] = {}
        for forms in seqs:
            for s in forms:
                for k in range(len(s)):
                    nodes.setdefault(s[:k], set()).add(s[k])
        return cls(
            tuple(labels),
            tuple(tuple(forms) for forms in seqs),
            {node: tuple(sorted(ids)) for node, ids in sorted(nodes.items())},
        )

    def label_logprobs(self, node_logprobs: Mapping[tuple[int, ...], Mapping[int, float]], norm: str | None = None) -> dict[str, float]:
        """Every label's score (see ``LABEL_NORM``), normalised over the labels (log-softmax)."""
        norm = norm or LABEL_NORM
        raw = []
        for forms in self.sequences:
            per_form = []
            for s in forms:
                terms = [node_logprobs[s[:k]][s[k]] for k in range(len(s))]
                if norm == "first":
                    terms = terms[:1]
                per_form.append(sum(terms) / len(terms) if norm == "mean" else sum(terms))
            raw.append(_logsumexp(per_form))
        total = _logsumexp(raw)
        return {label: r - total for label, r in zip(self.labels, raw)}


def pick(label_logprobs: Mapping[str, float], prior: Mapping[str, float] | None) -> str:
    """The best label; with a prior (probabilities), the best after dividing the prior out.

    Calibrated scores that tie (a row that looks exactly like the content-free rows) go to the
    label the model itself prefers, then to the label listed first.
    """
    labels = list(label_logprobs)

    def score(label: str) -> tuple[float, float, int]:
        lp = label_logprobs[label]
        calibrated = lp - math.log(max(prior[label], 1e-12)) if prior else lp
        # rounding keeps float noise from deciding a tie
        return (round(calibrated, 9), lp, -labels.index(label))

    return max(labels, key=score)


def _logsumexp(xs: Sequence[float]) -> float:
    m = max(xs)
    if m == -math.inf:
        return m
    return m + math.log(sum(math.exp(x - m) for x in xs))
