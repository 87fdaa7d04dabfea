"""The Runs screen: every run in the runs folder with status, steps, last/best reward and age.

Open one (live or finished) on the Live screen, start a new one from Config, stop a live one after a
confirmation. The folder is listed by a thread worker every few seconds; the table only redraws rows.
"""

from __future__ import annotations

import threading
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from core.formatting import format_duration, format_number
from core.runs import RunSummary, list_runs
from devops_tui.widgets.footer import CockpitFooter
from devops_tui.actions import confirm_and_stop
from devops_tui.messages import OpenRun, RunsListed

REFRESH_S = 3.0


class RunsScreen(Screen):
    """Table of runs; Enter opens the selected one on the Live screen."""

    AUTO_FOCUS = "#runs-table"
    BINDINGS = [
        Binding("enter", "open_run", "Open", id="runs.open"),
        Binding("n", "new_run", "New run", id="runs.new"),
        Binding("s", "stop_run", "Stop run", id="runs.stop"),
        Binding("e", "results", "Results", id="runs.results"),
        Binding("f5,ctrl+r", "refresh", "Refresh", id="runs.refresh"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[RunSummary] = []
        self._cache: dict = {}  # for list_runs: its metrics followers must not be polled by two scans at once
        self._cache_lock = threading.Lock()

    def compose(self) -> ComposeResult:
        yield Static("", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield CockpitFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in (("run", 28), ("status", 8), ("mode", 7), ("backend", 7), ("steps", 7),
                             ("reward", 8), ("best", 8), ("age", 4)):
            table.add_column(label, width=width)
        self.query_one("#runs-title", Static).update(f"runs in {self.app.runs_root}")
        self.set_interval(REFRESH_S, self.action_refresh)

    def on_screen_resume(self) -> None:
        self.call_after_refresh(self.action_refresh)  # not if the app switched on at once (tui --attach)

    def action_refresh(self) -> None:
        """List the runs folder again, only while this screen is shown (reading runs costs the UI's CPU)."""
        if self.is_current:
            self._scan(self.app.runs_root)

    @work(thread=True, exclusive=True, group="runs-scan", exit_on_error=False)
    def _scan(self, root: Path) -> None:
        with self._cache_lock:  # a cancelled scan's thread may still be running
            runs = list_runs(root, self._cache)
        self.post_message(RunsListed(runs[::-1]))  # newest first: ids sort by start time

    def on_runs_listed(self, message: RunsListed) -> None:
        table = self.query_one(DataTable)
        selected = self.selected()
        self.rows = message.runs
        now = self.app.clock()
        table.clear()
        for row in self.rows:
            steps = "-" if row.steps is None else (f"{row.steps}/{row.total_steps}" if row.total_steps else str(row.steps))
            age = format_duration(now - row.started if row.started is not None else None)
            table.add_row(row.run_id, row.shown_status, row.mode, row.backend, steps,
                          format_number(row.last_reward, style="compact"),
                          format_number(row.best_reward, style="compact"), age, key=str(row.path))
        if selected is not None:
            for i, row in enumerate(self.rows):
                if row.path == selected.path:
                    table.move_cursor(row=i)
        if not self.rows:
            self.query_one("#runs-title", Static).update(
                f"no runs in {self.app.runs_root} yet: press n to configure and start one")
        else:
            self.query_one("#runs-title", Static).update(
                f"{len(self.rows)} run{'s' if len(self.rows) != 1 else ''} in {self.app.runs_root}")

    def selected(self) -> RunSummary | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row is None or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        row = self.selected()
        if row is not None:
            self.post_message(OpenRun(row.path))

    def action_new_run(self) -> None:
        self.app.switch_mode("config")

    def action_results(self) -> None:
        row = self.selected()
        if row is not None:
            self.app.switch_mode("results")
            self.app.get_screen_stack("results")[0].show_run(row.path)

    def action_stop_run(self) -> None:
        row = self.selected()
        if row is not None:
            confirm_and_stop(self.app, row.path, row.meta)
