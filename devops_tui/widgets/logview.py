"""The Live screen's Log tab: train.log's last lines, wrapped at the pane's width (Textual's `Log` cut a long
line at the right edge: a traceback's cause or a long warning could not be read without scrolling sideways).

A `Log` with the lines wrapped here (a record's continuation rows indented) rather than a `RichLog`: the Log draws
only the visible lines, where a RichLog renders every line as it is written (bench_tui: the Log key's p95 went up
by half). A new width rewraps the kept lines.
"""

from __future__ import annotations

import textwrap
from collections import deque

from textual.widgets import Log

CONTINUATION = "    "


def wrap_line(line: str, width: int) -> list[str]:
    """One log record as rows of at most `width` cells, the continuation rows indented."""
    if width < 2 * len(CONTINUATION) or len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent=CONTINUATION, drop_whitespace=False,
                         break_on_hyphens=False) or [line]


class LogView(Log):
    """A Log that wraps; `lines_written` keeps the records as they came (for a rewrap, tests and counting)."""

    def __init__(self, *, max_lines: int, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, id=id)
        self.lines_written: deque[str] = deque(maxlen=max_lines)
        self._wrap_width = 0

    @property
    def records(self) -> int:
        return len(self.lines_written)

    def _row_width(self) -> int:
        return self.scrollable_content_region.width or self.app.size.width - 2

    def write_lines(self, lines, scroll_end: bool | None = None) -> LogView:
        lines = list(lines)
        self.lines_written.extend(lines)
        self._wrap_width = width = self._row_width()
        super().write_lines([row for line in lines for row in wrap_line(line, width)], scroll_end)
        return self

    def on_resize(self, event) -> None:
        if self.lines_written and self._row_width() != self._wrap_width:
            kept = list(self.lines_written)
            self.clear()
            self.write_lines(kept)

    def clear(self) -> LogView:
        self.lines_written.clear()
        super().clear()
        return self
