"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('tail', help="[not built yet] Follow a run's metrics and log from any terminal.", context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _tail() -> None:
        not_built('tail', 'issue #4')
