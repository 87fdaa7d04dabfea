"""The Compare screen: two or more runs (any backend, or verl file-logger JSONL files) side by side: their curves
overlaid per metric, the config keys that differ, and their newest eval results labelled by model and settings.

Runs come from the Runs screen (space marks, c compares) or are typed in; each is read in a thread worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from core.formatting import format_number
from devops_tui.compare import RunCurves, config_diff, load_run, results_label, results_time
from devops_tui.widgets.chart import SMOOTHING_STEPS, ChartView, MetricChart
from devops_tui.widgets.footer import CockpitFooter, TitleBar

LINE_MARK = "━"  # beside each run, in the colour of its line in the chart


def short(name: str, width: int = 20) -> str:
    """A run id cut from the left: its end (time, mode, suffix) tells runs apart."""
    return name if len(name) <= width else "…" + name[-(width - 1):]


@dataclass
class RunLoaded(Message):
    run: RunCurves


@dataclass
class ResultsLoaded(Message):
    rows: list[tuple]
    title: str


def eval_rows(picked: list[tuple[Path, dict, str]]) -> tuple[list[str], list[tuple]]:
    """(column labels, rows) comparing eval results oldest first; with exactly two, a B-A column too."""
    from devops_tui.screens.results import SECTIONS

    picked = sorted(picked, key=lambda item: results_time(item[0]))
    labels = [label for _, _, label in picked]
    summaries = [data.get("summary") or {} for _, data, _ in picked]

    def cells(values: list) -> list[str]:
        out = [format_number(v, style="compact") for v in values]
        if len(values) == 2:
            a, b = values
            out.append(format_number(b - a if a is not None and b is not None else None, style="compact", signed=True))
        return out

    rows: list[tuple] = [("mean reward", *cells([s.get("mean_reward") for s in summaries]))]
    for title, key in SECTIONS:
        names = sorted({name for s in summaries for name in (s.get(key) or {})})
        if names:
            rows.append((Text(title, style="bold"), *[""] * (len(summaries) + (len(summaries) == 2))))
            rows += [(f"  {name}", *cells([(s.get(key) or {}).get(name) for s in summaries])) for name in names]
    return labels, rows


class CompareScreen(Screen):
    """Runs on the left, their curves / config diff / eval results on the right."""

    AUTO_FOCUS = "#compare-keys"
    BINDINGS = [
        Binding("delete,d", "remove_run", "Remove run", id="compare.remove"),
        Binding("plus", "add_run", "Add run…", key_display="+", id="compare.add"),
        Binding("w", "smoothing", "Smoothing", id="compare.smoothing", show=False),
        Binding("g", "log_scale", "Log scale", id="compare.log_scale", show=False),
        Binding("c", "show_tab('tab-curves')", "Curves tab", id="compare.curves", show=False),
        Binding("f", "show_tab('tab-config')", "Config diff tab", id="compare.config", show=False),
        Binding("v", "show_tab('tab-eval')", "Eval tab", id="compare.eval", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunCurves] = []
        self.pending: list[Path] = []
        self.keys: list[str] = []
        self.view = ChartView()

    def compose(self) -> ComposeResult:
        yield TitleBar("Compare")
        yield Static("compare runs: mark two or more on the Runs screen (space) and press c, or add one with +",
                     id="compare-title")
        with Horizontal(id="compare-body"):
            with Vertical(id="compare-left"):
                yield DataTable(id="compare-runs", cursor_type="row")
                yield Input(placeholder="+ run id, folder or verl .jsonl", id="compare-add")
            with TabbedContent(id="compare-tabs"):
                with TabPane("[u]C[/u]urves", id="tab-curves"):
                    with Horizontal():
                        with Vertical(id="compare-keys-box"):
                            yield Input(placeholder="filter metrics", id="compare-filter")
                            yield DataTable(id="compare-keys", cursor_type="row")
                        yield MetricChart("", [], smoothed=False, smooth_each=True, id="compare-chart")
                with TabPane("Config di[u]f[/u]f", id="tab-config"):
                    yield DataTable(id="compare-config", zebra_stripes=True)
                with TabPane("E[u]v[/u]al", id="tab-eval"):
                    yield Static("", id="compare-eval-title")
                    yield DataTable(id="compare-eval", zebra_stripes=True)
        yield CockpitFooter()

    def on_mount(self) -> None:
        self.query_one("#compare-keys", DataTable).add_column("metric", width=30)
        pending = getattr(self.app, "compare_targets", None)
        if pending:
            self.show_runs(pending)

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < 100, "-narrow")
        self._fill_runs()
        self.call_after_refresh(self._fill_config)  # its columns follow the tab's new width

    # -- runs -----------------------------------------------------------------------------------
    def show_runs(self, paths: list[Path]) -> None:
        """Compare exactly these runs (each is read in a worker)."""
        self.runs, self.pending = [], [Path(p) for p in paths]
        self._fill_runs()
        # The metric list, not the filter box: the screen's keys (c, f, v, w, g) work at once.
        self.call_after_refresh(self.query_one("#compare-keys", DataTable).focus)
        for path in self.pending:
            self._load(path)

    def add(self, path: Path) -> None:
        if any(run.path == path for run in self.runs) or path in self.pending:
            return
        self.pending.append(path)
        self._fill_runs()
        self._load(path)

    @work(thread=True, group="compare-load", exit_on_error=False)
    def _load(self, path: Path) -> None:
        self.post_message(RunLoaded(load_run(path)))

    def on_run_loaded(self, message: RunLoaded) -> None:
        if message.run.path not in self.pending:
            return  # removed meanwhile
        self.pending.remove(message.run.path)
        self.runs.append(message.run)
        self.runs.sort(key=lambda run: run.name)
        self._fill_runs()
        self._fill_keys()
        self._fill_config()
        self._load_results([run for run in self.runs if run.results])

    def _fill_runs(self) -> None:
        table = self.query_one("#compare-runs", DataTable)
        table.clear(columns=True)
        narrow = self.has_class("-narrow")  # the status column only where it fits
        for label, width in (("", 1), ("run", 20), ("steps", 5), ("status", 12))[: 3 if narrow else 4]:
            table.add_column(label, width=width)
        for i, run in enumerate(self.runs):
            mark = Text(LINE_MARK, style=self._line_style(i))
            table.add_row(*(mark, short(run.name), str(run.steps or "-"), run.status)[: len(table.columns)],
                          key=str(run.path))
        for path in self.pending:
            table.add_row(*("", short(path.name), "", "loading…")[: len(table.columns)], key=str(path))
        names = ", ".join(run.name for run in self.runs)
        self.query_one("#compare-title", Static).update(
            f"comparing {len(self.runs)} runs: {names}" if self.runs else
            "compare runs: mark two or more on the Runs screen (space) and press c, or add one with +")

    def _line_style(self, index: int) -> str:
        chart = self.query_one("#compare-chart", MetricChart)
        return str(chart.get_component_rich_style(f"chart--line-{min(index + 1, 4)}", partial=True))

    # -- curves ---------------------------------------------------------------------------------
    def _fill_keys(self) -> None:
        words = self.query_one("#compare-filter", Input).value.lower().split()
        keys = sorted({k for run in self.runs for k in run.series})
        keys = [k for k in keys if all(w in k.lower() for w in words)]
        table = self.query_one("#compare-keys", DataTable)
        selected = self._selected_key()
        if keys != self.keys:
            self.keys = keys
            table.clear()
            for key in keys:
                table.add_row(key, key=key)
        preferred = selected or next((k for k in ("critic/score/mean", "reward/final/mean") if k in keys), None)
        if preferred in keys:
            table.move_cursor(row=keys.index(preferred))
        self._draw()

    def _selected_key(self) -> str | None:
        table = self.query_one("#compare-keys", DataTable)
        return self.keys[table.cursor_row] if self.keys and 0 <= table.cursor_row < len(self.keys) else None

    def _draw(self) -> None:
        key = self._selected_key()
        chart = self.query_one("#compare-chart", MetricChart)
        chart.title = key or "pick a metric"
        series = {run.name: run.series[key] for run in self.runs if key in run.series} if key else {}
        names = [run.name for run in self.runs]
        chart.set_series(series, names, [short(n, 16) for n in names], view=self.view)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "compare-keys":
            self._draw()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "compare-filter":
            self._fill_keys()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "compare-add" or not event.value.strip():
            return
        from core.errors import UserError
        from core.runs import resolve_run

        try:
            path = resolve_run(event.value.strip(), root=self.app.runs_root, files=True)
        except UserError as exc:
            self.notify(str(exc), severity="error")
            return
        event.input.value = ""
        self.add(path)

    # -- config and eval ------------------------------------------------------------------------
    def _fill_config(self) -> None:
        """One column per run, all of them on screen: the key and run columns share the tab's width (with three
        runs at 120 columns the third was off-screen)."""
        table = self.query_one("#compare-config", DataTable)
        table.clear(columns=True)
        room = (self.query_one("#compare-tabs").size.width or self.size.width // 2) - 2  # the scrollbar
        runs = max(len(self.runs), 1)
        run_width = min(18, max(8, (room - 34) // runs - 2))  # values are short; a dotted key is not
        key_width = max(16, min(40, room - runs * (run_width + 2) - 2))
        table.add_column("key", width=key_width)
        for run in self.runs:
            table.add_column(run.name[-run_width:], width=run_width)
        rows = config_diff(self.runs)
        for key, values in rows:
            table.add_row(key if len(key) <= key_width else "…" + key[-(key_width - 1):],
                          *[v[:run_width] for v in values])
        if not rows:
            table.add_row("(no differences)" if len(self.runs) > 1 else "(add another run)", *[""] * len(self.runs))

    @work(thread=True, exclusive=True, group="compare-results", exit_on_error=False)
    def _load_results(self, runs: list[RunCurves]) -> None:
        from core.agent.compare import load_results
        from core.errors import UserError

        picked = []
        for run in runs:
            path = run.results[-1]  # the run's newest eval
            try:
                data = load_results(path)
            except UserError:
                continue
            picked.append((path, data, f"{run.name[-16:]}: {results_label(path, data, width=40)}"))
        if not picked:
            self.post_message(ResultsLoaded([], "no eval results in these runs (devops-rl eval --run RUN)"))
            return
        labels, rows = eval_rows(picked)
        order = " · ".join(f"{chr(65 + i)} = {label}" for i, label in enumerate(labels)) if len(labels) <= 3 else \
            f"{len(labels)} results, oldest first"
        self.post_message(ResultsLoaded([tuple(labels), *rows], order))

    def on_results_loaded(self, message: ResultsLoaded) -> None:
        self.query_one("#compare-eval-title", Static).update(message.title)
        table = self.query_one("#compare-eval", DataTable)
        table.clear(columns=True)
        if not message.rows:
            return
        labels, rows = message.rows[0], message.rows[1:]
        table.add_column("figure", width=28)
        for i, _ in enumerate(labels):
            table.add_column(chr(65 + i), width=9)
        if len(labels) == 2:
            table.add_column("B-A", width=9)
        for row in rows:
            table.add_row(*row)

    # -- actions --------------------------------------------------------------------------------
    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.query_one(TitleBar).show(Text.from_markup(str(event.tab.label)).plain)

    def action_show_tab(self, tab: str) -> None:
        # The focus goes along: left in the pane being hidden, it would fall to the next input and switch back.
        table = {"tab-curves": "#compare-keys", "tab-config": "#compare-config", "tab-eval": "#compare-eval"}[tab]
        self.set_focus(self.query_one(table, DataTable))
        self.query_one("#compare-tabs", TabbedContent).active = tab

    def action_remove_run(self) -> None:
        table = self.query_one("#compare-runs", DataTable)
        if not self.runs or not 0 <= table.cursor_row < len(self.runs):
            return
        del self.runs[table.cursor_row]
        self._fill_runs()
        self._fill_keys()
        self._fill_config()
        self._load_results([run for run in self.runs if run.results])

    def action_add_run(self) -> None:
        self.query_one("#compare-add", Input).focus()

    def action_smoothing(self) -> None:
        from dataclasses import replace

        steps = SMOOTHING_STEPS
        self.view = replace(self.view, smoothing=steps[(steps.index(self.view.smoothing) + 1) % len(steps)])
        self.notify(f"charts: {self.view.describe()}", timeout=2)
        self._draw()

    def action_log_scale(self) -> None:
        from dataclasses import replace

        self.view = replace(self.view, log_scale=not self.view.log_scale)
        self._draw()
