"""Filters at natural prevalence (issue 43): labelled tasks where 5-25% of the rows are true, as
the filters users write select, built from the tables in ../shared/datasets.

Two groups, kept apart: the TUNING tasks chose the defaults of relserve's label decision and its
request shapes; the CHECK tasks were never looked at while choosing and check them.

TUNING
  rt_positive_15   rotten_tomatoes reviews, 15% fresh: "Is this movie review positive?"
  beer_stout_10    beer_reviews review text, 10% stout/porter: "Is this beer a stout?"
  am_automotive_10 amazon product names, 10% Automotive: "Is this product an automotive product?"
  am_unhappy_10    amazon reviews, 10% rated 1-2 (others 4-5): "Is the customer unhappy?"
CHECK
  am_satisfied_15  amazon reviews, 15% rated 4-5 (others 1-2): "Is the reviewer satisfied?"
  rt_horror        rotten_tomatoes movies (one row per movie), Horror in genres (11%)
  am_health_10     amazon product names, 10% Health & Household: "Is this product a health product?"
  beer_wheat_8     beer_reviews review text, 8% wheat beers: "Is this a wheat beer?"
  am_negative_20   amazon reviews, 20% rated 1-2: "Is this review negative?"
  am_disappointed_15  amazon reviews, 15% rated 1-2 (others 3-5): "Is the customer disappointed
                   with this purchase?" (a feeling and its object; added 28 Nov 2026 with the
                   concept reader's fix for such questions)
  am_enthusiastic_15  amazon reviews, 15% rated 5 (others 1-3): "Is the reviewer enthusiastic
                   about the product?" (the same)

Every task is a seeded sample, so runs compare.
"""

from __future__ import annotations

from dataclasses import dataclass

SEED = 43


@dataclass(frozen=True)
class PrevalenceTask:
    name: str
    group: str
    #: the llm_filter template, as a user writes it
    template: str
    #: per row, the template's placeholder values in the order of ``Template.columns``
    values: list[tuple]
    truth: list[bool]
    #: the word the question names ("about sports" -> "sports"), for the experiments
    concept: str

    @property
    def prevalence(self) -> float:
        return sum(self.truth) / len(self.truth)


def _sample(df, is_true, rows: int, share: float, seed: int | None = None):
    """``rows`` rows of ``df``, ``share`` of them where ``is_true`` (a polars expression), shuffled
    (``seed``: the module's ``SEED`` unless given, read at call time so that a run can draw
    another sample of the same tasks)."""
    import polars as pl

    seed = SEED if seed is None else seed
    n_true = max(1, round(rows * share))
    pos = df.filter(is_true).sample(n_true, seed=seed, shuffle=True)
    neg = df.filter(~is_true).sample(rows - n_true, seed=seed, shuffle=True)
    both = pl.concat([pos.with_columns(pl.lit(True).alias("_truth")), neg.with_columns(pl.lit(False).alias("_truth"))])
    return both.sample(fraction=1.0, seed=seed, shuffle=True)


def _natural(df, is_true, rows: int, seed: int | None = None):
    """``rows`` rows of ``df`` (all of them if fewer) with their truth, at the share the data has
    (questions about what a row *is*: the table sets the prevalence, not the question)."""

    seed = SEED if seed is None else seed
    picked = df.sample(min(rows, df.height), seed=seed, shuffle=True)
    return picked.with_columns(is_true.alias("_truth"))


def _task(name, group, template, df, columns, concept) -> PrevalenceTask:
    return PrevalenceTask(name, group, template, [tuple(r[c] for c in columns) for r in df.iter_rows(named=True)],
                          df["_truth"].to_list(), concept)


