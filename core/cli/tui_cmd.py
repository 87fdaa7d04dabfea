"""`devops-rl tui [--attach RUN]`: open the Textual training cockpit (textual is imported only here).

RUN is a run folder, a run id (or a unique prefix of one) in the runs folder, or any verl file-logger metrics JSONL.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("tui", help="Open the training cockpit: runs, dataset, config, live charts and results.")
    def tui(
        attach: str = typer.Option(None, "--attach", "-a", metavar="RUN",
                                   help="Open this run folder, run id (or unique prefix) or verl metrics JSONL "
                                        "on the Live screen."),
        task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder: the Dataset screen "
                                              "shows it and runs launched from the Config screen train on it (repeatable)."),
    ) -> None:
        from core.cli.tail_cmd import check_metrics_file
        from core.runs import resolve_run
        from tasks.sources import option_paths

        paths = [Path(p) for p in option_paths(task_paths)] or None

        target = resolve_run(attach, files=True) if attach else None
        if target is not None and target.is_file():
            check_metrics_file(target)
        from devops_tui.app import run_cockpit

        run_cockpit(attach=target, task_paths=paths)
