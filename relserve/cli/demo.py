"""``relserve demo``: a real LLM over the project's demo table, with progress and a latency breakdown."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import typer

from relserve.cli import app

DEMO_TABLE = Path(__file__).resolve().parents[2] / "datasets" / "demo_reviews.csv"
#: an llm_filter question; llm_filter adds "Answer yes or no." and chooses the answer
QUESTION = "Is this customer happy with their {product}? Review: {review}"


def load_demo_table(path: Path = DEMO_TABLE) -> list[dict]:
    if not path.exists():
        raise typer.BadParameter(f"demo table not found at {path} (run the demo from a clone of the repository)")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def demo_accuracy_line(rows: list[dict], values: list, method: str) -> str:
    """How many answers match the table's known labels (its ``happy`` column). The demo's
    settings are relserve's defaults, chosen on other tables (docs/quality.md), not on these rows."""
    known = [(r.get("happy"), v) for r, v in zip(rows, values) if r.get("happy") in ("yes", "no")]
    right = sum((label == "yes") == v for label, v in known if v is not None)
    return (
        f"answers matching the known labels: {right} of {len(known)} ({right / max(len(known), 1):.0%}; "
        f"method {method}; always answering one label would match {max(sum(k == 'yes' for k, _ in known), sum(k == 'no' for k, _ in known))})"
    )


def method_label(call, labels=None) -> str:
    """'adaptive, layout row, Sentiment: happy/unhappy' or 'bootstrap, prompt shape completion':
    how the demo's answers were chosen (``labels``: what the label method reported)."""
    from relserve.label_names import LabelMethodName

    if call.label_method == LabelMethodName.GENERATE:
        return str(call.label_method)
    layout = getattr(getattr(labels, "plan", None), "layout", None)
    if layout is not None:
        return f"{call.label_method}, layout {layout.name}"
    return f"{call.label_method}, prompt shape {call.prompt_shape}"


@app.command()
def demo(
    policy: str = typer.Option("relserve", help="Scheduling policy."),
    model: str = typer.Option("smollm2", help="Model name or local folder."),
    method: str = typer.Option(None, help="How the yes/no answer is chosen: generate, score, prior, batch, bootstrap or adaptive (default: relserve's default)."),
    prompt_shape: str = typer.Option(None, help="Scoring layout: chat, chat_answer, completion or question_first (default: relserve's default)."),
) -> None:
    """Ask the model a question about every row of the demo table and show how it went."""
    from rich.console import Console
    from rich.table import Table

    from relserve import Engine

    console = Console()
    rows = load_demo_table()
    console.print(f"[bold]relserve demo[/]: {len(rows)} reviews from {DEMO_TABLE.name}, model {model}, policy {policy}")
    t0 = time.monotonic()
    with console.status("starting the engine (vLLM, about 25 s)..."):
        engine = Engine(model=model, policy=policy)
    console.print(f"engine ready in {time.monotonic() - t0:.1f} s ({engine.settings.resolved_dtype})")
    try:
        from relserve.functions import make_call
        from relserve.planner.explain import describe_labels
        from relserve.planner.plan_and_run import run_call

        call = make_call("llm_filter", QUESTION, method=method, prompt_shape=prompt_shape)
        columns = [[row[c] for row in rows] for c in call.template.columns]
        # no result cache: the demo shows the engine at work every time
        outcome = run_call(call, columns, engine=engine, cache=False, progress=True)
        table = Table("#", "product", "review", "happy?", "known")
        for i, (row, value, err) in enumerate(zip(rows, outcome.values, outcome.errors)):
            answer = "yes" if value else "no" if value is not None else f"[red]{err}"
            table.add_row(str(i), row["product"], row["review"][:60], answer, row.get("happy", "?"))
        console.print(table)
        console.print(demo_accuracy_line(rows, outcome.values, method_label(call, outcome.labels)))
        found = describe_labels(outcome.labels)
        if found:
            console.print(f"labels: {found}")
        s = outcome.engine_stats
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
                f"scheduler: {st.steps} steps, policy time {1000 * st.policy_s:.1f} ms "
                f"({100 * st.policy_s / max(s.latency_s, 1e-9):.2f}% of the latency)"
            )
    finally:
        engine.close()
