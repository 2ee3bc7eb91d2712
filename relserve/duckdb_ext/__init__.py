"""LLM functions in DuckDB: the surface (``api.py``), which ``relserve.duckdb`` hands on, and what
it stands on."""
