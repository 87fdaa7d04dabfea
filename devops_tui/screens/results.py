"""The Results screen: a run's eval results (`eval/eval_results_<ts>.json`), each labelled by model and settings,
and a side-by-side compare of two of them where A is always the older and B the newer.

Files are read in a thread worker; pick one to see its summary per type and dimension, mark one with `c` and
pick another to compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from core.formatting import format_number
from devops_tui.compare import by_time, results_label, results_time
from devops_tui.widgets.footer import CockpitFooter, TitleBar

SECTIONS = (("by type", "by_type"), ("by difficulty", "by_difficulty"), ("by dimension", "by_dimension"),
            ("penalties (lower is better)", "by_penalty"))


def summary_rows(data: dict) -> list[tuple]:
    """(figure, value) rows of one results file: overall figures, then per type/difficulty/dimension/penalty."""
    summary = data["summary"]
    rows: list[tuple] = [("mean reward", format_number(summary.get("mean_reward"), style="compact")),
                         ("scored / failed", f"{summary.get('count', '-')} / {summary.get('failures', '-')}")]
    for title, key in SECTIONS:
        if summary.get(key):
            rows.append((Text(title, style="bold"), ""))
            rows += [(f"  {name}", format_number(value, style="compact")) for name, value in summary[key].items()]
    return rows


def _cells(row: dict) -> tuple[str, ...]:
    """A compare row's A, B and B-A (signed) as table cells."""
    return tuple(format_number(row[key], style="compact", signed=key == "delta") for key in ("a", "b", "delta"))


def compare_rows(a: dict, b: dict) -> list[tuple]:
    """(figure, A, B, B-A) rows from `core.agent.compare`: overall, per section, then tasks that moved most."""
    from core.agent.compare import compare

    result = compare(a, b)
    m = result["mean_reward"]
    rows: list[tuple] = [("mean reward", *_cells(m))]
    for title, key in SECTIONS:
        if result[key]:
            rows.append((Text(title, style="bold"), "", "", ""))
            rows += [(f"  {name}", *_cells(r)) for name, r in result[key].items()]
    for title, key in (("improved most", "improved"), ("regressed most", "regressed")):
        if result[key]:
            rows.append((Text(f"{title} ({result['common_tasks']} tasks in both)", style="bold"), "", "", ""))
            rows += [(f"  {c['task_id']}", *_cells(c)) for c in result[key]]
    return rows


def find_results(run: Path) -> list[Path]:
    """Eval result files of a run folder (its `eval/` sub-folder), oldest first."""
    folder = run / "eval" if (run / "eval").is_dir() else run
    return sorted(folder.glob("eval_results_*.json"), key=results_time)


@dataclass
class ResultsRead(Message):
    """A run's eval results files, read by a worker: (path, data or None, error)."""

    run: Path
    files: list[tuple[Path, dict | None, str | None]]


class ResultsScreen(Screen):
    """Eval results of one run, and a compare of two results files."""

    AUTO_FOCUS = "#results-files"
    BINDINGS = [
        Binding("c", "mark_compare", "Compare with…", id="results.compare"),
        Binding("x", "clear_compare", "Clear compare", id="results.clear"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.run: Path | None = None
        self.files: list[Path] = []
        self.data: dict[Path, dict] = {}
        self.base: Path | None = None

    def compose(self) -> ComposeResult:
        yield TitleBar("Results")
        yield Static("pick a run on the Runs screen (1) and press e", id="results-title")
        with Horizontal(id="results-body"):
            with Vertical(id="results-left"):
                yield DataTable(id="results-files", cursor_type="row")
            yield DataTable(id="results-table", zebra_stripes=True)
        yield CockpitFooter()

    def on_mount(self) -> None:
        files = self.query_one("#results-files", DataTable)
        for label, width in (("when (UTC)", 11), ("model · settings", 22), ("mean", 5)):
            files.add_column(label, width=width)
        if self.run is not None:
            self._read(self.run)
        elif getattr(self.app, "run_target", None) is not None and Path(self.app.run_target).is_dir():
            self.show_run(Path(self.app.run_target))

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < 100, "-narrow")

    def show_run(self, run: Path) -> None:
        """Show `run`'s results (read in a worker, so it works on a screen that is still mounting)."""
        self.run = Path(run)
        self.base = None
        if self.is_mounted:
            self.query_one("#results-title", Static).update(f"{self.run.name}: reading eval results...")
            self._read(self.run)

    @work(thread=True, exclusive=True, group="results-read", exit_on_error=False)
    def _read(self, run: Path) -> None:
        from core.agent.compare import load_results
        from core.errors import UserError

        files = []
        for path in find_results(run):
            try:
                files.append((path, load_results(path), None))
            except UserError as exc:
                files.append((path, None, str(exc)))
        self.post_message(ResultsRead(run, files))

    def on_results_read(self, message: ResultsRead) -> None:
        if message.run != self.run:
            return
        self.files = [path for path, _, _ in message.files]
        self.data = {path: data for path, data, _ in message.files if data is not None}
        table = self.query_one("#results-files", DataTable)
        table.clear()
        for path, data, error in message.files:
            when = datetime.fromtimestamp(results_time(path), UTC).strftime("%m-%d %H:%M")
            label = results_label(path, data, width=40).rsplit(" · ", 1)[0] if data else f"unreadable: {error}"
            mean = format_number((data or {}).get("summary", {}).get("mean_reward"), style="compact")
            table.add_row(when, label, mean, key=str(path))
        title = self.query_one("#results-title", Static)
        if not self.files:
            title.update(f"{self.run.name}: no eval results yet (devops-rl eval --run {self.run.name})")
            self.query_one("#results-table", DataTable).clear(columns=True)
        else:
            title.update(f"{self.run.name}: {len(self.files)} eval results")
            table.move_cursor(row=len(self.files) - 1)  # the newest; highlighting it shows it
            self.show_file(self.files[-1])

    def show_file(self, path: Path) -> None:
        table = self.query_one("#results-table", DataTable)
        table.clear(columns=True)
        data = self.data.get(path)
        if data is None:
            self.notify(f"{path.name} could not be read", severity="error")
            return
        base = self.data.get(self.base) if self.base is not None and self.base != path else None
        if base is None:
            table.add_column("figure", width=34 if self.size.width >= 100 else 26)
            table.add_column("value", width=10)
            for row in summary_rows(data):
                table.add_row(*row)
            n = len(data.get("results", []))
            self.query_one("#results-title", Static).update(f"{results_label(path, data)}: {n} results")
            return
        (a_path, a), (b_path, b) = by_time((self.base, base), (path, data))
        table.add_column("figure", width=34 if self.size.width >= 100 else 22)
        for label in ("A", "B", "B-A"):
            table.add_column(label, width=8)
        for row in compare_rows(a, b):
            table.add_row(*row)
        width = max(20, (self.size.width - 26) // 2)
        self.query_one("#results-title", Static).update(
            f"A (older) {results_label(a_path, a, width=width)}  vs  B (newer) {results_label(b_path, b, width=width)}")

    def _selected(self) -> Path | None:
        files = self.query_one("#results-files", DataTable)
        if not self.files or not 0 <= files.cursor_row < len(self.files):
            return None
        return self.files[files.cursor_row]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "results-files":
            path = self._selected()
            if path is not None:
                self.show_file(path)

    def action_mark_compare(self) -> None:
        self.base = self._selected()
        if self.base is not None:
            self.notify(f"compare with {self.base.name}: pick another (A is always the older)")

    def action_clear_compare(self) -> None:
        self.base = None
        path = self._selected()
        if path is not None:
            self.show_file(path)
