"""The Results screen: a run's eval results (`eval/eval_results_<ts>.json`) and a side-by-side compare.

Pick a file to see its summary per type and dimension; mark one with `c` and pick another to compare.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Static

from core.formatting import format_number
from devops_tui.widgets.footer import CockpitFooter

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
    return sorted(folder.glob("eval_results_*.json"))


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
        self.base: Path | None = None

    def compose(self) -> ComposeResult:
        yield Static("pick a run on the Runs screen (1) and press e", id="results-title")
        with Horizontal(id="results-body"):
            with Vertical(id="results-left"):
                yield DataTable(id="results-files", cursor_type="row")
            yield DataTable(id="results-table", zebra_stripes=True)
        yield CockpitFooter()

    def on_mount(self) -> None:
        self.query_one("#results-files", DataTable).add_column("eval results", width=36)
        if self.run is not None:
            self._show_files()
        elif getattr(self.app, "run_target", None) is not None and Path(self.app.run_target).is_dir():
            self.show_run(Path(self.app.run_target))

    def show_run(self, run: Path) -> None:
        """Show `run`'s results (queued, so it works on a screen that is still mounting)."""
        self.run = Path(run)
        self.call_later(self._show_files)

    def _show_files(self) -> None:
        if self.run is None:
            return
        self.files = find_results(self.run)
        files = self.query_one("#results-files", DataTable)
        files.clear()
        for path in self.files:
            files.add_row(path.name, key=str(path))
        title = self.query_one("#results-title", Static)
        if not self.files:
            title.update(f"{self.run.name}: no eval results yet (devops-rl eval --run {self.run.name})")
            self.query_one("#results-table", DataTable).clear(columns=True)
        else:
            title.update(f"{self.run.name}: {len(self.files)} eval results")
            files.move_cursor(row=len(self.files) - 1)  # the newest; highlighting it shows it
            self.show_file(self.files[-1])

    def show_file(self, path: Path) -> None:
        from core.agent.compare import load_results
        from core.errors import UserError

        table = self.query_one("#results-table", DataTable)
        table.clear(columns=True)
        try:
            data = load_results(path)
            base = load_results(self.base) if self.base is not None and self.base != path else None
        except UserError as exc:
            self.notify(str(exc), severity="error")
            return
        if base is None:
            table.add_column("figure", width=34)
            table.add_column("value", width=10)
            for row in summary_rows(data):
                table.add_row(*row)
            n = len(data.get("results", []))
            self.query_one("#results-title", Static).update(f"{path.name}: {n} results")
        else:
            table.add_column("figure", width=34)
            for label in ("A", "B", "B-A"):
                table.add_column(label, width=8)
            for row in compare_rows(base, data):
                table.add_row(*row)
            self.query_one("#results-title", Static).update(f"compare A {self.base.name}  vs  B {path.name}")

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
            self.notify(f"A = {self.base.name}; pick B")

    def action_clear_compare(self) -> None:
        self.base = None
        path = self._selected()
        if path is not None:
            self.show_file(path)
