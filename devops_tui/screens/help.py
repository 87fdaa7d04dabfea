"""The help screen: every key of the cockpit and of each screen, with its binding id for remapping.

Generated from the `Binding`s themselves, so it can never disagree with the footer.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


def binding_rows(app) -> list[tuple[str, str, str, str]]:
    """(area, keys, description, id) for the app's bindings and every mode screen's bindings."""
    rows: list[tuple[str, str, str, str]] = []
    keymap = getattr(app, "_keymap", {}) or {}

    def add(area: str, bindings) -> None:
        for binding in bindings:
            if not isinstance(binding, Binding) or not binding.description:
                continue
            keys = keymap.get(binding.id or "", binding.key_display or binding.key)
            rows.append((area, keys, binding.description, binding.id or ""))

    add("everywhere", app.BINDINGS)
    for mode, screen_cls in app.MODES.items():
        add(mode, getattr(screen_cls, "BINDINGS", []))
        for widget_cls in getattr(screen_cls, "KEY_WIDGETS", ()):  # keys of a widget while it has the focus
            add(f"{mode}: {getattr(widget_cls, 'HELP_AREA', widget_cls.__name__)}", getattr(widget_cls, "BINDINGS", []))
    return rows


class HelpScreen(ModalScreen[None]):
    """Lists the keys; Escape or ? closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close help", id="help.close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static("Keys  (remap by id in ~/.config/devops-rl/keys.yaml, e.g. 'app.quit: ctrl+x')",
                         id="help-title")
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("where", "key", "what", "id")
        for row in binding_rows(self.app):
            table.add_row(*row)

    def action_dismiss(self) -> None:
        self.dismiss(None)
