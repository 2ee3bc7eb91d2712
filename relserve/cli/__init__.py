"""The ``relserve`` command line (typer). Each command group lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="LLM calls over table rows, served fast.")


def _register() -> None:
    # Imported here so that `relserve --help` stays fast and each module adds its own commands.
    from relserve.cli import calibrate, demo, model, plans  # noqa: F401

    for name in ("bench", "sim", "serve", "sql"):
        try:
            __import__(f"relserve.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"relserve.cli.{name}":
                raise


_register()
