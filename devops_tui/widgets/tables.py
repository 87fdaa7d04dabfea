"""The Live screen's two tables: every metric key with its exact last/min/max/mean (searchable, saved as CSV),
and the run's alert history (the trainer's `alert` events and what this cockpit computed).

Both are text in a scrolling view rather than DataTables: nothing in them is selected, and a tab of plain text
shows in a fraction of the time a table widget of the same rows needs, while a run streams.
"""

from __future__ import annotations

import csv
import io

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Static

from core.formatting import format_number
from devops_tui.series import KeyStats

METRIC_COLUMNS = (("key", 36), ("last", 9), ("min", 9), ("max", 9), ("mean", 9), ("step", 7), ("rows", 12))


def metric_rows(figures: dict[str, KeyStats], words: str = "") -> list[tuple[str, ...]]:
    """(key, last, min, max, mean, last step, rows) for every key containing all of `words`, sorted by key;
    a key that had NaN/inf says how often in its rows cell."""
    wanted = words.lower().split()
    out = []
    for key in sorted(figures):
        if not all(w in key.lower() for w in wanted):
            continue
        f = figures[key]
        finite = f.count - f.non_finite
        rows = f"{f.count}" + (f" ({f.non_finite} NaN)" if f.non_finite else "")
        out.append((key, format_number(f.last_value, style="compact"),
                    format_number(f.min if finite else None, style="compact"),
                    format_number(f.max if finite else None, style="compact"),
                    format_number(f.mean, style="compact"), str(f.last_step if f.last_step is not None else "-"), rows))
    return out


def metrics_csv(figures: dict[str, KeyStats], words: str = "") -> str:
    """The metrics table as CSV with full-precision numbers (what a spreadsheet wants)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["key", "last", "min", "max", "mean", "last_step", "rows", "non_finite"])
    for key in sorted(figures):
        if not all(w in key.lower() for w in words.lower().split()):
            continue
        f = figures[key]
        finite = f.count - f.non_finite
        writer.writerow([key, f.last_value, f.min if finite else "", f.max if finite else "",
                         "" if f.mean is None else f.mean, f.last_step, f.count, f.non_finite])
    return out.getvalue()


NARROW_DROPS = ("mean", "step")  # the metrics columns left out below NARROW_WIDTH (the CSV keeps them)
NARROW_WIDTH = 100


def table_text(columns, rows: list[tuple[str, ...]], width: int) -> Text:
    """Rows as fixed-width text columns (the first column takes what the others leave, at most its own width);
    on a narrow terminal the columns named in NARROW_DROPS are left out so the key stays readable."""
    keep = [i for i, (label, _) in enumerate(columns) if width >= NARROW_WIDTH or label not in NARROW_DROPS]
    columns = [columns[i] for i in keep]
    rows = [tuple(row[i] for i in keep) for row in rows]
    widths = [w for _, w in columns]
    widths[0] = max(12, min(widths[0], width - sum(widths[1:]) - len(widths)))
    text = Text()
    text.append(" ".join(label.ljust(w)[:w] for (label, _), w in zip(columns, widths)) + "\n", style="bold")
    for i, row in enumerate(rows):
        cells = [row[0][: widths[0]].ljust(widths[0])] + [cell[:w].rjust(w) for cell, w in zip(row[1:], widths[1:])]
        text.append(" ".join(cells) + "\n", style="dim" if i % 2 else "")
    return text


class MetricsTable(Vertical):
    """A filter box over every metric key's figures."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.figures: dict[str, KeyStats] = {}
        self.exact = True
        self.rows: list[tuple[str, ...]] = []

    def compose(self) -> ComposeResult:
        yield Input(placeholder="type to filter keys (words) · esc: back to the keys · ctrl+s: CSV", id="metrics-filter")
        yield Static("", id="metrics-note")
        with VerticalScroll(id="metrics-scroll"):
            yield Static("", id="metrics-table")

    @property
    def words(self) -> str:
        return self.query_one("#metrics-filter", Input).value

    def show(self, figures: dict[str, KeyStats], exact: bool) -> None:
        self.figures, self.exact = figures, exact
        self.rows = metric_rows(figures, self.words)
        # Before its first layout the widget has no width: the screen's stands in (else keys cut to 12 characters
        # and the mean and step columns left out until the next change).
        width = (self.size.width or self.screen.size.width) - 4  # the padding and the scrollbar
        self.query_one("#metrics-table", Static).update(table_text(METRIC_COLUMNS, self.rows, width))
        note = f"{len(self.rows)} of {len(figures)} keys"
        if not exact:
            note += " · min/max/mean from the thinned history until the whole file is read"
        self.query_one("#metrics-note", Static).update(note)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.show(self.figures, self.exact)

    def on_resize(self, event) -> None:
        if self.figures:
            self.show(self.figures, self.exact)


class AlertHistory(VerticalScroll):
    """Every alert the run raised, newest first, each with its whole message."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.records: list = []

    def compose(self) -> ComposeResult:
        yield Static("no alerts so far", id="alerts-table")

    def show(self, history: list) -> None:
        if len(history) == len(self.records):
            return
        self.records = list(reversed(history))
        text = Text()
        for record in self.records:
            a = record.alert
            text.append("✖ " if a.level == "error" else "⚠ ", style="bold")
            text.append(f"step {'-' if a.step is None else a.step}  {a.kind}  {a.series}", style="bold")
            text.append(f"  ({record.source}, first seen {record.seen or '?'})\n", style="dim")
            text.append(f"  {a.message}\n")
        self.query_one("#alerts-table", Static).update(text if self.records else "no alerts so far")
