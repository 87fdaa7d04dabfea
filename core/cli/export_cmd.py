"""`devops-rl export RUN --tensorboard DIR --wandb-offline DIR`: a run's metrics, samples and alerts for other tools.

TensorBoard reads DIR as a log folder (`tensorboard --logdir DIR`); the W&B offline run goes to `wandb sync` or
`wandb leet`. Works on a run that is still going (what was written so far) and on any verl file-logger JSONL.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    run: str = typer.Argument(..., help="Run id (or a unique prefix), run folder, or a verl file-logger .jsonl file."),
    tensorboard: Path | None = typer.Option(None, "--tensorboard", help="Write TensorBoard event files into DIR."),
    wandb_offline: Path | None = typer.Option(None, "--wandb-offline",
                                                 help="Write an offline W&B run under DIR (for wandb sync / wandb leet)."),
    project: str | None = typer.Option(None, "--project", help="W&B project (default: the run's trainer.project_name)."),
) -> None:
    """Export a run's metrics (scalars), samples (text / tables) and alerts to TensorBoard and/or W&B."""
    from core.errors import UserError
    from core.runs import resolve_run
    from core.runs.export import TensorBoardWriter, WandbWriter, export_run, run_config

    if tensorboard is None and wandb_offline is None:
        raise UserError("export: say where to: --tensorboard DIR and/or --wandb-offline DIR")
    source = resolve_run(run, files=True)
    name = source.stem if source.is_file() else source.name
    trackers = []
    try:
        if tensorboard is not None:
            trackers.append(TensorBoardWriter(tensorboard / name))
        if wandb_offline is not None:
            config = run_config(source) if source.is_dir() else {}
            trainer = config.get("trainer") or {}
            trackers.append(WandbWriter(project=project or trainer.get("project_name") or "devops-rl", name=name,
                                        config=config, directory=wandb_offline, mode="offline", quiet=True))
        counts = export_run(source, trackers)
    finally:
        for tracker in trackers:
            tracker.close()
    print(f"{name}: {counts['rows']} metric rows, {counts['samples']} samples, {counts['alerts']} alerts")
    for tracker in trackers:
        if isinstance(tracker, TensorBoardWriter):
            print(f"tensorboard: {tracker.logdir} (tensorboard --logdir {tracker.logdir.parent})")
        else:
            print(f"wandb: {tracker.folder} (wandb sync {tracker.folder}; wandb leet {tracker.folder})")
