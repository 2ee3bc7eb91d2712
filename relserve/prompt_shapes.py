"""How a scoring request is laid out around the user's prompt (issue 22): the prompt shapes.

The template stays the user's; how relserve lays out the request whose next tokens it scores is
relserve's choice, and it decides much of what a small model gets right:

``chat``         the chat template around the prompt, the label scored as the first words of the
                 assistant's turn ("yes" / "Yes"). What relserve did before issue 22.
``chat_answer``  the same, with an answer field ("Answer:") opening the assistant's turn and the
                 label scored after a space (" yes" / " Yes").
``completion``   no chat template: the row's long values first ("Review: <text>"), then the
                 question (a value the template introduced as "Review: {review}" leaves it with
                 its name; another is named "the review above"), then the answer field, the
                 label scored after a space. A base-model layout: the one in which a small
                 instruct model is most likely to say the label (measured in docs/quality.md).
                 Without the "Answer with one of: ..." / "Answer yes or no." line the other
                 shapes carry: listing the labels right before the answer field makes a small
                 model repeat the list whatever the row says (docs/notebook/quality-passes.md).
``question_first`` the completion shape with the question first, as a field: "Question: <the
                 question>", then the row's long values ("Review: <text>"), then the answer
                 field. Far better than ``completion`` for a 2-label ``llm_classify`` behind
                 bootstrapped examples, no better for filters and 4 labels, and worse below 16
                 rows, where the content-free prior decides (it gives nearly every row one
                 label). So it is the default of a 2-label ``llm_classify`` exactly when its
                 labels are picked behind the examples (relserve/labels/bootstrap.shaped_for;
                 docs/notebook/quality-passes.md#fourth-pass-2026-11-24-1730-1850-utc-the-question-first-as-a-field).

The answer field of ``chat_answer``, ``completion`` and ``question_first`` is "Answer:" unless a
call names another (``answer_field := 'Sentiment'``: the request ends "Sentiment:"), or asks
relserve to choose one (``'auto'``, relserve/labels/answer_fields.py: the default of a 2-label
``llm_classify`` laid out ``question_first``;
docs/notebook/quality-passes.md#eleventh-pass-2026-11-25-1505-1625-utc-the-answer-field-named-by-the-model).

Two halves: ``ShapedRenderer`` (the planner's side: which text a row's prompt is, so the result
cache, EXPLAIN and deduplication see the real text) and ``engine_text`` (the engine's side: the
chat template or not, and the answer field).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PROMPT_SHAPES = ("chat", "chat_answer", "completion", "question_first")
#: chosen on the tuning tasks of bench/bench_quality.py (docs/quality.md); a 2-label
#: llm_classify behind bootstrapped examples gets relserve/labels/bootstrap.EXAMPLES_SHAPE instead
DEFAULT_PROMPT_SHAPE = "completion"
#: the shapes whose prompt text ``ShapedRenderer`` lays out (no chat template, an answer field)
SHAPED = ("completion", "question_first")
#: the shapes that put the prompt behind the chat template: only their rows share a prefix
#: warmed behind it (``Backend.warm_prefix``)
CHAT_SHAPES = ("chat", "chat_answer")
#: the answer field of the answer-field shapes; the label is scored after it and a space
ANSWER_FIELD = "Answer:"
#: the field that names the question in the ``question_first`` shape
QUESTION_FIELD = "Question:"
#: a placeholder value at least this long moves out of the question (the shaped layouts)
MOVE_CHARS = 30


def check_shape(shape: str | None) -> str | None:
    """``shape`` if known (None: the default); ConfigError naming the known shapes otherwise."""
    from relserve.errors import ConfigError

    if shape is None:
        return None
    if not isinstance(shape, str) or shape not in PROMPT_SHAPES:
        raise ConfigError(f"prompt_shape must be one of {', '.join(PROMPT_SHAPES)}, got {shape!r}")
    return shape


#: the answer field's value that leaves the name to relserve (relserve/labels/answer_fields.py)
AUTO_ANSWER_FIELD = "auto"
#: what an answer field's name may be: a short phrase of words ("Sentiment", "Store department")
_ANSWER_FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 _'-]{0,39}")


def check_answer_field(name: str | None) -> str | None:
    """The answer field's name as given (``answer_field := 'Sentiment'``, a trailing colon
    dropped; None: "Answer"; ``AUTO_ANSWER_FIELD``: the model's choice), or ConfigError saying
    what a name may be."""
    from relserve.errors import ConfigError

    if name is None:
        return None
    text = name.strip().removesuffix(":").strip() if isinstance(name, str) else None
    if not text or not _ANSWER_FIELD_NAME.fullmatch(text):
        raise ConfigError("answer_field must be 'auto' or a short name of words, such as 'Sentiment' (up to 40 letters, "
                          f"digits, spaces, ' _ -, starting with a letter), got {name!r}")
    return text


def answer_field_text(name: str | None) -> str:
    """The text that ends a scoring request and that the label follows: "Sentiment:" for the name
    "Sentiment", ``ANSWER_FIELD`` for None. ``AUTO_ANSWER_FIELD`` is resolved before (the planner's
    answer_fields.resolved), never laid out."""
    if name == AUTO_ANSWER_FIELD:
        raise ValueError("answer_field 'auto' is chosen by relserve.labels.answer_fields before a request is laid out")
    return f"{name}:" if name else ANSWER_FIELD


def label_space(shape: str) -> str:
    """What is put before a label when it is scored: a space after an answer field."""
    return "" if shape == "chat" else " "


def engine_text(prompter, prompt: str, system: str | None, shape: str, answer_field: str = ANSWER_FIELD) -> str:
    """The text the engine tokenizes for one prompt under ``shape`` (``prompter``: a
    ``ChatPrompter``), ending with ``answer_field`` (``answer_field_text``) but under ``chat``."""
    if shape == "chat":
        return prompter.text(prompt, system)
    if shape == "chat_answer":
        return prompter.text(prompt, system) + answer_field
    head = system + "\n\n" if system else ""
    return head + prompt + "\n" + answer_field


def engine_texts(prompter, prompts: Sequence[str], system: str | None, shape: str,
                 answer_field: str = ANSWER_FIELD) -> list[str]:
    return [engine_text(prompter, p, system, shape, answer_field) for p in prompts]


#: a field name that introduces a value at the end of a literal: "Review: ", "Product title:"
_FIELD_NAME = re.compile(r"(?:^|(?<=[\s.?!:;,]))([A-Z][A-Za-z]*(?: [A-Za-z]+){0,2}):\s*$")
_SPACES = re.compile(r"[ \t]+\n|[ \t]{2,}")
#: punctuation left dangling after a sentence's end once a value moved out ("negative? Title: {t}.
#: Review: {r}" keeps "negative?" and the "." that closed the title: "negative?.")
_DANGLING = re.compile(r"([.?!:])(?:\s*[.,;:])+(?=\s|$)")


def _title(name: str) -> str:
    words = name.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


class ShapedRenderer:
    """A shaped layout's prompt text of a row: the question and the long values apart, the
    values first (``completion``) or after the question (``question_first``).

    ``literals``/``fields`` are the template's (``Template.literals``, ``Template.fields``);
    ``format_value`` turns a cell into text. A value shorter than ``MOVE_CHARS`` (a product name, a
    number) stays where the template puts it; a longer one moves in front as ``Name: value`` and
    the question names it ("the review above").
    """

    def __init__(self, literals: Sequence[str], fields: Sequence[str], positions: Sequence[int], suffix: str, prefix: str, format_value,
                 question_first: bool = False) -> None:
        self.literals = list(literals)
        self.fields = list(fields)
        self.positions = list(positions)
        self.suffix = suffix
        self.prefix = prefix
        self.format_value = format_value
        self.question_first = question_first
        #: a value at least this long moves in front; the content-free probes set 0, so they are
        #: laid out as the rows they stand for (relserve/labels/prior.py)
        self.move_chars = MOVE_CHARS

    def __call__(self, values: tuple) -> str:
        head, question = self.parts(values)
        if self.question_first:
            # the answer field follows on its own line (engine_text), as after the question
            return self.prefix + f"{QUESTION_FIELD} {question}" + ("\n" + head.rstrip("\n") if head else "")
        return self.prefix + head + question

    def parts(self, values: tuple) -> tuple[str, str]:
        """(the moved values as "Name: value" lines, the question) of one row."""
        head: list[str] = []
        moved: set[str] = set()
        parts: list[str] = []
        for lit, name, pos in zip(self.literals, self.fields, self.positions):
            v = values[pos]
            text = v if type(v) is str else self.format_value(v)
            if len(text) < self.move_chars:
                parts += [lit, text]
                continue
            # a value the template introduces with a field name ("Review: {review}") moves with
            # that name, which leaves the question; otherwise the question names it
            m = _FIELD_NAME.search(lit)
            if m:
                parts.append(lit[: m.start()].rstrip(" "))
                title = m.group(1)
            else:
                parts += [lit, f"the {name.replace('_', ' ')} above"]
                title = _title(name)
            if name not in moved:
                moved.add(name)
                head.append(f"{title}: {text}\n")
        question = "".join(parts) + self.suffix
        return "".join(head), _DANGLING.sub(r"\1", _SPACES.sub(" ", question)).strip(" \n")
