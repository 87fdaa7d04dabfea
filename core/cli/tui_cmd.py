"""`devops-rl tui [--attach RUN] [--wait SECONDS]`: open the Textual training cockpit (textual is imported only here).

RUN is a run folder, a run id (or a unique prefix of one) in the runs folder, or any verl file-logger metrics JSONL.
A RUN that does not exist yet (the cockpit opened in a second pane just before `devops-rl train` in the first) is
waited for, with a countdown, up to --wait seconds; Ctrl-C stops the wait.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from core.errors import UserError

POLL_S = 0.25
DEFAULT_WAIT_S = 60.0


def wait_for_run(spec: str, wait_s: float, *, out=None, poll_s: float = POLL_S) -> Path:
    """The run (or metrics file) `spec` names, polling until it appears or `wait_s` runs out; a countdown on `out`
    (stderr): one rewritten line on a terminal, otherwise a line when the wait starts. UserError when it never
    appears, KeyboardInterrupt passes through (the CLI exits 130)."""
    from core.runs import resolve_run

    out = out if out is not None else sys.stderr
    deadline = time.monotonic() + max(0.0, wait_s)
    live = out.isatty()
    announced = False
    while True:
        try:
            found = resolve_run(spec, files=True)
        except UserError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                if announced and live:
                    out.write("\n")
                waited = f" (waited {wait_s:g} s; raise --wait to wait longer)" if wait_s > 0 else ""
                raise UserError(f"{exc}{waited}") from None
            if live:
                out.write(f"\rwaiting for run '{spec}' to appear: {left:4.0f} s left (Ctrl-C to stop) ")
                out.flush()
            elif not announced:
                out.write(f"waiting up to {wait_s:g} s for run '{spec}' to appear (Ctrl-C to stop)\n")
                out.flush()
            announced = True
            try:
                time.sleep(min(poll_s, left))
            except KeyboardInterrupt:
                if live:
                    out.write("\n")  # "interrupted" on a line of its own, not after the countdown
                raise
            continue
        if announced and live:
            out.write("\r" + " " * 72 + "\r")
            out.flush()
        return found


def register(app: typer.Typer) -> None:
    @app.command("tui", help="Open the training cockpit: runs, dataset, config, live charts and results.")
    def tui(
        attach: str = typer.Option(None, "--attach", "-a", metavar="RUN",
                                   help="Open this run folder, run id (or unique prefix) or verl metrics JSONL "
                                        "on the Live screen."),
        wait: float = typer.Option(DEFAULT_WAIT_S, "--wait", min=0, metavar="SECONDS",
                                   help="With --attach: how long to wait for a run that does not exist yet "
                                        "(0: fail at once)."),
        task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder: the Dataset screen "
                                              "shows it and runs launched from the Config screen train on it (repeatable)."),
    ) -> None:
        from core.cli.tail_cmd import check_metrics_file
        from tasks.sources import option_paths

        paths = [Path(p) for p in option_paths(task_paths)] or None

        target = wait_for_run(attach, wait) if attach else None
        if target is not None and target.is_file():
            check_metrics_file(target)
        from devops_tui.app import run_cockpit

        run_cockpit(attach=target, task_paths=paths)
