"""The candidate layouts of a 2-label call's scoring request, and how a row is written in each
(issue 43).

How the request is laid out decides much of what a small model gets right, and no one layout is
best for every question: on news rows "Is this news article about sports?" scored " yes"/" no"
ranked the rows backwards, the article followed by "Topic:" and " sports" ranked them well; on
sentiment, "Review: <text>\\nSentiment:" with " positive"/" negative" beat the yes/no question
(docs/quality.md#the-default-adaptive-a-filter-and-a-classify-of-two-labels). So the adaptive method
(relserve/labels/adaptive.py) scores a sample of the relQuery's rows in the layouts
here and keeps the one whose answers vary most with the rows.

Two kinds of layout:

* the question, then an answer field: the row's long values first, the question, "Answer:",
  and the call's own labels (a filter's "yes"/"no") - relserve's ``completion`` shape;
* the row alone, then a field that names what the labels are (``FIELDS``), scored on two words:
  a filter's concept and its contrast (relserve/labels/concept.py), or a 2-label
  classify's labels.

Every layout starts with the same text, the row's values, so the prefix cache prefills a row
once for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relserve.engine.label_scoring import MAX_LOGPROBS
from relserve.functions import LLMCall
from relserve.labels.concept import Concept, concept_column, concept_of
from relserve.prompt_shapes import ShapedRenderer
from relserve.template import format_value

#: the fields a row-alone layout ends with: generic names of what a label can be about, fixed
#: before any was measured (a subset of relserve/labels/answer_fields.CANDIDATES)
FIELDS: tuple[str, ...] = ("Sentiment", "Topic", "Category", "Answer")
#: the answer field of the question layouts
QUESTION_FIELD = "Answer"
#: a question about a row's own value ("about {topic}": a semantic join's right side) is also
#: laid out as the rest of the row after a field, scored on every distinct value of that
#: placeholder in the relQuery: from 2 to this many (as many as one scoring request reads)
MAX_COLUMN_LABELS = MAX_LOGPROBS
#: a value longer than this (characters), or of several lines, is text, not a name a question can
#: ask about: the placeholder's values are then not read as labels
MAX_COLUMN_LABEL_CHARS = 60


@dataclass(frozen=True)
class Layout:
    """One way to write a 2-label call's scoring request."""

    #: the question is kept (and the call's own labels scored), or the row stands alone
    question: bool
    #: the field the label is scored after ("Answer" ends the request "Answer:")
    field: str
    #: the two words scored; the first stands for the call's first label (a filter's "yes").
    #: With ``column``: every distinct value of that placeholder in the relQuery, each row's own
    #: value standing for "yes"
    labels: tuple[str, ...]
    #: the placeholder the question asks about ("about {topic}"), left out of the row and scored
    column: str | None = None

    @property
    def name(self) -> str:
        """How EXPLAIN names it: "question, Answer: yes/no", "row, Topic: sports/other",
        "row, Topic: {topic}"."""
        if self.column is not None:
            return f"row, {self.field}: {{{self.column}}}"
        return f"{'question' if self.question else 'row'}, {self.field}: {self.labels[0]}/{self.labels[1]}"

    @property
    def answer_field(self) -> str:
        return self.field + ":"


#: the fields a concept the model proposes beside the lexicon's is tried after (the two the
#: first pass chose most on the tuning tasks)
PROPOSED_FIELDS: tuple[str, ...] = ("Sentiment", "Category")


def layouts_for(call: LLMCall, values: Sequence[tuple] | None = None, proposed: Concept | None = None) -> list[Layout]:
    """The candidate layouts of a filter or a 2-label classify, the question layout first (it
    wins ties: it is what the user wrote). ``values``: the relQuery's rows, which a question
    about a row's own value takes its labels from (without them, no such layout); ``proposed``:
    the concept the model read in the question (relserve/labels/concept.proposed_concept), tried
    beside the lexicon's."""
    own = tuple(call.choices or ())
    if len(own) != 2:
        raise ValueError(f"layouts are for calls of two labels, not {len(own)}")
    out = [Layout(True, QUESTION_FIELD, own)]
    if call.function.kind != "filter":
        return out + [Layout(False, f, own) for f in FIELDS]
    concept = concept_of(call.template)
    if concept is None:
        labels = column_labels(call, values) if values is not None else None
        if labels is not None:
            column = concept_column(call.template)
            return out + [Layout(False, f, labels, column) for f in FIELDS]
        # a question the lexicon cannot read: the model's concept, if it proposed one
        return out + ([Layout(False, f, proposed.labels) for f in FIELDS] if proposed is not None else [])
    out += [Layout(False, f, concept.labels) for f in FIELDS]
    if proposed is not None and proposed.labels != concept.labels:
        out += [Layout(False, f, proposed.labels) for f in PROPOSED_FIELDS]
    return out


def column_labels(call: LLMCall, values: Sequence[tuple]) -> tuple[str, ...] | None:
    """The distinct values of the placeholder a filter's question asks about, as labels (None:
    no such placeholder, or fewer than 2 or more than ``MAX_COLUMN_LABELS`` usable values)."""
    column = concept_column(call.template)
    if column is None:
        return None
    pos = call.template.columns.index(column)
    seen: dict[str, None] = {}
    for v in values:
        text = format_value(v[pos]).strip() if v[pos] is not None else ""
        if not text or len(text) > MAX_COLUMN_LABEL_CHARS or "\n" in text:
            return None
        seen.setdefault(text, None)
        if len(seen) > MAX_COLUMN_LABELS:
            return None
    return tuple(seen) if len(seen) >= 2 else None


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
        self._columns = list(t.columns)

    def __call__(self, layout: Layout, values: tuple) -> str:
        if layout.question:
            return self._question(values)
        if layout.column is not None:
            # the asked value stands out of the row: it is what is scored
            pos = self._columns.index(layout.column)
            marked = tuple("\x00" if i == pos else v for i, v in enumerate(values))
            head, _ = self._alone.parts(marked)
            return "\n".join(line for line in head.split("\n") if line and "\x00" not in line)
        head, question = self._alone.parts(values)
        # a template with no values to move (all in the question) still shows its values
        return head.rstrip("\n") or question

    def many(self, layout: Layout, values: Sequence[tuple]) -> list[str]:
        return [self(layout, v) for v in values]
