"""Model cascades for ``llm_filter`` and ``llm_classify`` (the ``cascade`` option).

A light proxy (a logistic regression on sentence embeddings) is trained during the query on the
LLM's own answers for a random sample of the relQuery's rows; it answers the rows it is confident
about, and the rest go to the LLM as the relQuery. The confidence threshold is chosen on a
held-back audit sample (answered by the LLM too) so that the agreement with the LLM's answers
meets the target with confidence 0.95; when no threshold does, every row goes to the LLM.

- ``policy.py``: when a relQuery cascades, and its sample sizes;
- ``embedding.py``: the features (all-MiniLM-L6-v2, a chunk at a time);
- ``proxy.py``: the logistic regression (numpy);
- ``threshold.py`` and ``binomial.py``: the threshold and the agreement's interval;
- ``report.py``: what a cascade did.

One relQuery's cascade in steps works on the planner's planned rows and label scope, so it is
the planner's (relserve/planner/cascade_runner.py), as is its synchronous driver, which runs the
planner's executor (relserve/planner/cascade_drive.py); the server's jobs drive the same steps
themselves. This package imports nothing of the planner.
"""

from relserve.cascade.policy import CascadePlan, plan
from relserve.cascade.report import CascadeReport

__all__ = ["CascadePlan", "CascadeReport", "plan"]
