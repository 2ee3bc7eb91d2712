"""``relserve plans ...``: the label plans kept in relserve's home (relserve/labels/memory.py): list
them, forget them, pin or unpin them - as ``ANALYZE`` and its statistics are for a table's.
A call refreshes its own plan with ``label_plan := 'refresh'``; the server keeps its tenants'
plans in its own home (``GET /v1/label-plans``)."""

from __future__ import annotations

import typer

from relserve.cli import app

plans_app = typer.Typer(no_args_is_help=True, help="The label plans of llm_filter / llm_classify calls.")
app.add_typer(plans_app, name="plans")


def _matching(template: str | None, namespace: str | None):
    from relserve.labels.memory import process_memory

    memory = process_memory()
    return memory, [s for s in memory.plans(namespace) if template is None or s.key.template == template]


@plans_app.command("list")
def list_plans(
    template: str = typer.Option(None, help="Only the plans of calls with this template."),
    namespace: str = typer.Option(None, help="A server tenant's prefix-cache namespace (default: this process's own)."),
) -> None:
    """Every kept plan, the most recently used first: the call, and how its rows are decided."""
    _, found = _matching(template, namespace)
    if not found:
        typer.echo("no label plans kept")
    for s in found:
        pinned = "  (pinned)" if s.pinned else ""
        labels = "/".join(s.key.labels)
        typer.echo(f"{s.key.function}({s.key.template!r}) [{labels}] model {s.key.model_id}{pinned}\n  {s.plan.describe()}")


@plans_app.command("forget")
def forget(
    template: str = typer.Option(None, help="Only the plans of calls with this template (default: every plan)."),
    namespace: str = typer.Option(None, help="A server tenant's prefix-cache namespace (default: this process's own)."),
    pinned: bool = typer.Option(False, help="Forget pinned plans too."),
) -> None:
    """Forget plans: the next statement of each call makes a new one from its rows."""
    memory, found = _matching(template, namespace)
    gone = sum(memory.forget(s.key, pinned=pinned) for s in found)
    typer.echo(f"forgot {gone} label plan{'s' if gone != 1 else ''}")


@plans_app.command("pin")
def pin(
    template: str = typer.Argument(..., help="The template of the calls whose plans to pin."),
    namespace: str = typer.Option(None, help="A server tenant's prefix-cache namespace (default: this process's own)."),
    unpin: bool = typer.Option(False, "--unpin", help="Unpin instead."),
) -> None:
    """Pin plans: never replaced by a refresh nor forgotten, until unpinned."""
    memory, found = _matching(template, namespace)
    for s in found:
        memory.pin(s.key, not unpin)
    typer.echo(f"{'unpinned' if unpin else 'pinned'} {len(found)} label plan{'s' if len(found) != 1 else ''}")
