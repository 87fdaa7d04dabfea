"""The Runs screen: every run in the runs folder with its status line, steps, last/best reward and age.

Open one (live or finished) on the Live screen, start a new one from Config, stop a live one after a
confirmation, mark two or more and compare them. The folder is listed by a thread worker every few seconds;
a run started here that died before writing its folder still shows, with why.
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
from core.runs import META_FILE, RunSummary, list_runs
from devops_tui.actions import confirm_and_stop
from devops_tui.messages import OpenRun, RunsListed
from devops_tui.widgets.footer import CockpitFooter, TitleBar

REFRESH_S = 3.0
# (label, width); status takes what is left, the optional columns go first on a narrow terminal.
COLUMNS = (("", 1), ("run", 28), ("status", 0), ("mode", 7), ("backend", 7), ("steps", 7), ("reward", 6),
           ("best", 6), ("age", 4))
NARROW_DROPS = ("mode", "backend")


def fit(text: str, width: int, keep_end: bool = False) -> str:
    """`text` cut to `width` with an ellipsis (at the start when its end is what tells rows apart)."""
    if len(text) <= width:
        return text
    return "…" + text[-(width - 1):] if keep_end else text[: width - 1] + "…"


def launched_rows(app) -> list[RunSummary]:
    """Runs started here that have no meta.json (yet): starting, or failed before writing their folder."""
    rows = []
    for path, run in getattr(app, "launched", {}).items():
        if (path / META_FILE).exists():
            continue
        alive = run.alive()
        code = run.process.returncode
        message = None if alive else f"exit code {code}: {(run.console_tail(1) or ['no output'])[0]}"
        status = "running" if alive else ("failed" if code not in (0, 130) else "stopped")
        mode = run.command[run.command.index("--mode") + 1] if "--mode" in run.command else "?"
        rows.append(RunSummary(run_id=path.name, path=path, status=status, mode=mode, backend="?", started_at=None,
                               ended_at=None, steps=None, total_steps=None, last_reward=None, best_reward=None,
                               message=message, alive=alive, meta={"status": status, "message": message}))
    return rows


class RunsScreen(Screen):
    """Table of runs; Enter opens the selected one on the Live screen."""

    AUTO_FOCUS = "#runs-table"
    BINDINGS = [
        Binding("enter", "open_run", "Open", id="runs.open"),
        Binding("n", "new_run", "New run", id="runs.new"),
        Binding("s", "stop_run", "Stop run", id="runs.stop"),
        Binding("e", "results", "Results", id="runs.results"),
        Binding("space", "mark", "Mark", id="runs.mark"),
        Binding("c", "compare", "Compare marked", id="runs.compare"),
        Binding("f5,ctrl+r", "refresh", "Refresh", id="runs.refresh", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[RunSummary] = []
        self.marked: set[Path] = set()
        self._cache: dict = {}  # for list_runs: its metrics followers must not be polled by two scans at once
        self._cache_lock = threading.Lock()
        self._columns: list[tuple[str, int]] = []

    def compose(self) -> ComposeResult:
        yield TitleBar("Runs")
        yield Static("", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield CockpitFooter()

    def on_mount(self) -> None:
        self.query_one("#runs-title", Static).update(f"listing runs in {self.app.runs_root}...")
        self._set_columns(self.app.size.width)
        self.set_interval(REFRESH_S, self.action_refresh)

    def on_resize(self, event) -> None:
        self._set_columns(event.size.width)

    def _set_columns(self, width: int) -> None:
        """Columns that fit `width` (each cell has one space of padding on both sides)."""
        columns = [c for c in COLUMNS if width >= 100 or c[0] not in NARROW_DROPS]
        if width < 100:  # the end of a run id (time, mode, suffix) tells runs apart; the status needs the room
            columns = [(label, 20 if label == "run" else w) for label, w in columns]
        fixed = sum(w + 2 for label, w in columns if label != "status")
        columns = [(label, w or max(10, width - fixed - 4)) for label, w in columns]
        if columns == self._columns:
            return
        self._columns = columns
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for label, w in columns:
            table.add_column(label, width=w, key=label or "mark")
        self._fill()

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
        listed = {row.path for row in message.runs}
        self.rows = [r for r in launched_rows(self.app) if r.path not in listed] + message.runs
        self._fill()

    def _cells(self, row: RunSummary, now: float) -> dict[str, str]:
        steps = "-" if row.steps is None else (f"{row.steps}/{row.planned_steps}" if row.planned_steps else str(row.steps))
        age = format_duration(now - row.started if row.started is not None else None)
        return {"": "●" if row.path in self.marked else "", "run": row.run_id, "status": row.status_text,
                "mode": row.mode, "backend": row.backend, "steps": steps,
                "reward": format_number(row.last_reward, style="compact"),
                "best": format_number(row.best_reward, style="compact"), "age": age}

    def _fill(self) -> None:
        if not self._columns:
            return
        table = self.query_one(DataTable)
        selected = self.selected()
        now = self.app.clock()
        table.clear()
        for row in self.rows:
            cells = self._cells(row, now)
            table.add_row(*(fit(cells[label], width, label == "run") for label, width in self._columns),
                          key=str(row.path))
        if selected is not None:
            for i, row in enumerate(self.rows):
                if row.path == selected.path:
                    table.move_cursor(row=i)
        title = self.query_one("#runs-title", Static)
        if not self.rows:
            title.update(f"no runs in {self.app.runs_root} yet: press n to configure and start one")
        else:
            marked = f" · {len(self.marked)} marked (c compares)" if self.marked else " · space marks runs to compare"
            title.update(f"{len(self.rows)} run{'s' if len(self.rows) != 1 else ''} in {self.app.runs_root}{marked}")

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

    def action_mark(self) -> None:
        row = self.selected()
        if row is None:
            return
        self.marked ^= {row.path}
        table = self.query_one(DataTable)
        self._fill()
        table.move_cursor(row=min(table.cursor_row + 1, len(self.rows) - 1))

    def action_compare(self) -> None:
        """Compare the marked runs (the selected one joins when only one is marked)."""
        chosen = [r.path for r in self.rows if r.path in self.marked]
        row = self.selected()
        if len(chosen) == 1 and row is not None and row.path not in self.marked:
            chosen.append(row.path)
        if len(chosen) < 2:
            self.notify("mark two or more runs with space, then press c", severity="warning")
            return
        self.app.compare_runs(chosen)
