"""A small modal question with a few labelled answers (stop a run, quit with a run going).

It returns the chosen answer's key, or None on Escape, through `push_screen`'s callback.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[str | None]):
    """Ask `question`; `choices` are (key, label) pairs, the first is the default button."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="confirm.cancel")]

    def __init__(self, question: str, choices: list[tuple[str, str]] | None = None) -> None:
        super().__init__()
        self.question = question
        self.choices = choices or [("yes", "Yes"), ("cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            with Horizontal(id="confirm-buttons"):
                for i, (key, label) in enumerate(self.choices):
                    yield Button(label, id=f"choice-{key}", variant="primary" if i == 0 else "default")

    def on_mount(self) -> None:
        # Enter on the focused button must never do harm by accident: focus "cancel" when offered.
        safe = self.query("#choice-cancel")
        (safe.first() if safe else self.query_one(Button)).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id.removeprefix("choice-"))

    def action_cancel(self) -> None:
        self.dismiss(None)
