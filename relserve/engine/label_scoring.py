"""Score every label of a closed question by the model's log-probability of the whole label.

Constrained decoding picks a label token by token and so follows whatever the first token
prefers; a small model's first-token prior then decides most answers (issue 12: one label for
every row). Scoring instead reads ``log p(label | prompt)`` for every label and picks the best,
optionally after dividing out the model's prior over the labels (contextual calibration, Zhao et
al. 2021; the prior is measured by ``relserve.labels.prior``).

How it runs on vLLM v1, cheaply: a label's log-probability is the sum over its tokens of
``log p(token | prompt + earlier label tokens)``. The labels' token sequences form a trie; every
inner node (the empty prefix included) is one request ``prompt + node`` that generates one
token and asks for the log-probabilities of exactly the node's children (``logprob_token_ids``,
read from the raw distribution, so the constraint does not distort them). All of a row's requests
share the row's prompt, so the prefix cache prefills it once.

Reading a multi-token label whole from one ``prompt_logprobs`` request (prefix cache kept on,
only the label's own positions read) was built and measured (issue 28 item 3): 6 requests per row
instead of 10 on a 4-label task gave 3.1 against 2.9 rows/s, so it was not kept. What a row
costs is mostly how many requests it is; the "split" norm below needs one.

Each label is scored in its written form and capitalised ("yes" and "Yes"): a chat model starts
its reply capitalised as often as not, and both mean the same answer.

Labels of several tokens: each label is read only up to the token where it parts from every
other label ("pale" of "pale ale" when no other label starts so), its token log-probabilities
summed there: the chance that the model, answering with one of the labels, heads for this one
(``LABEL_NORM = "split"``, the default since issue 28). Label length does not enter, and labels
that start with different tokens cost one request per row, whatever their number and length
(faster than "mean" for a few points of right answers:
docs/notebook/quality-passes.md#fifth-pass-2026-11-24-2040-2120-utc-one-scoring-request-per-row-issue-28-item-3). The norms before it stay for the benchmark (environment variable
``RELSERVE_LABEL_NORM``): "mean" (issue 22: the mean log-probability of each label's tokens,
read whole), "sum" (the whole label's log-probability, issue 12) and "first" (the first token
only). With one token per label all four agree.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: how a label's tokens are combined into its score: "mean", "sum", "first" or "split" (see above)
LABEL_NORMS = ("mean", "sum", "first", "split")
LABEL_NORM = os.environ.get("RELSERVE_LABEL_NORM", "split")
if LABEL_NORM not in LABEL_NORMS:
    raise ValueError(f"RELSERVE_LABEL_NORM must be one of {', '.join(LABEL_NORMS)}, got {LABEL_NORM!r}")

#: vLLM's default cap on log-probabilities per request (``ModelConfig.max_logprobs``): a trie
#: node with more next tokens is asked in several requests (``asks``), and a layout scores at
#: most this many labels in one (relserve/labels/layouts.py ``MAX_COLUMN_LABELS``)
MAX_LOGPROBS = 20
#: score a multi-token label's other spellings only when free (``LabelTrie.build``); off: more
#: rows/s but fewer right answers
#: (docs/notebook/quality-passes.md#third-pass-2026-11-24-1420-1530-utc-bootstrapped-examples);
#: for the benchmark
FREE_FORMS_ONLY = os.environ.get("RELSERVE_FREE_LABEL_FORMS", "") == "1"


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
    #: per label, per spelling: how many of its tokens it takes to part from every other label
    splits: tuple[tuple[int, ...], ...]

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
        # where each spelling parts from every other label's: its shortest prefix that no
        # spelling of another label starts with (its whole length when there is none). Each
        # prefix's owner is found in one pass (-1: several labels'), so a server can count a
        # large label set's requests before it runs (relserve/server/budget.py)
        owner: dict[tuple[int, ...], int] = {}
        for i, forms in enumerate(seqs):
            for s in forms:
                for k in range(1, len(s) + 1):
                    owner[s[:k]] = i if owner.get(s[:k], i) == i else -1
        splits = [tuple(next((k for k in range(1, len(s) + 1) if owner[s[:k]] == i), len(s)) for s in forms)
                  for i, forms in enumerate(seqs)]
        return cls(
            tuple(labels),
            tuple(tuple(forms) for forms in seqs),
            _inner_nodes(seqs),
            tuple(splits),
        )

    def read(self, norm: str | None = None) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """Per label, the token sequences of its spellings as far as ``norm`` reads them: whole
        for "mean" and "sum", the first token for "first", up to where it parts from every
        other label for "split"."""
        norm = norm or LABEL_NORM
        if norm == "first":
            return tuple(tuple(s[:1] for s in forms) for forms in self.sequences)
        if norm == "split":
            return tuple(tuple(s[:k] for s, k in zip(forms, ks)) for forms, ks in zip(self.sequences, self.splits))
        return self.sequences

    def needed_nodes(self, norm: str | None = None) -> dict[tuple[int, ...], tuple[int, ...]]:
        """The inner nodes ``norm`` reads, each with the next-token ids it needs."""
        return _inner_nodes(self.read(norm))

    def label_logprobs(self, node_logprobs: Mapping[tuple[int, ...], Mapping[int, float]], norm: str | None = None) -> dict[str, float]:
        """Every label's score (see ``LABEL_NORM``), normalised over the labels (log-softmax)."""
        return self.scores(node_logprobs, norm)[0]

    def scores(self, node_logprobs: Mapping[tuple[int, ...], Mapping[int, float]],
               norm: str | None = None) -> tuple[dict[str, float], float]:
        """(``label_logprobs``, the log of the labels' total score before normalising): how likely
        the model is to answer with one of the labels at all (relserve/labels/answer_fields.py)."""
        norm = norm or LABEL_NORM
        raw = []
        for forms in self.read(norm):
            per_form = []
            for s in forms:
                terms = [node_logprobs[s[:k]][s[k]] for k in range(len(s))]
                per_form.append(sum(terms) / len(terms) if norm == "mean" else sum(terms))
            raw.append(_logsumexp(per_form))
        total = _logsumexp(raw)
        return {label: r - total for label, r in zip(self.labels, raw)}, total


def _inner_nodes(spellings: Sequence[Sequence[tuple[int, ...]]]) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Every proper prefix of the spellings (per label) -> the next-token ids that follow it."""
    nodes: dict[tuple[int, ...], set[int]] = {}
    for forms in spellings:
        for s in forms:
            for k in range(len(s)):
                nodes.setdefault(s[:k], set()).add(s[k])
    return {node: tuple(sorted(ids)) for node, ids in sorted(nodes.items())}


def asks(trie: LabelTrie, max_logprobs: int, norm: str | None = None) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The one-token requests that score one row under ``norm``: (trie node, the next-token ids
    it reads), only the nodes the norm reads (``LabelTrie.needed_nodes``). vLLM returns at most
    ``max_logprobs`` log-probabilities per request, so a node with more next tokens (many labels)
    is asked in several requests, all on the same cached prefix."""
    return [(p, w[k : k + max_logprobs]) for p, w in trie.needed_nodes(norm).items() for k in range(0, len(w), max_logprobs)]


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
