"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('runs', help='[not built yet] List and inspect runs.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _runs() -> None:
        not_built('runs', 'issue #4')
