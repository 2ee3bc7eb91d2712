"""Batch calibration of label scores over a relQuery's own rows (issue 22; Zhou et al., "Batch
Calibration", ICLR 2024).

A small model prefers some labels whatever the row says. The content-free prior
(``relserve.labels.prior``) estimates that preference from made-up rows ("N/A"), which
are not what the real rows look like. A relQuery has the real rows: every row is scored first
(one short request per row), then each label's score is corrected by its MEAN over the
relQuery's scored rows, and only then is each row's label picked::

    calibrated(row, label) = score(row, label) - mean over rows r of score(r, label)

``score`` is the engine's per-label score (mean token log-probability, log-softmax over the
labels; see relserve/engine/label_scoring.py). The per-row normalisation does not change the
pick: it shifts every label of a row alike.

When it is wrong: the correction assumes every label is about as frequent in the rows as the
model's bias lets it look. On a column where one label is rare (a little spam), subtracting the mean
pushes borderline rows into the rare label and over-answers it; the answer shares then look
flatter than the truth. How to tell: compare the shares with ``method := 'score'`` (uncorrected)
on a sample, or look at the margins (``label_logprobs``) of the rows that changed.

Below ``MIN_BATCH_ROWS`` scored rows a mean is too noisy, and the content-free prior is used
instead (the relQuery then runs as ``prior``; EXPLAIN says so), unless the call's label plan
holds means read from at least that many rows (relserve/labels/plan.py).
With three labels or more the prior is so poor (one label for most of a 4-label column's rows)
that a relQuery's own mean is better from ``MIN_BATCH_ROWS_MANY_LABELS`` rows, even over rows
of one kind; such a relQuery runs as ``batch`` (too few rows to choose examples from). With
two labels a mean over a few rows of one kind (a ``WHERE`` that kept only complaints) splits
them half and half, where the prior did better: two labels keep the prior below 16.
Measured in docs/notebook/quality-passes.md#ninth-pass-2026-11-25-0947-0957-utc-a-templates-first-small-statement.

A model that separates the rows by itself needs no correction, and the mean would harm it: on a
column where one label is nearly every row, the rare labels' means sit far below the others and
subtracting them moves the majority rows whose other scores are least low into the rare labels
(a scripted model sure of every row loses many of its right answers that way). When
the rows explain ``SEPARATES_BY_ITSELF`` of the entropy of the model's own answers
(``separates_by_itself``; relserve/labels/information.py) its answers are taken as they
are. The 135M default model's own answers stay well below it on the quality tasks, so its answers
do not change (docs/quality.md#when-the-answers-are-guesses-and-the-warning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from relserve.labels.information import explained_share

#: fewer rows than this in a relQuery: the content-free prior instead of the batch mean
MIN_BATCH_ROWS = 16
#: with three labels or more: a relQuery's own mean from this many rows (``batch``), the
#: prior below it
MIN_BATCH_ROWS_MANY_LABELS = 8
#: the share of the entropy of the model's own answers the rows must explain for them to be
#: taken as they are (see above)
SEPARATES_BY_ITSELF = 0.6


def min_batch_rows(labels: int) -> int:
    """The fewest rows whose own label means a relQuery of ``labels`` labels uses."""
    return MIN_BATCH_ROWS_MANY_LABELS if labels >= 3 else MIN_BATCH_ROWS



def label_means(scores: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each label's mean score over the rows (the rows must score the same labels)."""
    if not scores:
        raise ValueError("no scored rows to average")
    labels = list(scores[0])
    return {label: sum(s[label] for s in scores) / len(scores) for label in labels}


def separates_by_itself(scores: Sequence[Mapping[str, float]]) -> bool:
    """Whether the model's own scores of these rows tell them apart well enough to need no
    correction (see the module's docstring)."""
    return bool(scores) and explained_share(scores) >= SEPARATES_BY_ITSELF


def no_correction(scores: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Label means of 0: ``calibrated`` and ``pick_calibrated`` then read the model's own scores."""
    return dict.fromkeys(scores[0], 0.0)


def calibrated(score: Mapping[str, float], means: Mapping[str, float]) -> dict[str, float]:
    """One row's scores with each label's mean subtracted."""
    return {label: score[label] - means[label] for label in score}


def pick_calibrated(score: Mapping[str, float], means: Mapping[str, float]) -> str:
    """The best label after the correction; ties (rounded to 1e-9) go to the label the model
    itself prefers, then to the label listed first."""
    labels = list(score)
    cal = calibrated(score, means)
    return max(labels, key=lambda label: (round(cal[label], 9), score[label], -labels.index(label)))


def batch_picks(scores: Sequence[Mapping[str, float]]) -> list[str]:
    """Every row's label under batch calibration (the scores of all rows of one relQuery)."""
    means = label_means(scores)
    return [pick_calibrated(s, means) for s in scores]
