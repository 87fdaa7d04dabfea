"""The Runs screen: every run in the runs folder with status, steps, last/best reward and age.

Open one (live or finished) on the Live screen, start a new one from Config, stop a live one after a
confirmation. The folder is listed by a thread worker every few seconds; the table only redraws rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from core.training.rundir import pid_alive, reward_of
from devops_tui.messages import OpenRun, RunsListed
from devops_tui.runfeed import load_metrics_history
from devops_tui.widgets.chart import format_value

REFRESH_S = 3.0


@dataclass
class RunRow:
    """One line of the runs table."""

    path: Path
    run_id: str
    status: str
    mode: str
    backend: str
    steps: int | None
    total_steps: int | None
    last_reward: float | None
    best_reward: float | None
    started: float | None
    meta: dict


def _started_at(meta: dict, path: Path) -> float | None:
    from datetime import datetime

    value = meta.get("started_at")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def read_run(path: Path) -> RunRow | None:
    """Summarise one run folder; None when it holds neither meta.json nor metrics.jsonl."""
    meta_path, metrics_path = path / "meta.json", path / "metrics.jsonl"
    if not meta_path.is_file() and not metrics_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    except (OSError, ValueError):
        meta = {}
    if not isinstance(meta, dict):
        meta = {}
    rows, _, _ = load_metrics_history(metrics_path, capacity=512)
    rewards = [r for r in (reward_of(row["data"]) for row in rows if isinstance(row["data"], dict)) if r is not None]
    status = str(meta.get("status", "unknown"))
    if status == "running" and pid_alive(meta.get("pid")) is False:
        status = "crashed?"
    total = meta.get("total_steps")
    return RunRow(
        path=path, run_id=str(meta.get("run_id", path.name)), status=status, mode=str(meta.get("mode", "-")),
        backend=str(meta.get("backend", "-")), steps=int(rows[-1].get("step", len(rows))) if rows else None,
        total_steps=int(total) if isinstance(total, (int, float)) else None,
        last_reward=rewards[-1] if rewards else None, best_reward=max(rewards) if rewards else None,
        started=_started_at(meta, path), meta=meta,
    )


def _fingerprint(path: Path) -> tuple:
    out = []
    for name in ("meta.json", "metrics.jsonl"):
        try:
            stat = (path / name).stat()
            out.append((stat.st_size, stat.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def scan_runs(root: Path, cache: dict | None = None) -> list[RunRow]:
    """Every run folder under `root`, newest first (run ids sort by start time).

    With `cache`, a run whose meta.json and metrics.jsonl did not change is not read again.
    """
    if not root.is_dir():
        return []
    cache = {} if cache is None else cache
    rows = []
    for path in sorted(root.iterdir(), reverse=True):
        if not path.is_dir() or path.name.startswith("."):
            continue
        key = _fingerprint(path)
        hit = cache.get(path)
        row = hit[1] if hit is not None and hit[0] == key and hit[1].status != "running" else read_run(path)
        cache[path] = (key, row)
        if row is not None:
            rows.append(row)
    return rows


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def confirm_and_stop(app, path: Path, meta: dict) -> None:
    """Ask, then stop a run: SIGINT to the child this cockpit started, or to a headless run's pid."""
    from devops_tui.screens.confirm import ConfirmScreen

    launched = getattr(app, "launched", {}).get(path)
    if launched is None and meta.get("status") != "running":
        app.notify(f"{path.name} is not running", severity="warning")
        return

    def decide(choice: str | None) -> None:
        if choice != "stop":
            return
        if launched is not None:
            _stop_launched(app, launched)
            return
        from core.errors import UserError
        from devops_tui.launcher import stop_headless

        try:
            stop_headless(meta)
        except UserError as exc:
            app.notify(str(exc), severity="error")
        else:
            app.notify(f"asked {path.name} to stop (SIGINT to pid {meta.get('pid')})")

    app.push_screen(ConfirmScreen(f"Stop run {path.name}? It saves a checkpoint and ends as 'stopped'.",
                                  choices=[("stop", "Stop run"), ("cancel", "Cancel")]), decide)


def _stop_launched(app, launched) -> None:
    def stop() -> None:
        code = launched.stop()
        app.call_from_thread(app.notify, f"{launched.path.name} stopped (exit code {code})")

    app.run_worker(stop, thread=True, group="stop-run", exit_on_error=False)
    app.notify(f"stopping {launched.path.name}...")


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
        self.rows: list[RunRow] = []
        self._cache: dict = {}  # path -> (fingerprint, row); touched by the scanning worker only

    def compose(self) -> ComposeResult:
        yield Static("", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in (("run", 28), ("status", 8), ("mode", 7), ("backend", 7), ("steps", 7),
                             ("reward", 8), ("best", 8), ("age", 4)):
            table.add_column(label, width=width)
        self.query_one("#runs-title", Static).update(f"runs in {self.app.runs_root}")
        self.action_refresh()
        self.set_interval(REFRESH_S, self.action_refresh)

    def action_refresh(self) -> None:
        if self.is_current or not self.rows:
            self._scan(self.app.runs_root)

    @work(thread=True, exclusive=True, group="runs-scan", exit_on_error=False)
    def _scan(self, root: Path) -> None:
        self.post_message(RunsListed(scan_runs(root, self._cache)))

    def on_runs_listed(self, message: RunsListed) -> None:
        table = self.query_one(DataTable)
        selected = self.selected()
        self.rows = message.runs
        now = self.app.clock()
        table.clear()
        for row in self.rows:
            steps = "-" if row.steps is None else (f"{row.steps}/{row.total_steps}" if row.total_steps else str(row.steps))
            age = format_age(now - row.started) if row.started else "-"
            table.add_row(row.run_id, row.status, row.mode, row.backend, steps, format_value(row.last_reward),
                          format_value(row.best_reward), age, key=str(row.path))
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

    def selected(self) -> RunRow | None:
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
