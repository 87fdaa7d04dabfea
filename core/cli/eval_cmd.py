"""Placeholder for commands whose implementation has not landed yet."""

from __future__ import annotations

import typer

from core.cli.common import not_built


def register(app: typer.Typer) -> None:
    @app.command('eval', help='[not built yet] Evaluate the agent on the tasks through an OpenAI-compatible endpoint.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _eval() -> None:
        not_built('eval', 'issue #7')

    @app.command('compare', help='[not built yet] Compare two eval result files.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _compare() -> None:
        not_built('compare', 'issue #7')

    @app.command('serve', help='[not built yet] Serve a local model as an OpenAI-compatible endpoint.', context_settings={'allow_extra_args': True, 'ignore_unknown_options': True})
    def _serve() -> None:
        not_built('serve', 'issue #7')
