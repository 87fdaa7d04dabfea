"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('reward', help='[not built yet] Score an answer with the multi-dimensional reward.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _reward() -> None:
        not_built('reward', 'issue #3')
