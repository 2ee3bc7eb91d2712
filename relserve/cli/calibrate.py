"""``relserve calibrate``: fit the step-time predictors on this machine and store them."""

from __future__ import annotations

import typer

from relserve.cli import app


@app.command()
def calibrate(
    model: str = typer.Option("smollm2", help="Model name or local folder."),
    save: bool = typer.Option(True, help="Store the fit for this model and machine."),
) -> None:
    """Measure prefill time against uncached tokens and decode time against batch size."""
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from relserve import Engine
    from relserve.calibration import save_cost_model
    from relserve.engine.calibrate import calibrate as run_calibration

    console = Console()
    with console.status("starting the engine..."):
        engine = Engine(model=model, policy="fcfs")
    try:
        with tqdm(desc="probes", unit="probe") as bar:

            def tick(total: int) -> None:
                bar.total = total
                bar.update(1)

            cal = run_calibration(engine, progress=tick)
    finally:
        engine.close()
    table = Table("predictor", "slope (alpha)", "intercept (beta)", "R^2", "points (outliers left out)")
    for name, fit in (("prefill: s per uncached token", cal.prefill), ("decode: s per request in batch", cal.decode)):
        table.add_row(name, f"{fit.slope:.3e}", f"{fit.intercept:.4f} s", f"{fit.r_squared:.4f}", f"{fit.n} ({fit.dropped})")
    if cal.mixed is not None:
        m = cal.mixed
        table.add_row(
            "mixed: s per prefill token, per decode request",
            f"{m.a:.3e}, {m.b:.3e}",
            f"{m.c:.4f} s",
            f"{m.r_squared:.4f}",
            f"{m.n} (0)",
        )
    console.print(table)
    if save:
        path = save_cost_model(
            engine.model_id,
            cal.cost_model,
            {
                "prefill_r2": cal.prefill.r_squared,
                "decode_r2": cal.decode.r_squared,
                "mixed_r2": cal.mixed.r_squared if cal.mixed else None,
                "prefill_points": cal.prefill_points,
                "decode_points": cal.decode_points,
                "mixed_points": cal.mixed_points,
            },
        )
        console.print(f"saved to {path}; engines for this model on this machine now use it")