def prevalence_tasks(rows: int = 200) -> list[PrevalenceTask]:
    import polars as pl

    from relserve.workloads import load_table

    rt = load_table("rotten_tomatoes").filter(pl.col("review_content").str.len_chars() > 20)
    beer = load_table("beer_reviews").filter(pl.col("review_text").str.len_chars() > 20)
    beer = beer.with_columns(pl.col("style").str.to_lowercase().alias("_style"))
    am = load_table("amazon_reviews").filter(pl.col("text").str.len_chars() > 0)
    am_sent = am.filter(pl.col("rating") != 3)
    products = am.unique("name", keep="first", maintain_order=True)
    top = pl.col("category").str.split(",").list.first()
    movies = (load_table("rotten_tomatoes").unique("movie_id", keep="first", maintain_order=True)
              .filter(pl.col("movie_info").str.len_chars() > 20, pl.col("genres").is_not_null()))
    stout = pl.col("_style").str.contains("stout|porter")
    wheat = pl.col("_style").str.contains("wheat|weiss|witbier|weizen")

    drama, comedy, action = (pl.col("genres").str.contains(g) for g in ("Drama", "Comedy", "Action"))
    fresh = pl.col("review_type") == "fresh"
    lager = pl.col("_style").str.contains("lager|pils|helles|bock|dunkel|rzen|oktoberfest|schwarzbier|zwickel|malt liquor")
    ale = pl.col("_style").str.contains("ale|bitter|ipa|stout|porter|saison|wheat|weiss|witbier|tripel|dubbel|quadrupel")
    positive = "Is this movie review positive? Review: {review}"
    out = [
        _task("rt_positive_15", "tuning", positive, _sample(rt, fresh, rows, 0.15), ["review_content"], "positive"),
        *(_task(f"rt_positive_{p}", "tuning", positive, _sample(rt, fresh, rows, p / 100), ["review_content"],
                "positive") for p in (2, 25, 75, 90)),
        _task("beer_stout_10", "tuning", "Is this beer a stout? Review: {review}",
              _sample(beer, stout, rows, 0.10), ["review_text"], "stout"),
        _task("am_automotive_10", "tuning", "Is this product an automotive product? Product: {name}",
              _sample(products, top == "Automotive", rows, 0.10), ["name"], "automotive"),
        _task("am_unhappy_10", "tuning", "Is the customer unhappy? Review: {text}",
              _sample(am_sent, pl.col("rating") <= 2, rows, 0.10), ["text"], "unhappy"),
        _task("mv_comedy", "tuning", "Is this movie a comedy? Synopsis: {synopsis}",
              _natural(movies, comedy, rows), ["movie_info"], "comedy"),
        _task("beer_lager", "tuning", "Is this beer a lager? Review: {review}",
              _natural(beer, lager & ~ale, rows), ["review_text"], "lager"),
        _task("am_satisfied_15", "check", "Is the reviewer satisfied? Title: {title}. Review: {text}",
              _sample(am_sent, pl.col("rating") >= 4, rows, 0.15), ["title", "text"], "satisfied"),
        *(_task(f"am_satisfied_{p}", "check", "Is the reviewer satisfied? Title: {title}. Review: {text}",
                _sample(am_sent, pl.col("rating") >= 4, rows, p / 100), ["title", "text"], "satisfied")
          for p in (2, 80)),
        *(_task(f"rt_likes_{p}", "check", "Does the critic like the film? {review}",
                _sample(rt, fresh, rows, p / 100, seed=SEED + 100), ["review_content"], "like")
          for p in (5, 50, 90)),
        _task("am_health_10", "check", "Is this product a health product? Product: {name}",
              _sample(products, top == "Health & Household", rows, 0.10), ["name"], "health"),
        _task("am_office", "check", "Is this an office product? {name}",
              _natural(products, top.str.starts_with("Office"), rows), ["name"], "office"),
        _task("am_arts_70", "check", "Is this product for arts and crafts? {name}",
              _sample(products.filter(top.str.starts_with("Arts") | (top == "Automotive")),
                      top.str.starts_with("Arts"), rows, 0.70), ["name"], "arts and crafts"),
        _task("beer_wheat_8", "check", "Is this a wheat beer? Review: {review}",
              _sample(beer, wheat, rows, 0.08), ["review_text"], "wheat"),
        _task("beer_ale", "check", "Is this beer an ale? {review}",
              _natural(beer.filter(ale | lager), ale & ~lager, rows), ["review_text"], "ale"),
        _task("am_negative_20", "check", "Is this review negative? {title}. {text}",
              _sample(am_sent, pl.col("rating") <= 2, rows, 0.20), ["title", "text"], "negative"),
        _task("am_disappointed_15", "check", "Is the customer disappointed with this purchase? {title}. {text}",
              _sample(am, pl.col("rating") <= 2, rows, 0.15), ["title", "text"], "disappointed"),
        _task("am_enthusiastic_15", "check", "Is the reviewer enthusiastic about the product? {title}. {text}",
              _sample(am.filter(pl.col("rating") != 4), pl.col("rating") == 5, rows, 0.15), ["title", "text"],
              "enthusiastic"),
        _task("mv_drama", "check", "Is this film a drama? {synopsis}", _natural(movies, drama, rows),
              ["movie_info"], "drama"),
        _task("mv_action", "check", "Is this an action movie? Plot: {synopsis}", _natural(movies, action, rows),
              ["movie_info"], "action"),
    ]
    return out


def balanced_filter_tasks(rows: int = 200) -> list[PrevalenceTask]:
    """The balanced filters of bench/bench_quality.py (rt_filter tuning; am_filter, am_negative and
    the demo check-only), as ``PrevalenceTask`` for the experiments beside the rare ones."""
    from pathlib import Path

    import polars as pl

    from relserve.workloads import load_table

    rt = load_table("rotten_tomatoes").filter(pl.col("review_content").str.len_chars() > 0)
    am = load_table("amazon_reviews").filter(pl.col("text").str.len_chars() > 0)
    am_sent = am.filter(pl.col("rating") != 3)
    demo = pl.read_csv(Path(__file__).resolve().parent.parent / "datasets" / "demo_reviews.csv")
    demo = demo.with_columns((pl.col("happy") == "yes").alias("_truth"))
    return [
        _task("rt_filter_50", "tuning", "Is this movie review positive? Review: {review}",
              _sample(rt, pl.col("review_type") == "fresh", rows, 0.5), ["review_content"], "positive"),
        _task("am_filter_50", "check", "Is the reviewer satisfied with the product? Title: {title}. Review: {text}",
              _sample(am_sent, pl.col("rating") >= 4, rows, 0.5), ["title", "text"], "satisfied"),
        _task("am_negative_50", "check", "Is this product review negative? Review: {text}",
              _sample(am_sent, pl.col("rating") <= 2, rows, 0.5), ["text"], "negative"),
        _task("demo", "check", "Is this customer happy with their {product}? Review: {review}", demo,
              ["product", "review"], "happy"),
    ]
