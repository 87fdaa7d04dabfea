"""The cockpit's footer: Textual's, with the help key pinned to the right edge so no terminal width hides it,
rebuilt only when the keys it shows change (not on every focus move: a rebuild mounts a dozen widgets).

On a narrow terminal the other keys are cut from the right; `?` lists all of them.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer


class CockpitFooter(Footer):
    """A compact footer whose help key stays visible at the right edge."""

    DEFAULT_CSS = """
    CockpitFooter FooterKey.-help {
        dock: right;
        margin: 0;
        padding: 0 1;
        border-left: vkey $foreground 20%;
    }
    """

    def __init__(self) -> None:
        super().__init__(compact=True, show_command_palette=False)
        self._shown: tuple | None = None

    def bindings_changed(self, screen) -> None:
        shown = tuple((binding.key, binding.description, enabled)
                      for _, binding, enabled, _ in screen.active_bindings.values() if binding.show)
        if shown != self._shown:
            self._shown = shown
            super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if getattr(widget, "action", None) == "help":  # the FooterKey of the app's help binding
                widget.add_class("-help")
            yield widget
