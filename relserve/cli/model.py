"""``relserve model ...``: prepare and inspect the default model."""

from __future__ import annotations

import typer

from relserve.cli import app

model_app = typer.Typer(no_args_is_help=True, help="Prepare or inspect the model.")
app.add_typer(model_app, name="model")


@model_app.command("prepare")
def prepare(force: bool = typer.Option(False, help="Convert again even if already prepared.")) -> None:
    """Convert the packaged SmolLM2-135M-Instruct GGUF into a Hugging Face folder (offline)."""
    from relserve.model import prepare_default_model

    path = prepare_default_model(force=force)
    typer.echo(f"default model ready: {path}")


@model_app.command("info")
def info(model: str = typer.Option("smollm2", help="Model name or folder.")) -> None:
    """Where a model resolves to, and its stored calibration."""
    from relserve.calibration import calibration_path, default_preset, load_cost_model
    from relserve.engine.settings import EngineSettings
    from relserve.model import resolve_model

    spec = resolve_model(model)
    typer.echo(f"model:       {spec.model_id}\npath:        {spec.path}")
    dtype = EngineSettings().resolved_dtype
    cost = load_cost_model(spec.model_id, dtype)
    stored = calibration_path(spec.model_id, dtype) if cost else f"(none; the {default_preset(dtype).source} in use)"
    typer.echo(f"calibration: {stored} ({dtype})")
    if cost:
        typer.echo(f"  {cost.model_dump()}")
