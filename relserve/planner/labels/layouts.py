"""The candidate layouts of a 2-label call's scoring request, and how a row is written in each
(issue 43).

How the request is laid out decides much of what a small model gets right, and no one layout is
best for every question: on held-out news rows "Is this news article about sports?" scored
" yes"/" no" had an AUC of 0.36, the article followed by "Topic:" and " sports" one of 0.96; on
sentiment, "Review: <text>\\nSentiment:" with " positive"/" negative" beat the yes/no question
(0.87 against 0.68 on rotten_tomatoes at 15% positive; docs/quality.md). So the adaptive method
(relserve/planner/labels/adaptive.py) scores a sample of the relQuery's rows in every layout
here and keeps the one whose answers vary most with the rows.

Two kinds of layout:

* the question, then an answer field: the row's long values first, the question, "Answer:",
  and the call's own labels (a filter's "yes"/"no") - relserve's ``completion`` shape;
* the row alone, then a field that names what the labels are (``FIELDS``), scored on two words:
  a filter's concept and its contrast (relserve/planner/labels/concept.py), or a 2-label
  classify's labels.

Every layout starts with the same text, the row's values, so the prefix cache prefills a row
once for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relserve.functions import LLMCall
from relserve.planner.labels.concept import concept_of
from relserve.prompt_shapes import ShapedRenderer
from relserve.template import format_value

#: the fields a row-alone layout ends with: generic names of what a label can be about, fixed
#: before any was measured (a subset of relserve/planner/answer_fields.CANDIDATES)
FIELDS: tuple[str, ...] = ("Sentiment", "Topic", "Category", "Answer")
#: the answer field of the question layouts
QUESTION_FIELD = "Answer"


@dataclass(frozen=True)
class Layout:
    """One way to write a 2-label call's scoring request."""

    #: the question is kept (and the call's own labels scored), or the row stands alone
    question: bool
    #: the field the label is scored after ("Answer" ends the request "Answer:")
    field: str
    #: the two words scored; the first stands for the call's first label (a filter's "yes")
    labels: tuple[str, str]

    @property
    def name(self) -> str:
        """How EXPLAIN names it: "question, Answer: yes/no", "row, Topic: sports/other"."""
        return f"{'question' if self.question else 'row'}, {self.field}: {self.labels[0]}/{self.labels[1]}"

    @property
    def answer_field(self) -> str:
        return self.field + ":"


def layouts_for(call: LLMCall) -> list[Layout]:
    """The candidate layouts of a filter or a 2-label classify, the question layout first (it
    wins ties: it is what the user wrote)."""
    own = tuple(call.choices or ())
    if len(own) != 2:
        raise ValueError(f"layouts are for calls of two labels, not {len(own)}")
    out = [Layout(True, QUESTION_FIELD, own)]
    if call.function.kind == "filter":
        concept = concept_of(call.template)
        if concept is None:
            return out
        words = concept.labels
    else:
        words = own
    out += [Layout(False, f, words) for f in FIELDS]
    return out


class LayoutRenderer:
    """The text of a row in a layout, from its placeholder values (aligned with the template's
    columns); the engine adds the answer field after it (relserve/prompt_shapes.engine_text)."""

    def __init__(self, call: LLMCall) -> None:
        t = call.template
        positions = [t.columns.index(f) for f in t.fields]
        self._question = ShapedRenderer(t.literals, t.fields, positions, t.literals[-1], "", format_value)
        self._alone = ShapedRenderer(t.literals, t.fields, positions, t.literals[-1], "", format_value)
        # every value stands apart from the question, so the row alone is all of them
        self._alone.move_chars = 0

    def __call__(self, layout: Layout, values: tuple) -> str:
        if layout.question:
            return self._question(values)
        head, question = self._alone.parts(values)
        # a template with no values to move (all in the question) still shows its values
        return head.rstrip("\n") or question

    def many(self, layout: Layout, values: Sequence[tuple]) -> list[str]:
        return [self(layout, v) for v in values]
