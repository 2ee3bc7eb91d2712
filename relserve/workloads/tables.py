"""Loaders for the benchmark tables (real data kept beside the project, never inside it).

Where the Parquet files are looked for, first match wins:

1. the ``datasets_dir`` argument,
2. the environment variable ``RELSERVE_DATASETS``,
3. ``../shared/datasets`` relative to the repository root (found from this package's location).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from relserve.errors import ConfigError

ENV_VAR = "RELSERVE_DATASETS"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_FALLBACK_DIRS = (_REPO_ROOT.parent / "shared" / "datasets",)


@dataclass(frozen=True)
class TableInfo:
    name: str
    file: str
    #: row count of the file as published (checked by the tests)
    rows: int
    description: str


TABLES: dict[str, TableInfo] = {
    t.name: t
    for t in (
        TableInfo("rotten_tomatoes", "rotten_tomatoes.parquet", 10_000, "Rotten Tomatoes critic reviews joined to movie synopses"),
        TableInfo("amazon_reviews", "amazon_reviews.parquet", 7_325, "Amazon product reviews (2023 subset)"),
        TableInfo("beer_ratings", "beer_ratings.parquet", 28_479, "BeerAdvocate-style scores, many low-cardinality fields"),
        TableInfo("beer_reviews", "beer_reviews.parquet", 10_000, "RateBeer text reviews with brewery and region"),
        TableInfo("movies_small", "movies_small.parquet", 1_019, "GGR paper's movies table (synopsis + review)"),
    )
}
TABLE_NAMES: tuple[str, ...] = tuple(TABLES)


class DatasetNotFound(ConfigError, FileNotFoundError):
    """A benchmark table's Parquet file is not where the loader looked."""


def table_info(name: str) -> TableInfo:
    try:
        return TABLES[name]
    except KeyError:
        raise ConfigError(f"unknown table {name!r}; known tables: {', '.join(TABLE_NAMES)}") from None


def resolve_datasets_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The directory the tables are read from (see the module docstring for the search order)."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    for candidate in _FALLBACK_DIRS:
        if candidate.is_dir():
            return candidate
    return _FALLBACK_DIRS[0]


def table_path(name: str, directory: str | os.PathLike[str] | None = None) -> Path:
    info = table_info(name)
    path = resolve_datasets_dir(directory) / info.file
    if not path.is_file():
        raise DatasetNotFound(
            f"table {name!r}: file {info.file} not found at {path}; "
            f"pass datasets_dir=... or set {ENV_VAR} to the folder holding the benchmark Parquet files"
        )
    return path


def load_table(
    name: str,
    datasets_dir: str | os.PathLike[str] | None = None,
    columns: list[str] | None = None,
) -> pl.DataFrame:
    """Read one benchmark table as a polars DataFrame (optionally only some columns)."""
    path = table_path(name, datasets_dir)
    if columns is not None:
        have = pl.read_parquet_schema(path)
        missing = [c for c in columns if c not in have]
        if missing:
            raise ConfigError(
                f"table {name!r} has no column(s) {', '.join(map(repr, missing))}; columns: {', '.join(have)}"
            )
    return pl.read_parquet(path, columns=columns)
