"""A small modal question with a few labelled answers (stop a run, quit with a run going).

It returns the chosen answer's key, or None on Escape / `n`, through `push_screen`'s callback. The highlighted
button is always the focused one, so Enter presses what the eye picks; arrows move it, `y` takes the default.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[str | None]):
    """Ask `question`; `choices` are (key, label) pairs; `default` (else the first) starts highlighted."""

    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel", id="confirm.cancel"),
        Binding("y", "choose_default", "Yes (the default answer)", id="confirm.yes"),
        Binding("left,shift+tab", "move(-1)", "Previous answer", id="confirm.previous", show=False),
        Binding("right,tab", "move(1)", "Next answer", id="confirm.next", show=False),
    ]

    def __init__(self, question: str, choices: list[tuple[str, str]] | None = None,
                 default: str | None = None) -> None:
        super().__init__()
        self.question = question
        self.choices = choices or [("yes", "Yes"), ("cancel", "Cancel")]
        self.default = default or self.choices[0][0]

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            with Horizontal(id="confirm-buttons"):
                for key, label in self.choices:
                    yield Button(label, id=f"choice-{key}")
            yield Static("enter: the highlighted answer · ←/→ move · y: "
                         f"{dict(self.choices)[self.default]} · n/esc: cancel", id="confirm-keys")

    def on_mount(self) -> None:
        self.set_focus(self.query_one(f"#choice-{self.default}", Button))

    def on_descendant_focus(self, event) -> None:
        for button in self.query(Button).results(Button):
            button.variant = "primary" if button is event.widget else "default"

    @property
    def highlighted(self) -> str | None:
        """The answer Enter would give now."""
        focused = self.focused
        return focused.id.removeprefix("choice-") if isinstance(focused, Button) and focused.id else None

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id.removeprefix("choice-"))

    def action_move(self, delta: int) -> None:
        buttons = list(self.query(Button).results(Button))
        index = buttons.index(self.focused) if self.focused in buttons else 0
        self.set_focus(buttons[(index + delta) % len(buttons)])

    def action_choose_default(self) -> None:
        self.dismiss(self.default)

    def action_cancel(self) -> None:
        self.dismiss(None)
