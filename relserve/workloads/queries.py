"""The five relQuery task types, written as a template for each benchmark table.

The types and their output limits follow the RelServe evaluation (filtering 5, classification 10,
rating 5, summarization 50, open question answering 100 tokens); the wording is our own. Each
template puts the instruction first, so every row of a relQuery shares it as a prompt prefix, then
the row's one or two fields, then a short answer-format line that keeps a small instruct model
on task.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property

from relserve.errors import ConfigError
from relserve.template import Template
from relserve.workloads.tables import TABLE_NAMES, table_info


class QueryType(str, enum.Enum):  # noqa: UP042 (StrEnum changes what str() of a member gives)
    FILTERING = "filtering"
    CLASSIFICATION = "classification"
    RATING = "rating"
    SUMMARIZATION = "summarization"
    OPEN = "open"


#: output token limit of each type
MAX_TOKENS: dict[QueryType, int] = {
    QueryType.FILTERING: 5,
    QueryType.CLASSIFICATION: 10,
    QueryType.RATING: 5,
    QueryType.SUMMARIZATION: 50,
    QueryType.OPEN: 100,
}
QUERY_TYPES: tuple[str, ...] = tuple(t.value for t in QueryType)


@dataclass(frozen=True)
class QuerySpec:
    table: str
    type: QueryType
    template: str

    @property
    def max_tokens(self) -> int:
        return MAX_TOKENS[self.type]

    @cached_property
    def parsed(self) -> Template:
        return Template.parse(self.template)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.parsed.columns


_F, _C, _R, _S, _O = QueryType.FILTERING, QueryType.CLASSIFICATION, QueryType.RATING, QueryType.SUMMARIZATION, QueryType.OPEN

_TEMPLATES: dict[str, dict[QueryType, str]] = {
    "rotten_tomatoes": {
        _F: "You help parents pick a film for a family evening. Read the plot summary below.\n"
        "Plot: {movie_info}\n"
        "Is this film suitable for young children? Answer only yes or no.",
        _C: "Read the film critic's review below and label its sentiment.\n"
        "Review: {review_content}\n"
        "Reply with exactly one word: positive, negative or neutral.",
        _R: "Given a film's plot and one critic's review of it, guess the score the critic gave.\n"
        "Plot: {movie_info}\n"
        "Review: {review_content}\n"
        "Reply with a single digit from 1 (awful) to 5 (excellent) and nothing else.",
        _S: "Summarize the critic's opinion of the film in one sentence of at most 20 words.\n"
        "Review: {review_content}\n"
        "Summary:",
        _O: "Based on the plot summary below, describe in two or three sentences which audiences "
        "would enjoy this film most, and why.\n"
        "Plot: {movie_info}",
    },
    "amazon_reviews": {
        _F: "Does the customer review below report a defect, breakage or quality problem with the product?\n"
        "Review: {text}\n"
        "Answer only yes or no.",
        _C: "Label the sentiment of this product review.\n"
        "Review title: {title}\n"
        "Review: {text}\n"
        "Reply with exactly one word: positive, negative or neutral.",
        _R: "Guess how many stars (1 to 5) the customer gave the product, from the review.\n"
        "Product: {name}\n"
        "Review: {text}\n"
        "Reply with a single digit and nothing else.",
        _S: "Summarize what the customer thinks of the product in at most 20 words.\n"
        "Product: {name}\n"
        "Review: {text}\n"
        "Summary:",
        _O: "Who would benefit most from this product? Answer in two or three sentences and give one "
        "practical tip for using it.\n"
        "Product: {name}\n"
        "Category: {category}",
    },
    "beer_ratings": {
        _F: "Is the beer style below usually dark (brown or black) in colour?\n"
        "Style: {beer/style}\n"
        "Answer only yes or no.",
        _C: "A reviewer scored a beer's taste and its overall quality. Classify the verdict.\n"
        "Taste score: {review/taste}\n"
        "Overall score: {review/overall}\n"
        "Reply with exactly one word: poor, average or excellent.",
        _R: "A reviewer rated a beer's palate and appearance as shown. Predict the taste score they gave, "
        "out of 10.\n"
        "Palate: {review/palate}\n"
        "Appearance: {review/appearance}\n"
        "Reply with a whole number from 1 to 10 and nothing else.",
        _S: "Write a tasting note of at most 20 words for the beer below.\n"
        "Beer: {beer/name}\n"
        "Style: {beer/style}\n"
        "Note:",
        _O: "Suggest two dishes that go well with the beer below and explain each choice briefly.\n"
        "Beer: {beer/name}\n"
        "Style: {beer/style}",
    },
    "beer_reviews": {
        _F: "Does the beer review below mention a hoppy or bitter flavour?\n"
        "Review: {review_text}\n"
        "Answer only yes or no.",
        _C: "Label the reviewer's overall opinion of the beer.\n"
        "Review: {review_text}\n"
        "Reply with exactly one word: positive, negative or mixed.",
        _R: "Guess the reviewer's rating of the beer from 1 (poor) to 5 (outstanding).\n"
        "Brewery: {brewery}\n"
        "Review: {review_text}\n"
        "Reply with a single digit and nothing else.",
        _S: "Summarize this beer review in at most 20 words.\n"
        "Beer: {beer_name}\n"
        "Review: {review_text}\n"
        "Summary:",
        _O: "Describe in two or three sentences what a newcomer should expect when tasting this style "
        "of beer, and one food to pair with it.\n"
        "Style: {style}",
    },
    "movies_small": {
        _F: "Read the plot summary below. Does the film contain violence or scary scenes?\n"
        "Plot: {movie_info}\n"
        "Answer only yes or no.",
        _C: "Label the sentiment of the film review below.\n"
        "Review: {review_content}\n"
        "Reply with exactly one word: positive, negative or neutral.",
        _R: "Guess the score (1 to 5) the critic gave the film, from the review.\n"
        "Film: {movie_title}\n"
        "Review: {review_content}\n"
        "Reply with a single digit and nothing else.",
        _S: "Summarize the plot of the film in one sentence of at most 20 words.\n"
        "Film: {movie_title}\n"
        "Plot: {movie_info}\n"
        "Summary:",
        _O: "Based on the plot summary, who would enjoy this film most? Answer in two or three sentences.\n"
        "Film: {movie_title}\n"
        "Plot: {movie_info}",
    },
}

assert set(_TEMPLATES) == set(TABLE_NAMES), "every benchmark table needs its templates"


#: The "long" workload: long prompts (a detailed brief, then the row's longest fields: 200 to 700
#: tokens with the chat template) and long answers (every row runs to its ``max_tokens`` of 64 to
#: 128, decoding with ``ignore_eos``). Other tables and wording than the five types above, so a
#: scheduler tuned on the standard trace is validated on work it was not tuned on.
LONG_MAX_TOKENS: tuple[int, ...] = (64, 96, 128)
LONG_TEMPLATES: dict[str, tuple[str, ...]] = {
    "rotten_tomatoes": (
        "You are a film editor preparing notes for a streaming catalogue. For the film described below, "
        "write a paragraph that covers its premise, its tone, the kind of viewer it suits, and how the "
        "critic's review below judges it. Write full sentences, avoid spoilers beyond the first act, and "
        "do not repeat the synopsis word for word.\n"
        "Synopsis: {movie_info}\n"
        "Critic's review: {review_content}\n"
        "Catalogue notes:",
    ),
    "movies_small": (
        "A film club asks you to introduce the film below before a screening. Write a short talk in plain "
        "language: what the story is about, what to watch for, and what a critic thought of it. Keep a "
        "friendly tone, mention the title once, and finish with one question for the discussion after "
        "the film.\n"
        "Title: {movie_title}\n"
        "Synopsis: {movie_info}\n"
        "Critic's review: {review_content}\n"
        "Introduction:",
    ),
    "amazon_reviews": (
        "You write replies for a shop's customer care team. Read the product name, the review title and "
        "the customer's review below, then write a courteous reply that thanks the customer, answers each "
        "concern the review raises in turn, suggests one concrete next step, and never promises a refund "
        "or a replacement. Use at most two short paragraphs.\n"
        "Product: {name}\n"
        "Review title: {title}\n"
        "Review: {text}\n"
        "Reply:",
    ),
    "beer_reviews": (
        "You edit a beer guide. Rewrite the tasting review below as a guide entry for readers who have "
        "never tried this beer: describe its look, aroma, taste and finish in your own words, say which "
        "food it would go with, and keep any opinion clearly marked as the reviewer's. Write one "
        "paragraph in the present tense.\n"
        "Beer: {beer_name}\n"
        "Style: {style}\n"
        "Brewery: {brewery}\n"
        "Review: {review_text}\n"
        "Guide entry:",
    ),
}


def query_types(types: list[str | QueryType] | tuple[str | QueryType, ...] | None = None) -> tuple[QueryType, ...]:
    """Validate a restriction of the query types (None: all five)."""
    if types is None:
        return tuple(QueryType)
    out: list[QueryType] = []
    for t in types:
        try:
            out.append(QueryType(t))
        except ValueError:
            raise ConfigError(f"unknown query type {t!r}; choose from {', '.join(QUERY_TYPES)}") from None
    if not out:
        raise ConfigError("the list of query types is empty")
    return tuple(dict.fromkeys(out))


def query_spec(table: str, type: str | QueryType) -> QuerySpec:
    table_info(table)  # raises for an unknown table
    (qtype,) = query_types([type])
    return QuerySpec(table, qtype, _TEMPLATES[table][qtype])


def queries_for(table: str, types: list[str | QueryType] | tuple[str | QueryType, ...] | None = None) -> list[QuerySpec]:
    """The query specs of one table, in the order of ``QueryType`` (or of ``types``)."""
    return [query_spec(table, t) for t in query_types(types)]
