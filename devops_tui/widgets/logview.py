"""The Live screen's Log tab: train.log's last lines, wrapped at the pane's width (Textual's `Log` cut a long
line at the right edge: a traceback's cause or a long warning could not be read without scrolling sideways).
"""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.widgets import RichLog


class LogView(RichLog):
    """A RichLog that keeps the plain lines it was given (`lines_written`) for tests and counting."""

    def __init__(self, *, max_lines: int, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, wrap=True, min_width=20, markup=False, highlight=False, auto_scroll=True,
                         id=id)
        self.lines_written: deque[str] = deque(maxlen=max_lines)

    @property
    def line_count(self) -> int:
        return len(self.lines_written)

    def write_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.lines_written.append(line)
            self.write(Text(line, overflow="fold"))

    def clear(self) -> LogView:
        self.lines_written.clear()
        super().clear()
        return self
