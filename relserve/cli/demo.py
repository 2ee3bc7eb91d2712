"""``relserve demo``: a real LLM over the project's demo table, with progress and a latency breakdown."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import typer

from relserve.cli import app

DEMO_TABLE = Path(__file__).resolve().parents[2] / "datasets" / "demo_reviews.csv"
QUESTION = "Is this customer happy with their {product}? Review: {review}\nAnswer yes or no."


def load_demo_table(path: Path = DEMO_TABLE) -> list[dict]:
    if not path.exists():
        raise typer.BadParameter(f"demo table not found at {path} (run the demo from a clone of the repository)")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@app.command()
def demo(
    policy: str = typer.Option("relserve", help="Scheduling policy."),
    model: str = typer.Option("smollm2", help="Model name or local folder."),
) -> None:
    """Ask the model a question about every row of the demo table and show how it went."""
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from relserve import Engine, RelQuery

    console = Console()
    rows = load_demo_table()
    console.print(f"[bold]relserve demo[/]: {len(rows)} reviews from {DEMO_TABLE.name}, model {model}, policy {policy}")
    t0 = time.monotonic()
    with console.status("starting the engine (vLLM, about 25 s)..."):
        engine = Engine(model=model, policy=policy)
    console.print(f"engine ready in {time.monotonic() - t0:.1f} s")
    try:
        rq = RelQuery(QUESTION, rows, max_tokens=4, choices=["yes", "no"])
        handle = engine.submit(rq)
        with tqdm(total=len(rows), desc="rows", unit="row") as bar:
            for _ in handle:
                bar.update(1)
        result = handle.result()
        table = Table("#", "product", "review", "happy?")
        for row, res in zip(rows, result.rows):
            table.add_row(str(res.index), row["product"], row["review"][:60], res.text or f"[red]{res.error}")
        console.print(table)
        s = result.stats
        console.print(
            f"relQuery {s.rel_id}: {s.num_rows} rows, {s.num_errors} errors, latency {s.latency_s:.2f} s = "
            f"waiting {s.waiting_s:.2f} s + core running {s.core_s:.2f} s + tail running {s.tail_s:.2f} s"
        )
        console.print(
            f"tokens: {s.prompt_tokens} in ({s.cached_tokens} from the prefix cache, {s.prefix_hit_rate:.0%}), "
            f"{s.output_tokens} out"
        )
        if engine.uses_plugin:
            st = engine.scheduler_stats()
            console.print(
                f"scheduler: {st['steps']} steps, policy time {1000 * (st['dpu_seconds'] + st['aba_seconds']):.1f} ms "
                f"({100 * (st['dpu_seconds'] + st['aba_seconds']) / max(s.latency_s, 1e-9):.2f}% of the latency)"
            )
    finally:
        engine.close()
