"""When the "answers may be backwards" warning is given (relserve/labels/plan.py Orientation): the
other layouts' ranking decides; the question's own yes/no is named only beside it."""

from __future__ import annotations

from relserve.labels.plan import QUESTION_DISAGREES, Orientation

LEANS_AWAY = -(QUESTION_DISAGREES + 0.5)


def test_layouts_ranking_the_other_way_warn_and_name_their_agreement():
    assert Orientation(-0.31, None).disagrees == "the other layouts rank the rows the other way (agreement -0.31)"


def test_the_question_alone_does_not_warn():
    # a small model's yes/no leaned away from correctly ranked layouts (the demo, 24 of 24 right)
    assert Orientation(0.4, LEANS_AWAY).disagrees is None
    assert Orientation(None, LEANS_AWAY).disagrees is None


def test_both_disagreeing_name_both():
    assert Orientation(-0.2, LEANS_AWAY).disagrees == (
        "the other layouts rank the rows the other way (agreement -0.20); "
        "the question itself answers 'yes' less often for the rows this layout ranks highest")


def test_a_question_leaning_less_than_its_noise_is_not_named():
    assert Orientation(-0.2, -QUESTION_DISAGREES / 2).disagrees == (
        "the other layouts rank the rows the other way (agreement -0.20)")


def test_agreement_of_zero_or_more_is_no_disagreement():
    assert Orientation(0.0, None).disagrees is None and Orientation(0.9, 2.0).disagrees is None
