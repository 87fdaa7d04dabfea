"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('tui', help='[not built yet] Open the training cockpit (Textual).', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _tui() -> None:
        not_built('tui', 'issue #8')
