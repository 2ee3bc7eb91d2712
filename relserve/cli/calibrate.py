"""``relserve calibrate``: fit the step-time model on this machine, tune the arranger, store both."""

from __future__ import annotations

from pathlib import Path

import typer

from relserve.cli import app


@app.command()
def calibrate(
    model: str = typer.Option("smollm2", help="Model name or local folder."),
    save: bool = typer.Option(True, help="Store the fit (and the tuned arranger) for this model, machine and dtype."),
    tune: bool = typer.Option(True, help="Choose the arranger's settings by replaying a standard trace in the simulator."),
    quick: bool = typer.Option(False, help="A small probe grid (about a minute), for a smoke test."),
    json_out: Path = typer.Option(None, "--json", help="Write every probe, step and figure as JSON."),
) -> None:
    """Probe prefill, decode and mixed steps over a grid, fit the step model (with the context
    each step attends to), report each term and the error on held-out probes, then pick the
    arranger's settings for this machine in the simulator."""
    import json
    from dataclasses import asdict

    from rich.console import Console
    from tqdm import tqdm

    from relserve import Engine
    from relserve.benchmark.run import _sim_inputs
    from relserve.calibration import save_cost_model
    from relserve.engine.calibrate import ProbeGrid
    from relserve.engine.calibrate import calibrate as run_calibration
    from relserve.sim import template_renderer
    from relserve.sim.tune import tune_arranger, tuning_markdown

    console = Console()
    grid = ProbeGrid().small() if quick else ProbeGrid()
    with console.status("starting the engine..."):
        engine = Engine(model=model, policy="fcfs")
    try:
        with tqdm(desc="probes", unit="probe") as bar:

            def tick(total: int) -> None:
                bar.total = total
                bar.update(1)

            cal = run_calibration(engine, grid, progress=tick)
        inputs = _sim_inputs(engine)
        model_id = engine.model_id
        dtype = engine.settings.resolved_dtype
    finally:
        engine.close()
    console.print(fit_markdown(cal))
    cost = cal.cost_model
    tuning = None
    if tune:
        with console.status("tuning the arranger in the simulator..."):
            tuning = tune_arranger(
                cost, inputs["limits"], tokenize=inputs["tokenize"], render=template_renderer(wrap=inputs["render_wrap"])
            )
        console.print(tuning_markdown(tuning))
    details = {
        "fit": {"coef": cal.fit.coef, "r2": cal.fit.r2, "r2_by_kind": cal.fit.r2_by_kind,
                "held_out_step_error": cal.fit.held_out_step_error, "held_out_probe_errors": cal.fit.held_out_probe_errors,
                "terms": [asdict(t) for t in cal.fit.terms], "dropped": cal.fit.dropped,
                "by_shape": [asdict(e) for e in cal.by_shape]},
        "probes": cal.probes,
        "tuning": tuning.as_dict() if tuning else None,
    }
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({**details, "cost_model": cost.model_dump(),
                                        "samples": [asdict(s) for s in cal.samples], "held_out": [asdict(s) for s in cal.held_out],
                                        "steps": cal.steps}, indent=1))
        console.print(f"wrote {json_out}")
    if save:
        path = save_cost_model(model_id, dtype, cost, details, arranger=tuning.chosen if tuning else None)
        console.print(f"saved to {path}; engines for this model on this machine now use it")


def fit_markdown(cal) -> str:
    """The fit as a person reads it: each term, how much it explains, the held-out error."""
    fit = cal.fit
    units = {
        "b0": "s per step", "bP": "s per step with a prefill", "bD": "s per step with decodes",
        "alpha_p": "s per uncached prompt token", "gamma_p": "s per prefill attention pair",
        "alpha_d": "s per decoded request", "gamma_d": "s per decode context token",
    }
    lines = ["| term | coefficient | unit | share of step time | R^2 without it |", "|---|---|---|---|---|"]
    for t in fit.terms:
        lines.append(f"| {t.name} | {t.coef:.3e} | {units[t.name]} | {t.share:.1%} | {fit.r2 - t.r2_drop:.4f} (-{t.r2_drop:.4f}) |")
    kinds = ", ".join(f"{k} {v:.3f}" for k, v in fit.r2_by_kind.items())
    lines.append("")
    lines.append(f"R^2 {fit.r2:.4f} over {fit.n_fit} steps ({fit.dropped} outliers left out); by kind: {kinds}.")
    if fit.held_out_step_error is not None:
        errs = ", ".join(f"{e:+.1%}" for e in fit.held_out_probe_errors)
        lines.append(
            f"Held out: {fit.n_held_out} steps of {len(fit.held_out_probe_errors)} probes; median step error "
            f"{fit.held_out_step_error:.1%}; probe totals off by {errs} (mean |error| {fit.held_out_probe_error:.1%})."
        )
    if cal.by_shape:
        lines += ["", "| held-out shape | probes | steps | median step error | total error |", "|---|---|---|---|---|"]
        for e in cal.by_shape:
            lines.append(f"| {e.shape} | {e.probes} | {e.steps} | {e.median_step_error:.1%} | {e.total_error:+.1%} |")
    return "\n".join(lines)
