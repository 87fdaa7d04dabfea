"""The cockpit's chrome: a title bar naming the screen and tab, and Textual's footer with the help key pinned to
the right edge so no terminal width hides it, rebuilt only when the keys it shows change (not on every focus
move: a rebuild mounts a dozen widgets).

On a narrow terminal the other keys are cut from the right; `?` lists all of them.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Footer, Static


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


SCREEN_NUMBERS = {"Runs": 1, "Dataset": 2, "Config": 3, "Live": 4, "Results": 5, "Compare": 6}


class TitleBar(Static):
    """The top line of every screen: where you are (`devops-rl › 4 Live › Rewards`) and how to move on."""

    DEFAULT_CSS = """
    TitleBar {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $primary-muted;
        color: $text;
    }
    """

    def __init__(self, screen_name: str) -> None:
        super().__init__(id="title-bar")
        self.screen_name = screen_name
        self.show()

    def show(self, part: str | None = None) -> None:
        """Name the screen, and `part` of it (the tab shown)."""
        text = Text.assemble(("devops-rl", "bold"), f" › {SCREEN_NUMBERS[self.screen_name]} ",
                             (self.screen_name, "bold"), f" › {part}" if part else "")
        text.append("   1-6 screens · ? keys", style="dim")
        self.update(text)
