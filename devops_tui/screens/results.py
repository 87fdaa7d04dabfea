"""The Results screen: a run's eval results (`eval/eval_results_<ts>.json`) and a side-by-side compare.

Pick a file to see its summary per type and dimension; mark one with `c` and pick another to compare.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from devops_tui.widgets.chart import format_value


def flatten_numbers(data, prefix: str = "") -> dict[str, float]:
    """`{"a": {"b": 1}}` -> `{"a/b": 1.0}` for every number inside (lists of scalars are skipped)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten_numbers(value, f"{prefix}{key}/" if isinstance(value, dict) else f"{prefix}{key}"))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix.rstrip("/")] = float(data)
    return out


def load_results(path: Path) -> dict:
    """An eval results file; a UserError naming the file when it is not one."""
    from core.errors import UserError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read eval results ({exc}); re-run 'devops-rl eval'") from None
    if not isinstance(data, dict) or "summary" not in data:
        raise UserError(f"{path}: no 'summary' key; is this an eval_results_<ts>.json file?")
    return data


def compare_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, B-A) for every summary number either file has, in A's order then B's extras."""
    fa, fb = flatten_numbers(a.get("summary", {})), flatten_numbers(b.get("summary", {}))
    rows = []
    for key in list(fa) + [k for k in fb if k not in fa]:
        va, vb = fa.get(key), fb.get(key)
        delta = vb - va if va is not None and vb is not None and math.isfinite(va) and math.isfinite(vb) else None
        sign = "+" if delta is not None and delta > 0 else ""
        rows.append((key, format_value(va), format_value(vb), "-" if delta is None else sign + format_value(delta)))
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
        yield Footer()

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
            table.add_columns("figure", "value")
            for key, value in flatten_numbers(data["summary"]).items():
                table.add_row(key, format_value(value))
            n = len(data.get("results", []))
            self.query_one("#results-title", Static).update(f"{path.name}: {n} results")
        else:
            table.add_columns("figure", "A", "B", "B-A")
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
