"""Starts and stops training runs for the cockpit: `devops-rl train ... --run-dir D` as a child process.

The child gets its own session, so closing the cockpit (or Ctrl-C in it) never kills a run by accident;
stopping is an explicit SIGINT, which the trainer turns into a checkpoint and status "stopped".
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError
from core.runs import describe_holder, lock_holder, new_run_id, stop_child


def train_command(mode: str, run_dir: Path, config_file: Path | None = None) -> list[str]:
    """The exact command line a headless user would type, run with this interpreter.

    `-P` keeps the current folder off `sys.path`: run from a checkout that has its own `tasks/` or `core/` folder
    (an Ansible repository has one), `-m` would otherwise import that folder instead of this package.
    """
    command = [sys.executable, "-P", "-m", "core.cli.main", "train", "--mode", mode, "--run-dir", str(run_dir)]
    if config_file is not None:
        command += ["--config", str(config_file)]
    return command


@dataclass
class LaunchedRun:
    """A training child process started by this cockpit, with where its console output goes."""

    path: Path
    process: subprocess.Popen
    console: Path
    command: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int | None:
        """Stop the run's process group the agreed way (`core.runs.stop_child`); returns its exit code."""
        stop_child(self.process)
        return self.process.poll()

    def console_tail(self, n: int = 5) -> list[str]:
        try:
            lines = self.console.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if line.strip()][-n:]


def launch(mode: str, runs_root: Path, *, config_file: Path | None = None,
           run_id: str | None = None) -> LaunchedRun:
    """Start `devops-rl train --mode MODE --run-dir runs_root/<id>` in the background."""
    runs_root = Path(runs_root)
    run_id = run_id or new_run_id(mode)
    run_dir = runs_root / run_id
    holder = lock_holder(run_dir)
    if holder is not None:  # the child would refuse too, but only after the cockpit said "started"
        raise UserError(f"{run_dir}: {describe_holder(holder)} is writing this run; one writer per run folder")
    console_dir = runs_root / ".cockpit"
    console_dir.mkdir(parents=True, exist_ok=True)
    console = console_dir / f"{run_id}.console.log"
    command = train_command(mode, run_dir, config_file)
    with open(console, "wb") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=os.getcwd(), env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return LaunchedRun(path=run_dir, process=process, console=console, command=command)
