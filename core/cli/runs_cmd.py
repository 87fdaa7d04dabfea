"""`devops-rl runs`: list the run folders and show one run (metadata, last metrics, events, checkpoints).

Reads only the files documented in docs/run-format.md, so it works on a run that is still going.
"""

from __future__ import annotations

import json
import time

import typer

from core.formatting import format_duration, format_number

runs_app = typer.Typer(help="List and inspect runs (the folders under the runs directory).", no_args_is_help=True)

SHOW_KEYS = ("critic/score/mean", "reward/final/mean", "val/score/mean", "actor/pg_loss", "actor/entropy", "actor/ppo_kl",
             "actor/grad_norm", "actor/lr", "response_length/mean", "timing_s/step", "perf/throughput")


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")


def age(started: float | None) -> str:
    """'3m', '2h', '5d' since a start time ('?' if unknown)."""
    return format_duration(time.time() - started if started is not None else None, missing="?")


@runs_app.command("list")
def list_cmd(
    root: str | None = typer.Option(None, "--root", help="Runs folder (default: $DEVOPS_RL_RUNS_DIR or ./runs)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """One line per run: id, status, mode, backend, steps, best and last reward, age."""
    from pathlib import Path

    from core.paths import runs_root
    from core.runs import list_runs

    folder = Path(root) if root is not None else runs_root()
    if root is not None and (not root.strip() or not folder.is_dir()):
        from core.errors import UserError, shorten

        state = "empty" if not root.strip() else "no such folder" if not folder.exists() else "not a folder"
        raise UserError(f"--root {shorten(root)}: {state}; pass the folder that holds the run folders")
    runs = list_runs(folder)
    if as_json:
        print(json.dumps([{"run_id": r.run_id, "path": str(r.path), "status": r.shown_status,
                           "status_text": r.status_text, "mode": r.mode,
                           "backend": r.backend, "steps": r.steps, "best_reward": r.best_reward,
                           "last_reward": r.last_reward, "started_at": r.started_at, "ended_at": r.ended_at,
                           "message": r.message} for r in runs], indent=2))
        return
    if not runs:
        print(f"no runs under {folder} (start one with 'devops-rl train --mode ci-fast')")
        return
    header = ("run", "status", "mode", "backend", "steps", "best", "last", "age")
    rows = [(r.run_id, r.status_text[:60], r.mode, r.backend, format_number(r.steps), format_number(r.best_reward),
             format_number(r.last_reward), age(r.started)) for r in runs]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


@runs_app.command("show")
def show(
    run: str = typer.Argument(..., help="Run id (or a unique prefix) or run folder."),
    events: int = typer.Option(8, "--events", min=0, help="How many of the last events to print."),
) -> None:
    """A run's metadata, latest metrics, last events and checkpoints."""
    from core.runs import RunDirectory, read_jsonl, summarize

    target = RunDirectory.open(run)
    summary = summarize(target.path)
    meta = summary.meta
    print(f"run:      {target.run_id}")
    print(f"folder:   {target.path}")
    print(f"status:   {summary.status_text}" + (f" ({meta['message']})" if meta.get("message")
                                                    and summary.shown_status != "failed" else ""))
    print(f"mode:     {meta.get('mode', '?')}   backend: {meta.get('backend', '?')}   "
          f"host: {meta.get('host', '?')}   pid: {meta.get('pid', '?')}")
    print(f"started:  {meta.get('started_at') or '?'} ({age(summary.started)} ago)   ended: {meta.get('ended_at') or '-'}")
    versions = meta.get("versions") or {}
    if versions:
        print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"steps:    {format_number(summary.steps)}   best reward: {format_number(summary.best_reward)}   "
          f"last reward: {format_number(summary.last_reward)}")
    metrics = read_jsonl(target.metrics_path)
    if metrics:
        last = metrics[-1]
        data = last.get("data") or {}
        shown = {k: data[k] for k in SHOW_KEYS if k in data}
        print(f"last metrics (step {last.get('step')}):")
        for key, value in shown.items():
            print(f"  {key:<24} {format_number(value)}")
    records = read_jsonl(target.events_path)[-events:] if events else []
    if records:
        print("events:")
        for record in records:
            extra = ", ".join(f"{k}={format_number(v)}" for k, v in record.items() if k not in ("time", "event"))
            print(f"  {record.get('time', '?')}  {record.get('event', '?'):<10} {extra}".rstrip())
    checkpoints = sorted(p.name for p in target.checkpoints_dir.glob("global_step_*")) if target.checkpoints_dir.is_dir() else []
    print(f"checkpoints: {', '.join(checkpoints) if checkpoints else 'none'}")
