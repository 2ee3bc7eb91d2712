"""Benchmark table loaders and query templates, on the real Parquet files."""

from __future__ import annotations

import pytest

from relserve.binding import Binding
from relserve.errors import ConfigError
from relserve.template import Template
from relserve.workloads import (
    ENV_VAR,
    MAX_TOKENS,
    TABLE_NAMES,
    TABLES,
    DatasetNotFound,
    QueryType,
    load_table,
    queries_for,
    query_spec,
    resolve_datasets_dir,
)

README_ROWS = {
    "rotten_tomatoes": 10_000,
    "amazon_reviews": 7_325,
    "beer_ratings": 28_479,
    "beer_reviews": 10_000,
    "movies_small": 1_019,
}


@pytest.mark.parametrize("name", sorted(README_ROWS))
def test_tables_load_with_readme_row_counts(name):
    df = load_table(name)
    assert df.height == README_ROWS[name]
    assert TABLES[name].rows == README_ROWS[name]


def test_load_only_some_columns():
    df = load_table("beer_ratings", columns=["beer/name", "review/overall"])
    assert df.columns == ["beer/name", "review/overall"]
    assert df.height == 28_479


def test_unknown_column_is_named():
    with pytest.raises(ConfigError, match="'nope'"):
        load_table("movies_small", columns=["movie_title", "nope"])


def test_unknown_table_lists_known_ones():
    with pytest.raises(ConfigError) as e:
        load_table("imdb")
    assert "imdb" in str(e.value)
    for name in TABLE_NAMES:
        assert name in str(e.value)


def test_missing_file_names_file_and_env_var(tmp_path):
    with pytest.raises(DatasetNotFound) as e:
        load_table("beer_reviews", datasets_dir=tmp_path)
    msg = str(e.value)
    assert "beer_reviews.parquet" in msg and str(tmp_path) in msg and ENV_VAR in msg


def test_env_var_overrides_default(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert resolve_datasets_dir() == tmp_path
    with pytest.raises(DatasetNotFound):
        load_table("movies_small")
    # an explicit argument beats the environment
    assert resolve_datasets_dir("/somewhere/else").as_posix() == "/somewhere/else"


@pytest.mark.parametrize("name", TABLE_NAMES)
def test_templates_use_existing_columns_and_render(name):
    specs = queries_for(name)
    assert [s.type for s in specs] == list(QueryType)
    df = load_table(name)
    row = df.row(0, named=True)
    for s in specs:
        t = Template.parse(s.template)
        assert 1 <= len(t.columns) <= 2, s.template
        Binding(t).check_names(df.columns)
        assert s.max_tokens == MAX_TOKENS[s.type]
        # the instruction comes first, so the rows of a relQuery share it as a prefix
        assert len(t.static_prefix) >= 30
        filled = {c: (row[c] or "x") for c in t.columns}
        assert "{" not in t.render(filled)


def test_output_limits_match_the_paper():
    assert [MAX_TOKENS[t] for t in QueryType] == [5, 10, 5, 50, 100]


def test_short_answer_types_say_how_to_answer():
    for name in TABLE_NAMES:
        assert "yes or no" in query_spec(name, "filtering").template
        assert "one word" in query_spec(name, "classification").template


def test_unknown_query_type():
    with pytest.raises(ConfigError, match="translation"):
        queries_for("movies_small", ["filtering", "translation"])
