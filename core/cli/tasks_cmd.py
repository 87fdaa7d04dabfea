"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('tasks', help='[not built yet] List, show, validate and count the DevOps tasks.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _tasks() -> None:
        not_built('tasks', 'issue #3')
