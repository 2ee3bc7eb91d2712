"""``relserve demo`` reports how many answers match the demo table's known labels (issue 12)."""

from __future__ import annotations

from relserve.cli.demo import QUESTION, demo_accuracy_line, load_demo_table, method_label
from relserve.functions import make_call


def test_demo_table_has_balanced_known_labels():
    rows = load_demo_table()
    assert len(rows) == 24
    assert sorted(r["happy"] for r in rows) == ["no"] * 12 + ["yes"] * 12


def test_demo_question_is_a_filter_over_the_tables_columns():
    assert make_call("llm_filter", QUESTION).template.columns == ("product", "review")


def test_accuracy_line_counts_matches_and_the_one_label_baseline():
    rows = [{"happy": "yes"}, {"happy": "no"}, {"happy": "yes"}, {"happy": "yes"}]
    line = demo_accuracy_line(rows, [True, True, None, False], "calibrate")
    assert line.startswith("answers matching the known labels: 1 of 4 (25%; method calibrate;")
    assert line.endswith("always answering one label would match 3)")


def test_the_demo_runs_relserves_defaults_and_names_them():
    call = make_call("llm_filter", QUESTION)
    # the default: adaptive, whose layout is chosen when it runs (named once it has)
    assert method_label(call) == "adaptive, prompt shape completion"
    from relserve.labels.adaptive import AdaptiveReport
    from relserve.labels.layouts import Layout
    from relserve.labels.plan import LabelPlan, PlanRule

    plan = LabelPlan("adaptive", PlanRule.TWO_CROWDS, ("yes", "no"), layout=Layout(False, "Sentiment", ("happy", "unhappy")))
    ran = AdaptiveReport(plan, True)
    assert method_label(call, ran) == "adaptive, layout row, Sentiment: happy/unhappy"
    assert method_label(make_call("llm_filter", QUESTION, method="generate")) == "generate"
    assert method_label(make_call("llm_filter", QUESTION, method="score", prompt_shape="chat")) == "score, prompt shape chat"
