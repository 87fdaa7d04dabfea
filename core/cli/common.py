"""Helpers shared by the command modules: the "not built yet" answer and option parsing bits."""

from __future__ import annotations

from core.errors import UserError


def not_built(command: str, issue: str) -> None:
    """Answer for a command whose implementation has not landed: one line, exit code 2."""
    raise UserError(f"'devops-rl {command}' is not built yet ({issue}); see the Status table in README.md")


def fmt(value) -> str:
    """A metric or count as a short table cell: '-' when missing, 4 significant digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
