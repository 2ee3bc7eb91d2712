"""The word a filter's question asks about, and the word against it (issue 43).

A small model answers "Is this news article about sports?" poorly with yes or no (its "yes"
follows how pleasant a row sounds), but names the topic well when asked for the word: after
"Article: <text>\\nTopic:" it gives " sports" far more probability on sports articles than on
others (docs/quality.md#the-default-adaptive-a-filter-and-a-classify-of-two-labels). So
a filter's question is read for its concept ("about sports" -> "sports", "Is this movie review
positive?" -> "positive", "Is this a wheat beer?" -> "wheat") and the concept becomes one more
candidate layout of the scoring request (relserve/labels/layouts.py), scored against
its antonym when it has a common one ("positive" against "negative") or against "other".

The reading is deliberately plain: a word of feeling or judgement before a preposition
("disappointed with this purchase" -> "disappointed", "helpful to other shoppers" -> "helpful"),
else, when every content word names what a row is, the one that tells it apart ("Is this a
review of a beer?" -> "beer"), else what follows "about", else the question's last content
word. A misread concept is not harmless: the first pass can choose its layout because the rows
differ on it (a filter asking whether customers are disappointed with their purchase, read as
"purchase", kept reviews by product rather than by mood), so the feeling comes before the object
it is about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from relserve.template import Template

#: nouns that name what a row is rather than what it is about ("an automotive product")
GENERIC_NOUNS = frozenset("""
    article articles beer beers book books comment comments customer customers document documents email emails entry
    film films item items kind message messages movie movies one post posts product products question questions record
    records review reviews row rows sentence story stories text texts thing things tweet tweets type types sort
    """.split())
#: words that open a yes/no question
AUXILIARIES = frozenset("is are was were am does do did has have had can could will would should may might must".split())
#: what a concept never is
STOP = frozenset("""a an the this that these those it its their his her our your my of in on at to for with from by and or
    not no yes any some about there here what which who whom whose how why when where than then so very really""".split())
#: polar words and the word against each (both ways); other concepts are scored against "other"
ANTONYMS: dict[str, str] = {}
for _a, _b in (("positive", "negative"), ("happy", "unhappy"), ("satisfied", "dissatisfied"), ("good", "bad"),
               ("pleased", "displeased"), ("favorable", "unfavorable"), ("favourable", "unfavourable"),
               ("true", "false"), ("relevant", "irrelevant"), ("useful", "useless"), ("helpful", "unhelpful"),
               ("safe", "unsafe"), ("legal", "illegal"), ("formal", "informal"), ("friendly", "hostile"),
               ("polite", "rude"), ("correct", "incorrect"), ("complete", "incomplete"), ("accurate", "inaccurate")):
    ANTONYMS[_a], ANTONYMS[_b] = _b, _a
#: a common opposite of a feeling that has no antonym of its own in ANTONYMS (one way only)
for _a, _b in (("disappointed", "pleased"), ("enthusiastic", "unenthusiastic"), ("angry", "calm")):
    ANTONYMS.setdefault(_a, _b)
#: words of feeling or judgement that a preposition's object follows ("worried about the price");
#: adjectives ending in ATTITUDE_SUFFIXES count too ("enthusiastic about", "helpful to")
ATTITUDES = frozenset("""
    sad upset glad content afraid scared worried concerned anxious nervous impressed annoyed frustrated
    delighted interested excited bored confused surprised amused thrilled irritated offended embarrassed
    frightened shocked relieved fond proud keen sorry grateful thankful critical
    """.split()) | frozenset(ANTONYMS)
ATTITUDE_SUFFIXES = ("ful", "less", "ous", "ive", "istic")
#: prepositions that follow a feeling and name what it is about
ATTITUDE_PREPOSITIONS = frozenset("with about to of by at toward towards over in for".split())
#: the word a concept with no antonym is scored against
OTHER = "other"
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


@dataclass(frozen=True)
class Concept:
    """What a question asks about, and the word scored against it."""

    word: str
    contrast: str
    #: the question asks whether a row is a kind of thing ("Is this a review of a beer?"): no
    #: judgement the model may read in it is the same question
    names_a_kind: bool = False

    @property
    def labels(self) -> tuple[str, str]:
        """(the concept, its contrast): the labels of the concept layouts, yes first."""
        return (self.word, self.contrast)


def question_of(template: Template) -> str | None:
    """The template's question: its text up to the first "?", placeholders as ``{name}``; None
    when it asks none."""
    text = "".join(lit + (f"{{{name}}}" if i < len(template.fields) else "")
                   for i, (lit, name) in enumerate(zip(template.literals, (*template.fields, ""))))
    end = text.find("?")
    if end < 0:
        return None
    # the question's own sentence: after the last sentence end or line break before the "?"
    start = max(text.rfind(mark, 0, end) for mark in (". ", "! ", "\n", ": "))
    return text[start + 1 if start >= 0 else 0 : end + 1].strip()


def concept_of(template: Template) -> Concept | None:
    """The concept a filter's question names, or None (no question, a question about a row's
    own value, or no content word in it)."""
    q = question_of(template)
    kind = _what_the_row_is(_words(q)) if q is not None else None
    if kind is not None:
        return Concept(kind, ANTONYMS.get(kind, OTHER), names_a_kind=True)
    picked = _concept_words(template)
    if picked is None or "placeholdervalue" in picked:
        return None
    word = " ".join(picked)
    return Concept(word, ANTONYMS.get(word, OTHER))


def concept_column(template: Template) -> str | None:
    """The placeholder a filter's question asks about when the concept is a row's own value
    ("Is the headline {title} about {topic}?" -> "topic"; a semantic join's right side), else None."""
    picked = _concept_words(template)
    if picked != ["placeholdervalue"]:
        return None
    q = question_of(template) or ""
    names = re.findall(r"\{([^}]+)\}", q)
    return names[-1] if names else None


def _concept_words(template: Template) -> list[str] | None:
    """The question's concept as lower-case words (a placeholder as "placeholdervalue"), or None."""
    q = question_of(template)
    if q is None:
        return None
    # a trailing phrase about a row's value ("happy with their {product}?") is not the concept;
    # a concept that is a placeholder ("about {topic}?") changes per row (``concept_column``)
    body = re.sub(r"\s+(?:with|for|of|in|on|at|to|from|by)\s+(?:(?:the|their|its|his|her|this|that|a|an)\s+)?\{[^}]+\}[^?]*\?$",
                  "?", q)
    words = _words(body)
    if not words or words[0] not in AUXILIARIES:
        return None
    feeling = _attitude_before_preposition(words)
    if feeling is not None:
        return [feeling]
    if "about" in words:
        tail = words[len(words) - 1 - words[::-1].index("about") + 1 :]
        tail = [w for w in tail if w not in STOP]
        while len(tail) > 1 and tail[-1] in GENERIC_NOUNS:
            tail.pop()
        picked = tail[:3]
    else:
        content = [w for w in words[1:] if w not in STOP]
        while len(content) > 1 and content[-1] in GENERIC_NOUNS:
            content.pop()
        picked = content[-1:]
    if not picked or picked[-1] in GENERIC_NOUNS or picked[-1] in AUXILIARIES:
        return None
    if "placeholdervalue" in picked:
        # the concept is a row's value, alone, or none at all
        return ["placeholdervalue"] if picked[-1] == "placeholdervalue" and len(picked) <= 2 else None
    return picked


def _words(text: str) -> list[str]:
    """``text``'s words in lower case, a placeholder as one word that can never be the concept."""
    return [w.lower() for w in _WORD.findall(re.sub(r"\{[^}]+\}", " PLACEHOLDERVALUE ", text))]


def _what_the_row_is(words: list[str]) -> str | None:
    """When every content word of the whole question names what a row is ("Is this a review of a
    beer?", "Is this a movie review?"), the question asks whether the row is a kind of thing: the
    word that tells the kind apart is the one after "of a" or "about a" (or a bare noun there:
    "about beers"), else the first of the nouns after "a" ("movie"). None when another content
    word or a placeholder is in the question, or when it names a given thing ("about this
    product": a pairing, not a kind)."""
    nouns = [w for w in words[1:] if w not in STOP]
    if not words or words[0] not in AUXILIARIES or not nouns or not all(w in GENERIC_NOUNS for w in nouns):
        return None
    for k in range(len(words) - 1, 0, -1):
        if words[k] in ("of", "about"):
            rest = words[k + 1 :]
            if rest and (rest[0] in ("a", "an") or rest[0] not in STOP):
                named = [w for w in rest if w not in STOP]
                return named[-1] if named else None
            return None
    return (nouns[-2] if len(nouns) >= 2 else nouns[0]) if {"a", "an"} & set(words) else None


def _attitude_before_preposition(words: list[str]) -> str | None:
    """The first word of feeling or judgement that a preposition follows ("disappointed" in "is
    the customer disappointed with this purchase"), or None. The object after the preposition
    is what the feeling is about, not the concept."""
    for word, after in zip(words[1:], words[2:]):
        if after not in ATTITUDE_PREPOSITIONS or word in GENERIC_NOUNS or word in STOP:
            continue
        if word in ATTITUDES or word.endswith(ATTITUDE_SUFFIXES):
            return word
    return None


#: the judgement the model may read in a question that the lexicon reads no judgement in ("Does
#: the critic like the film?": the lexicon reads "like", scored against "other"; the model says a
#: yes there means "positive")
POLAR = ("positive", "negative")
#: the answer field the model proposes a concept after ("Question: <q>\nAnswer: yes\nMeaning:")
PROPOSAL_FIELD = "Meaning"


def proposal_prompt(template: Template) -> str | None:
    """The text after which the model names what a "yes" to the question means (None: the
    template asks no question)."""
    q = question_of(template)
    if q is None:
        return None
    # a placeholder reads as what it names ("happy with their product?")
    return "Question: " + re.sub(r"\{([^}]+)\}", lambda m: m.group(1).replace("_", " "), q) + "\nAnswer: yes"


def proposal_words(template: Template) -> list[str]:
    """The words the model chooses among: the question's own words (any language: no lexicon
    reads them) and the two words of a judgement."""
    q = re.sub(r"\{[^}]+\}", " ", question_of(template) or "")
    words = [w.lower() for w in re.findall(r"[^\W\d_][^\W_'-]*", q)]
    seen = dict.fromkeys(w for w in words if w not in STOP and w not in AUXILIARIES and w not in GENERIC_NOUNS
                         and len(w) > 2)
    return [*seen, *(p for p in POLAR if p not in seen)]


def proposed_concept(scores: dict[str, float], lexicon: Concept | None) -> Concept | None:
    """The concept the model proposes from its scores of ``proposal_words`` after the proposal
    prompt, when it adds one to the lexicon's (None: it does not). A judgement ("positive") is
    taken when the lexicon read none; a word of the question only when the lexicon read no
    concept at all (a question it cannot parse, in another language for one)."""
    if not scores:
        return None
    ranked = sorted(scores, key=lambda w: -scores[w])
    top = ranked[0]
    if len(ranked) > 1 and scores[ranked[1]] >= scores[top] - 1e-9:
        return None  # the model prefers no word: it proposes nothing
    if top in POLAR:
        if lexicon is not None and (lexicon.word in POLAR or lexicon.contrast != OTHER or lexicon.names_a_kind):
            # the lexicon read a judgement with its own opposite already, or a question about
            # what kind of thing a row is, which a judgement does not answer
            return None
        return Concept(top, POLAR[1] if top == POLAR[0] else POLAR[0])
    if lexicon is None:
        return Concept(top, ANTONYMS.get(top, OTHER))
    return None
