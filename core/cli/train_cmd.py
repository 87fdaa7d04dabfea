"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('train', help='[not built yet] Train the agent with GRPO (native torch or verl).', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _train() -> None:
        not_built('train', 'issue #5')

    @app.command('sft', help="[not built yet] Supervised warm-start on the tasks' reference answers.", context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _sft() -> None:
        not_built('sft', 'issue #5')
