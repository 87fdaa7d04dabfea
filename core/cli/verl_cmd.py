"""Placeholder for `devops-rl config verl` until the verl backend lands (issue #6)."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(config_app: typer.Typer) -> None:
    @config_app.command("verl", help="[not built yet] Print the exact config verl would receive.")
    def _verl() -> None:
        not_built("config verl", "issue #6")
