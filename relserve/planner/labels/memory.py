"""What the label methods remember per call between statements, forgotten at once (benchmarks
and tests that run every statement as a template's first)."""

from __future__ import annotations


def forget_all() -> None:
    """Examples, label means, priors, answer fields and the adaptive method's layout choices."""
    from relserve.planner.labels import adaptive
    from relserve.planner.labels.answer_fields import forget_fields
    from relserve.planner.labels.bootstrap import forget_examples
    from relserve.planner.labels.pools import forget_means
    from relserve.planner.labels.prior import forget_priors

    for forget in (forget_examples, forget_means, forget_fields, forget_priors, adaptive.forget):
        forget()
