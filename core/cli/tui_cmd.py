"""`devops-rl tui [--attach RUN]`: open the Textual training cockpit (textual is imported only here).

RUN is a run folder, a run id in the runs folder, or any verl file-logger metrics JSONL.
"""

from __future__ import annotations

from pathlib import Path

import typer

from core.errors import UserError


def resolve_attach(value: str) -> Path:
    """A run folder, a run id under the runs folder, or a JSONL file; UserError naming what was tried."""
    from core.paths import runs_root

    path = Path(value).expanduser()
    if path.exists():
        if path.is_dir() or path.suffix in (".jsonl", ".json"):
            return path
        raise UserError(f"--attach {value}: not a run folder or a metrics .jsonl file")
    candidate = runs_root() / value
    if candidate.is_dir():
        return candidate
    matches = sorted(p for p in runs_root().glob(f"*{value}*") if p.is_dir()) if runs_root().is_dir() else []
    if len(matches) == 1:
        return matches[0]
    hint = f"; matches: {', '.join(p.name for p in matches[:4])}" if matches else "; see 'devops-rl runs list'"
    raise UserError(f"--attach {value}: no such run folder, run id in {runs_root()} or JSONL file{hint}")


def register(app: typer.Typer) -> None:
    @app.command("tui", help="Open the training cockpit: runs, dataset, config, live charts and results.")
    def tui(
        attach: str = typer.Option(None, "--attach", "-a", metavar="RUN",
                                   help="Open this run folder, run id or verl metrics JSONL on the Live screen."),
    ) -> None:
        target = resolve_attach(attach) if attach else None
        from devops_tui.app import run_cockpit

        run_cockpit(attach=target)
