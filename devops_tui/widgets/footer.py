"""The cockpit's footer: Textual's, with the help key pinned to the right edge so no terminal width hides it.

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

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if getattr(widget, "action", None) == "help":  # the FooterKey of the app's help binding
                widget.add_class("-help")
            yield widget
