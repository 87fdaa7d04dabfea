"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('config', help='[not built yet] Show, validate, export, diff and check training configs.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _config() -> None:
        not_built('config', 'issue #4')
