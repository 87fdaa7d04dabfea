"""The Live screen's two tables: every metric key with its exact last/min/max/mean (searchable, saved as CSV),
and the run's alert history (the trainer's `alert` events and what this cockpit computed).

Both only redraw rows that changed; the screen calls `show()` when the data changed and the tab is visible.
"""

from __future__ import annotations

import csv
import io

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Input, Static

from core.formatting import format_number
from devops_tui.series import KeyStats

METRIC_COLUMNS = (("key", 34), ("last", 9), ("min", 9), ("max", 9), ("mean", 9), ("step", 7), ("rows", 7))


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


class MetricsTable(Vertical):
    """A filter box over a table of every metric key."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.figures: dict[str, KeyStats] = {}
        self.exact = True

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter keys (words), ctrl+s saves the table as CSV", id="metrics-filter")
        yield Static("", id="metrics-note")
        yield DataTable(id="metrics-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in METRIC_COLUMNS:
            table.add_column(label, width=width, key=label)

    @property
    def words(self) -> str:
        return self.query_one("#metrics-filter", Input).value

    def show(self, figures: dict[str, KeyStats], exact: bool) -> None:
        self.figures, self.exact = figures, exact
        rows = metric_rows(figures, self.words)
        table = self.query_one(DataTable)
        keys = [r[0] for r in rows]
        if [str(k.value) for k in table.rows] != keys:
            table.clear()
            for row in rows:
                table.add_row(*row, key=row[0])
        else:
            for row in rows:
                for (label, _), cell in zip(METRIC_COLUMNS[1:], row[1:]):
                    if table.get_cell(row[0], label) != cell:
                        table.update_cell(row[0], label, cell)
        note = f"{len(rows)} of {len(figures)} keys"
        if not exact:
            note += " · min/max/mean from the thinned history until the whole file is read"
        self.query_one("#metrics-note", Static).update(note)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.show(self.figures, self.exact)


ALERT_COLUMNS = (("level", 7), ("step", 6), ("check", 16), ("series", 28), ("from", 7))


class AlertHistory(Vertical):
    """Every alert the run raised, newest first; the selected one's whole message below the table."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.records: list = []

    def compose(self) -> ComposeResult:
        yield DataTable(id="alerts-table", cursor_type="row", zebra_stripes=True)
        yield Static("no alerts so far", id="alerts-message")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in ALERT_COLUMNS:
            table.add_column(label, width=width)

    def show(self, history: list) -> None:
        if len(history) == len(self.records):
            return
        self.records = list(reversed(history))
        table = self.query_one(DataTable)
        table.clear()
        for record in self.records:
            a = record.alert
            table.add_row(a.level, "-" if a.step is None else str(a.step), a.kind, a.series, record.source)
        self._show_message()

    def _show_message(self) -> None:
        table = self.query_one(DataTable)
        box = self.query_one("#alerts-message", Static)
        if not self.records:
            box.update("no alerts so far")
            return
        record = self.records[min(max(table.cursor_row, 0), len(self.records) - 1)]
        box.update(f"{record.alert.message}\n(first seen {record.seen or '?'}, {record.source})")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_message()
