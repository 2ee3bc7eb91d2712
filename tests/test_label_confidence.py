"""A row's confidence under a 2-label plan, computed here from its definition (relserve/labels/plan.py,
``LabelPlan.probability``): the logistic of the margin's distance from the boundary in units of the
plan's spread, so the confidence grows the farther a margin is from the boundary, on either side.
(scripts/mutation_check.py: a plan whose confidence fell as the margin rose kept every answer right
and passed the label tests until this one.)"""

from __future__ import annotations

import math

import pytest

from relserve.labels.plan import Calibration, LabelPlan, PlanRule

BOUNDARY, SPREAD = 0.5, 2.0


def plan() -> LabelPlan:
    return LabelPlan("adaptive", PlanRule.CALIBRATED, ("yes", "no"), boundary=BOUNDARY, spread=SPREAD,
                     calibration=Calibration.CONTENT_FREE)


@pytest.mark.parametrize("distance", [-3.0, -1.0, -0.25, 0.25, 1.0, 3.0])
def test_the_confidence_is_the_logistic_of_the_margins_distance_from_the_boundary(distance):
    margin = BOUNDARY + distance * SPREAD
    first = 1 / (1 + math.exp(-distance))  # the first label's probability
    assert plan().probability(margin) == pytest.approx(first, rel=1e-12)
    # a row's margin is its first label's score minus its second's
    label, confidence = plan().decide({"yes": margin - 1.0, "no": -1.0})
    assert label == ("yes" if distance > 0 else "no")
    assert confidence == pytest.approx(max(first, 1 - first), rel=1e-12)


def test_the_confidence_grows_with_the_distance_on_both_sides():
    near, far = plan().decide({"yes": BOUNDARY + 0.1, "no": 0.0}), plan().decide({"yes": BOUNDARY + 5.0, "no": 0.0})
    assert near[0] == far[0] == "yes" and 0.5 < near[1] < far[1]
    near, far = plan().decide({"yes": BOUNDARY - 0.1, "no": 0.0}), plan().decide({"yes": BOUNDARY - 5.0, "no": 0.0})
    assert near[0] == far[0] == "no" and 0.5 < near[1] < far[1]
