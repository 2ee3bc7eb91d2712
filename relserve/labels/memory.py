"""What the label methods remember per call between statements, forgotten at once (benchmarks
and tests that run every statement as a template's first)."""

from __future__ import annotations


def forget_all() -> None:
    """Examples, label means, priors, answer fields and the adaptive method's layout choices."""
    from relserve.labels import adaptive
    from relserve.labels.answer_fields import forget_fields
    from relserve.labels.bootstrap import forget_examples
    from relserve.labels.pools import forget_means
    from relserve.labels.prior import forget_priors

    for forget in (forget_examples, forget_means, forget_fields, forget_priors, adaptive.forget):
        forget()
