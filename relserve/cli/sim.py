"""``relserve sim``: replay a trace on the simulator, policy against policy, and tune the starvation knob."""

from __future__ import annotations

from pathlib import Path

import typer

from relserve.cli import app
from relserve.policy import POLICY_NAMES


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


@app.command()
def sim(
    trace: Path = typer.Option(..., "--trace", "-t", help="Trace (JSON Lines) to replay."),
    policies: str = typer.Option(",".join(POLICY_NAMES), help="Policies, comma-separated."),
    json_out: Path = typer.Option(None, "--json", help="Write results as JSON."),
    markdown_out: Path = typer.Option(None, "--markdown", help="Write the summary as Markdown."),
    preset: str = typer.Option("", help="Cost model preset (e.g. opt-13b-a100); default: this machine's calibration."),
    model: str = typer.Option("smollm2", help="Model whose calibration and tokenizer to use."),
    dtype: str = typer.Option("auto", help="The engine's dtype whose calibration (or preset) to use; auto: as an engine here."),
    load: float = typer.Option(1.0, help="Load factor: arrivals this many times as fast as in the trace."),
    sweep: str = typer.Option("", help="Starvation thresholds to sweep for relserve, e.g. '1,2,4,8,none'."),
    kv_capacity_tokens: int = typer.Option(46_592, help="KV cache capacity in tokens."),
    max_num_seqs: int = typer.Option(256, help="Most requests running at once."),
    max_num_batched_tokens: int = typer.Option(1024, help="Token budget of a step."),
    block_size: int = typer.Option(32, help="KV block size (prefix caching granularity)."),
    limit: bool = typer.Option(True, help="Also the trace's lower bound and clairvoyant schedule, and each policy's ratio to them."),
) -> None:
    """Simulate TRACE under each policy with the calibrated cost model (or a preset)."""
    from rich.console import Console

    from relserve.calibration import load_policy_settings, machine_cost_model
    from relserve.engine.settings import EngineSettings
    from relserve.errors import ConfigError
    from relserve.model import resolve_model
    from relserve.policy import PRESETS
    from relserve.sim import (
        default_limits,
        markdown_table,
        simulate_many,
        sweep_markdown,
        sweep_starvation,
        write_results,
    )
    from relserve.sim.prepared_trace import template_renderer
    from relserve.sim.run import limit_of
    from relserve.workloads import read_trace, scale_arrivals

    console = Console()
    queries = scale_arrivals(read_trace(trace), load)
    spec = resolve_model(model)
    resolved = EngineSettings(dtype=dtype).resolved_dtype
    if preset:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
        cost = PRESETS[preset]
        settings = None
    else:
        # what an engine here would use: the calibration's step model and arranger settings
        cost = machine_cost_model(spec.model_id, resolved)
        settings = load_policy_settings(spec.model_id, resolved)
    from transformers import AutoTokenizer

    from relserve.engine.chat_template import ChatPrompter

    tok = AutoTokenizer.from_pretrained(spec.path)
    render = template_renderer(wrap=ChatPrompter(tok).text)
    tokenize = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    limits = default_limits(
        kv_capacity_tokens=kv_capacity_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
    )
    console.log(f"cost model ({resolved}): {cost.model_dump()}")
    if settings is not None:
        console.log(f"arranger settings `relserve calibrate` chose: {settings.model_dump()}")
    results = simulate_many(queries, _csv(policies), cost, limits, settings=settings, tokenize=tokenize, render=render)
    reference = limit_of(queries, cost, limits, tokenize=tokenize, render=render) if limit else None
    console.print(markdown_table(results, reference))
    swept = None
    if sweep:
        thresholds = [None if x.lower() == "none" else float(x) for x in _csv(sweep)]
        swept = sweep_starvation(queries, thresholds, cost, limits, settings=settings, tokenize=tokenize, render=render)
        swept.limit = reference
        console.print(sweep_markdown(swept))
    if markdown_out and not json_out:
        json_out = markdown_out.with_suffix(".json")
    if json_out:
        write_results(
            results, json_out, markdown_out, sweep=swept, limit=reference,
            meta={"trace": str(trace), "load": load, "dtype": resolved, "cost_model": cost.model_dump(),
                  "policy_settings": settings.model_dump() if settings is not None else None},
        )
