"""``relserve bench ...``: write traces and replay them on the real engine, policy against policy."""

from __future__ import annotations

from pathlib import Path

import typer

from relserve.cli import app
from relserve.policy import POLICY_NAMES

bench_app = typer.Typer(no_args_is_help=True, help="Traces and real-engine benchmarks.")
app.add_typer(bench_app, name="bench")


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


@bench_app.command("trace")
def trace(
    out: Path = typer.Option(..., "--out", "-o", help="JSON Lines file to write."),
    table: str = typer.Option("rotten_tomatoes", help="Table(s) from ../shared/datasets, comma-separated."),
    n: int = typer.Option(100, help="Number of relQueries."),
    rate: float = typer.Option(1.0, help="Poisson arrival rate (relQueries/s)."),
    rows: str = typer.Option("1,100", help="Rows per relQuery: 'lo,hi' (uniform)."),
    types: str = typer.Option("", help="Query types to draw from (default: all five)."),
    seed: int = typer.Option(0, help="Random seed."),
    kind: str = typer.Option("standard", help="'standard' (the paper's five query types) or 'long' (long prompts and answers)."),
) -> None:
    """Generate a trace: N relQueries, uniform row counts, Poisson arrivals; the five query types
    of the paper, or (``--kind long``) long prompts (200-700 tokens) with long answers (64-128)."""
    from relserve.errors import ConfigError
    from relserve.workloads import generate_long_trace, generate_trace, trace_stats, write_trace

    lo, hi = (int(x) for x in rows.split(","))
    if kind == "standard":
        queries = generate_trace(_csv(table), n, rate, rows=(lo, hi), types=_csv(types) or None, seed=seed)
    elif kind == "long":
        if types:
            raise ConfigError("--types applies to the standard kind only")
        queries = generate_long_trace(_csv(table), n, rate, rows=(lo, hi), seed=seed)
    else:
        raise ConfigError(f"unknown trace kind {kind!r}; choose 'standard' or 'long'")
    write_trace(queries, out)
    typer.echo(f"wrote {out}: {trace_stats(queries)}")


@bench_app.command("run")
def run(
    trace: Path = typer.Option(..., "--trace", "-t", help="Trace (JSON Lines) to replay."),
    policies: str = typer.Option(",".join(POLICY_NAMES), help="Policies, comma-separated."),
    loads: str = typer.Option("1", help="Load factors: arrivals this many times as fast as in the trace."),
    json_out: Path = typer.Option(None, "--json", help="Write the full results as JSON."),
    markdown_out: Path = typer.Option(None, "--markdown", help="Write the summary table as Markdown."),
    plots: Path = typer.Option(None, "--plots", help="Directory for the PNG plots (Fig. 9-11)."),
    isolated: bool = typer.Option(True, help="Measure each relQuery alone for the slowdown metric."),
    simulate: bool = typer.Option(True, help="Also simulate the same runs and compare."),
    kv_cache_gb: float = typer.Option(2.0, help="KV cache size of the engine."),
    max_num_seqs: int = typer.Option(256, help="Most requests running at once."),
    max_num_batched_tokens: int = typer.Option(1024, help="Token budget of a step."),
) -> None:
    """Replay TRACE once per policy and load on the real engine and report them side by side."""
    from rich.console import Console

    from relserve.benchmark import BenchmarkConfig, run_benchmark
    from relserve.benchmark.report import markdown, write
    from relserve.workloads import read_trace

    console = Console()
    queries = read_trace(trace)
    cfg = BenchmarkConfig(
        policies=_csv(policies),
        loads=[float(x) for x in _csv(loads)],
        engine={"kv_cache_gb": kv_cache_gb, "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens},
        isolated=isolated,
        simulate=simulate,
    )
    report = run_benchmark(queries, cfg, progress=lambda msg: console.log(msg))
    console.print(markdown(report))
    for path in write(report, json_out, markdown_out, plots):
        console.print(f"wrote {path}")


@bench_app.command("report")
def report(
    json_in: Path = typer.Argument(..., help="Results written by `relserve bench run --json`."),
    markdown_out: Path = typer.Option(None, "--markdown", help="Write the summary table as Markdown."),
    plots: Path = typer.Option(None, "--plots", help="Directory for the PNG plots (Fig. 9-11)."),
    resimulate: Path = typer.Option(
        None, "--resimulate", exists=True, dir_okay=False,
        help="The run's trace: simulate the saved run again with today's simulator (no engine).",
    ),
    model: str = typer.Option("smollm2", help="With --resimulate: the model the run used (its tokenizer)."),
    json_out: Path = typer.Option(None, "--json", help="With --resimulate: write the run with the new simulation."),
) -> None:
    """Render a saved benchmark run again: the table, the ratios, the simulator check, the plots;
    with ``--resimulate TRACE``, the simulator's side computed again (after a change to the
    simulator or the policies, without replaying on the engine)."""
    import json

    from rich.console import Console

    from relserve.benchmark import BenchmarkReport
    from relserve.benchmark.report import markdown, write

    console = Console()
    try:
        saved = BenchmarkReport.from_dict(json.loads(json_in.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        raise typer.BadParameter(f"{json_in}: not a benchmark result ({exc})") from exc
    if resimulate is not None:
        from relserve.benchmark.run import resimulate as simulate_again
        from relserve.workloads import read_trace

        saved.simulated = simulate_again(read_trace(resimulate), saved, model)
    elif json_out is not None:
        raise typer.BadParameter("--json writes a resimulated run: give --resimulate TRACE too")
    console.print(markdown(saved))
    for path in write(saved, json_out, markdown_out, plots):
        console.print(f"wrote {path}")
