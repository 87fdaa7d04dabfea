"""The Live screen: reward curves per dimension with validation and rubric, training and system figures, the
sample inspector, every metric's figures, the alert history and the log tail, under an honest status line.

A thread worker follows the run folder and only announces news; this screen drains it into ring buffers and
redraws the visible tab about once a second, only when something changed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import ProgressBar, Static, TabbedContent, TabPane

from core.formatting import format_duration, format_number
from core.runs import Alert, Thresholds
from devops_tui.actions import confirm_and_stop
from devops_tui.livecharts import CHART_TABS, memory_keys, memory_label, penalty_keys
from devops_tui.messages import RunDataReady
from devops_tui.runfeed import LOG_LINES_KEPT, RunFeed, follow_feed
from devops_tui.runstate import RunState
from devops_tui.widgets.chart import SMOOTHING_STEPS, WAITING, ZOOM_STEPS, Chart, ChartPanel, ChartView
from devops_tui.widgets.footer import CockpitFooter, TitleBar
from devops_tui.widgets.inspector import SampleInspector
from devops_tui.widgets.logview import LogView
from devops_tui.widgets.tables import AlertHistory, MetricsTable, metrics_csv

REDRAW_INTERVAL_S = 1.0
PREMOUNT_PAUSE_S = 0.2  # between mounting one hidden tab and the next, after the first paint
ALERT_LINES = 3
LOG_REFILL_LINES = 80  # two screens of a 40-line terminal; each costs a render when the tab opens

TABS = (("tab-rewards", "[u]R[/u]ewards"), ("tab-training", "[u]T[/u]raining"), ("tab-system", "S[u]y[/u]stem"),
        ("tab-samples", "Sa[u]m[/u]ples"), ("tab-metrics", "Metrics ([u]k[/u])"), ("tab-alerts", "[u]A[/u]lerts"),
        ("tab-log", "[u]L[/u]og"))


NOTIFY_EVENTS = ("warning", "finished", "failed", "stopped")  # alerts are not among them: the alert bar shows them
QUIET_EVENTS = ("checkpoint", "validation", "curriculum_stage")  # every few steps: a short toast only where it covers little
QUIET_MIN_WIDTH = 100


def describe_event(event: dict) -> str:
    """One line for a lifecycle event: its kind, step and the fields that say what happened."""
    if event.get("event") == "alert":
        return f"alert: {event.get('message')}"
    details = ", ".join(f"{k} {format_number(v, style='compact') if isinstance(v, float) else v}"
                        for k, v in event.items() if k not in ("event", "time") and not isinstance(v, (dict, list)))
    return f"{event.get('event')}" + (f": {details}" if details else "")


def alert_lines(alerts: list[Alert], limit: int = ALERT_LINES) -> Text:
    """The alert bar: the most severe first, one line each, and how many more the Alerts tab has."""
    text = Text()
    shown = alerts[:limit] if len(alerts) <= limit else alerts[: limit - 1]
    for i, alert in enumerate(shown):
        if i:
            text.append("\n")
        text.append("✖ " if alert.level == "error" else "⚠ ", style="bold")
        text.append(alert.message)
    if len(alerts) > len(shown):
        text.append(f"\n… {len(alerts) - len(shown)} more: a (Alerts tab)")
    text.append("  x: acknowledge", style="dim")
    return text


class RunSettingsRead(Message):
    """The attached run's alert thresholds (config.yaml's devops.alerts) and model vocabulary size."""

    def __init__(self, target: Path, thresholds: Thresholds, vocab_size: int | None) -> None:
        super().__init__()
        self.target, self.thresholds, self.vocab_size = target, thresholds, vocab_size


def read_run_settings(folder: Path | None) -> tuple[Thresholds, int | None]:
    """The run's own thresholds and vocabulary size from its config.yaml (defaults when it has none)."""
    import yaml

    if folder is None:
        return Thresholds(), None
    try:
        config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return Thresholds(), None
    if not isinstance(config, dict):
        return Thresholds(), None
    alerts = ((config.get("devops") or {}).get("alerts")) or {}
    model = ((config.get("actor_rollout_ref") or {}).get("model") or {}).get("path")
    vocab = None
    if isinstance(model, str):
        from core.training.config.model_info import model_config_json

        vocab = (model_config_json(model) or {}).get("vocab_size")
    return Thresholds.from_mapping(alerts if isinstance(alerts, dict) else {}), vocab


class LiveScreen(Screen):
    """Follows one run folder (or verl metrics JSONL) and shows it."""

    BINDINGS = [
        Binding("r", "show_tab('tab-rewards')", "Rewards tab", id="live.rewards", show=False),
        Binding("t", "show_tab('tab-training')", "Training tab", id="live.training", show=False),
        Binding("y", "show_tab('tab-system')", "System tab", id="live.system", show=False),
        Binding("m", "show_tab('tab-samples')", "Samples tab", id="live.samples", show=False),
        Binding("k", "show_tab('tab-metrics')", "Metrics tab", id="live.metrics", show=False),
        Binding("a", "show_tab('tab-alerts')", "Alerts tab", id="live.alerts", show=False),
        Binding("l", "show_tab('tab-log')", "Log tab", id="live.log", show=False),
        Binding("x", "acknowledge", "Ack alerts", id="live.acknowledge"),
        Binding("w", "smoothing", "Smoothing", id="live.smoothing", show=False),
        Binding("g", "log_scale", "Log scale", id="live.log_scale", show=False),
        Binding("z", "zoom", "Zoom steps", id="live.zoom", show=False),
        Binding("ctrl+s", "save_csv", "Save metrics CSV", id="live.csv", show=False),
        Binding("s", "stop_run", "Stop run", id="live.stop"),
        Binding("e", "open_results", "Results", id="live.results"),
    ]
    KEY_WIDGETS = (SampleInspector,)  # their keys are listed in the help too

    def __init__(self) -> None:
        super().__init__()
        self.feed: RunFeed | None = None
        self.state = RunState()
        self.view = ChartView()
        self._drawn_version = -1
        self._drawn_tab = ""
        self._drawn_view = self.view
        self._events_seen = False
        self._samples_shown = -1
        self._alerts: list[Alert] = []
        self._log_lines: deque[str] = deque(maxlen=LOG_LINES_KEPT)  # for a Log tab not shown yet
        self._log_stale = False  # lines arrived while the Log tab was hidden: it is refilled when shown
        self._shown_tabs: set[str] = set()  # tabs drawn at least once (for this run)
        self._mounting: dict[str, asyncio.Future] = {}  # each tab's one mount of its widgets (done: drawn into)
        self.redraws = 0

    def compose(self) -> ComposeResult:
        yield TitleBar("Live")
        with Horizontal(id="live-head"):
            yield Static("no run attached: open one on the Runs screen (1) or start one (3)", id="live-title")
            yield ProgressBar(total=None, show_eta=False, id="live-progress")
        yield Static("", id="live-alerts")
        # Every tab is filled the first time it is shown (the Rewards tab right after the first paint): the
        # screen appears at once and costs only what is looked at.
        with TabbedContent(id="live-tabs"):
            for tab, label in TABS:
                yield TabPane(label, id=tab)
        yield CockpitFooter()

    async def _fill_tab(self, tab: str) -> None:
        """Mount a tab's widgets the first time it is shown. The premount worker and a tab switch can ask at once:
        the second caller waits for the first one's mount instead of drawing into half-mounted widgets."""
        if tab not in self._mounting:
            self._mounting[tab] = asyncio.ensure_future(self._mount_tab(tab))
        await self._mounting[tab]

    async def _mount_tab(self, tab: str) -> None:
        panes = self.query(f"#{tab}").results(TabPane)
        pane = next(panes, None)
        if pane is None:  # the app is closing: the premount woke up after the screen's widgets were removed
            return
        if tab in CHART_TABS:
            charts = [Chart(title, keys, unit=unit) for title, keys, unit in CHART_TABS[tab]]
            await pane.mount(VerticalScroll(ChartPanel(charts, id=f"charts-{tab.removeprefix('tab-')}"),
                                            classes="chart-scroll"))
        elif tab == "tab-samples":
            inspector = SampleInspector(id="live-inspector")
            await pane.mount(inspector)
            inspector.attach(self.feed.samples if self.feed else None)
            self._samples_shown = -1
        elif tab == "tab-metrics":
            await pane.mount(MetricsTable(id="live-metrics"))
        elif tab == "tab-alerts":
            await pane.mount(AlertHistory(id="live-alert-history"))
        elif tab == "tab-log":
            await pane.mount(LogView(max_lines=LOG_LINES_KEPT, id="live-log"))
            self._sync_log()
        self._drawn_version = -1

    def on_mount(self) -> None:
        self.state.clock = self.app.clock
        self.query_one("#live-alerts", Static).display = False
        self.set_interval(REDRAW_INTERVAL_S, self.redraw)
        # After the first paint, as its own task: the refresh that paints the screen never waits for the charts.
        self.call_after_refresh(lambda: self.run_worker(self._fill_active(), group="live-fill"))
        target = getattr(self.app, "run_target", None)
        if target is not None and self.feed is None:
            self.attach(target)

    # -- following ------------------------------------------------------------------------------
    def attach(self, target: Path) -> None:
        """Follow `target` from now on (the previous follower stops at its next poll)."""
        if self.feed is not None:
            self.feed.closed = True
        self.feed = RunFeed(Path(target))
        self.state = RunState(clock=self.app.clock)
        self.state.folder = self.feed.folder
        self._drawn_version = -1
        self._shown_tabs.clear()
        self._events_seen = False
        self._samples_shown = -1
        self._log_lines.clear()
        self._log_stale = False
        for log in self.query("#live-log").results(LogView):
            log.clear()
        for tabs in self.query("#live-tabs").results(TabbedContent):
            tabs.loading = True  # until the follower's first read arrives
        for title in self.query("#live-title").results(Static):
            title.update(Text.assemble((self.feed.name, "bold"), "  loading..."))
        for inspector in self.query(SampleInspector).results(SampleInspector):
            inspector.attach(self.feed.samples)
        self._follow(self.feed)
        self._read_settings(self.feed.target, self.feed.folder)

    @work(thread=True, exclusive=True, group="live-feed", exit_on_error=False)
    def _follow(self, feed: RunFeed) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        follow_feed(feed, lambda: self.post_message(RunDataReady(id(feed))),
                    stop=lambda: worker.is_cancelled or self.feed is not feed)

    @work(thread=True, exclusive=True, group="live-settings", exit_on_error=False)
    def _read_settings(self, target: Path, folder: Path | None) -> None:
        self.post_message(RunSettingsRead(target, *read_run_settings(folder)))

    def on_run_settings_read(self, message: RunSettingsRead) -> None:
        if self.feed is not None and message.target == self.feed.target:
            self.state.use_thresholds(message.thresholds, message.vocab_size)

    def on_run_data_ready(self, message: RunDataReady) -> None:
        feed = self.feed
        if feed is None or message.feed_id != id(feed):
            return  # a follower of a run we left
        update = feed.drain()
        first = not self._events_seen
        if self._events_seen:  # lifecycle news as it happens (not the history read on attaching)
            for event in update.events:
                kind = event.get("event")
                if kind in NOTIFY_EVENTS:
                    self.notify(describe_event(event), severity="error" if kind == "failed" else "information")
                elif kind in QUIET_EVENTS and self.size.width >= QUIET_MIN_WIDTH:
                    self.notify(describe_event(event), timeout=2)
        self._events_seen = True
        self.state.apply(update)
        if update.log_lines:
            self._log_lines.extend(update.log_lines)
            if self._active_tab() == "tab-log" and not self._log_stale:
                for log in self.query("#live-log").results(LogView):
                    log.write_lines(update.log_lines)
            else:
                self._log_stale = True
        if first:
            self.query_one("#live-tabs", TabbedContent).loading = False
            self.redraw()  # first paint at once; after that at the redraw interval

    # -- drawing --------------------------------------------------------------------------------
    def _active_tab(self) -> str:
        return self.query_one("#live-tabs", TabbedContent).active

    async def _fill_active(self) -> None:
        """The shown tab first, then (one at a time, yielding between) the others, so no key waits for a mount."""
        await self._fill_tab(self._active_tab())
        self.redraw()
        for tab, _ in TABS:
            await asyncio.sleep(PREMOUNT_PAUSE_S)
            await self._fill_tab(tab)

    async def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id
        self.query_one(TitleBar).show(Text.from_markup(dict(TABS)[tab]).plain.split(" (")[0])
        await self._fill_tab(tab)
        if tab == "tab-log" and self._log_stale:
            self._sync_log()
        if tab == "tab-samples":  # after the tab is on screen: the focus moves in the next frame
            self.call_after_refresh(self.query_one(SampleInspector).query_one("#samples-table").focus)
        elif tab == "tab-metrics":  # a search tab: what is typed filters (Esc gives the keys back)
            self.set_focus(self.query_one("#metrics-filter"))
        if tab in self._shown_tabs:
            # The tab appears at once with what it drew last time; its new data follows in the next frame.
            self.call_after_refresh(self.redraw)
        else:
            self.redraw()

    def _sync_log(self) -> None:
        """Refill the Log tab from the kept lines. A wrapped log renders each line as it is written, so lines are
        written only while the tab shows (a hidden tab cost the event loop 1,000 renders a second) and a refill
        writes the newest LOG_REFILL_LINES."""
        self._log_stale = False
        for log in self.query("#live-log").results(LogView):
            log.clear()
            lines = list(self._log_lines)
            if len(lines) > LOG_REFILL_LINES:
                log.write_lines([f"… {len(lines) - LOG_REFILL_LINES} earlier lines in train.log"])
            log.write_lines(lines[-LOG_REFILL_LINES:])

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < 100, "-narrow")  # the header needs the progress bar's room

    def on_screen_resume(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Update the header and alerts; redraw the visible tab only if its data or the chart view changed."""
        if not self.is_current or self.feed is None:
            return
        state = self.state
        self._update_head()
        tab = self._active_tab()
        mounting = self._mounting.get(tab)
        if mounting is None or not mounting.done():
            return  # its widgets are still mounting: drawn by the next redraw after the mount
        if tab == "tab-samples" and state.samples_version != self._samples_shown:
            for inspector in self.query(SampleInspector).results(SampleInspector):
                self._samples_shown = state.samples_version
                inspector.refresh_source()
        if tab == "tab-alerts":
            for history in self.query(AlertHistory).results(AlertHistory):
                history.show(state.history)
        if state.version == self._drawn_version and tab == self._drawn_tab and self.view == self._drawn_view:
            return
        self._drawn_version, self._drawn_tab, self._drawn_view = state.version, tab, self.view
        self._shown_tabs.add(tab)
        self.redraws += 1
        series = state.series
        if tab in CHART_TABS:
            for panel in self.query_one(f"#{tab}").query(ChartPanel).results(ChartPanel):
                panel.set_series(series, lambda chart: self._chart_keys(chart, series), view=self.view,
                                 waiting=state.warmstart_text() or WAITING)
        elif tab == "tab-metrics":
            for table in self.query(MetricsTable).results(MetricsTable):
                table.show(state.figures(), state.exact())

    def _chart_keys(self, chart: Chart, series) -> tuple[list[str] | None, list[str] | None]:
        """Keys of the charts whose lines depend on what the run logs (penalties, memory, GPUs)."""
        if chart.title == "penalties":
            keys = penalty_keys(series)
            return keys, [k.split("/")[1] for k in keys]
        if chart.title in ("training memory", "host memory"):
            keys = memory_keys(series, device=chart.title == "training memory")
            return keys, [memory_label(k) for k in keys]
        if chart.title in ("GPU util", "host CPU"):
            util = sorted(k for k in series if k.startswith("gpu/") and k.endswith("/util"))[:4]
            chart.title = "GPU util" if util else "host CPU"
            return util or ["host/cpu_percent"], [f"gpu{k.split('/')[1]}" for k in util] or ["cpu"]
        return None, None

    def launch_failure(self) -> Alert | None:
        """A run started here whose process exited with an error (before or after writing its folder)."""
        run = getattr(self.app, "launched", {}).get(self.feed.target) if self.feed else None
        if run is None or run.alive() or run.process.returncode in (0, 130):
            return None
        last = (run.console_tail(1) or ["no output"])[0]
        return Alert("launch", "error", "console", self.state.step,
                     f"training exited with code {run.process.returncode}: {last}")

    def _update_head(self) -> None:
        state = self.state
        total = state.total_steps()
        step = state.step
        launched = self.feed is not None and self.feed.target in getattr(self.app, "launched", {})
        failure = self.launch_failure()
        status = state.status_text()
        if failure is not None and not state.meta:
            status = f"failed: {failure.message.split(': ', 1)[-1]}"  # it never wrote a meta.json
        parts = [Text(self.feed.name if self.feed else "-", style="bold")]
        parts.append(Text(f" {status}{' (started here)' if launched else ''}"))
        warmstart = state.warmstart_text()
        if warmstart is not None:  # before step 1: the SFT warm-start's own progress, not `step -/?`
            parts.append(Text(f"  {warmstart}"))
        else:
            parts.append(Text(f"  step {step if step is not None else '-'}/{total or '?'}"))
        epoch = state.latest.get("training/epoch")
        if epoch is not None and epoch == epoch:
            shown = int(epoch) if float(epoch).is_integer() else format_number(epoch, style="compact")
            parts.append(Text(f"  epoch {shown}"))
        stage = state.stage_text()
        if stage is not None:
            parts.append(Text(f"  {stage}"))
        running = state.status() == "running"
        if running and warmstart is None:
            parts.append(Text(f"  ETA {format_duration(state.eta_seconds(), parts=2)}"))
        key = state.reward_key()
        if key:
            parts.append(Text(f"  reward {format_number(state.latest.get(key), style='compact')}"))
        self.query_one("#live-title", Static).update(Text.assemble(*parts))
        bar = self.query_one("#live-progress", ProgressBar)
        # No endless loading bar for a dead run; none at all where the header needs the room.
        bar.display = not self.has_class("-narrow") and (bool(total) or (running and failure is None))
        if warmstart is not None:
            bar.update(total=state.warmstart.get("total_steps"), progress=state.warmstart.get("step"))
        elif total:
            bar.update(total=total, progress=min(step or 0, total))
        self._alerts = state.shown_alerts([failure] if failure is not None else None)
        box = self.query_one("#live-alerts", Static)
        box.display = bool(self._alerts)
        if self._alerts:
            box.update(alert_lines(self._alerts))
            box.set_class(self._alerts[0].level == "error", "-error")

    # -- actions --------------------------------------------------------------------------------
    def action_show_tab(self, tab: str) -> None:
        self.query_one("#live-tabs", TabbedContent).active = tab

    def action_acknowledge(self) -> None:
        count = self.state.acknowledge(self._alerts)
        self.notify(f"{count} alert(s) acknowledged; the Alerts tab keeps them" if count else "no alerts to acknowledge")
        self._update_head()

    def _set_view(self, **changes) -> None:
        from dataclasses import replace

        self.view = replace(self.view, **changes)
        self.notify(f"charts: {self.view.describe()}", timeout=2)
        self.redraw()

    def action_smoothing(self) -> None:
        steps = SMOOTHING_STEPS
        self._set_view(smoothing=steps[(steps.index(self.view.smoothing) + 1) % len(steps)])

    def action_log_scale(self) -> None:
        self._set_view(log_scale=not self.view.log_scale)

    def action_zoom(self) -> None:
        self._set_view(zoom=ZOOM_STEPS[(ZOOM_STEPS.index(self.view.zoom) + 1) % len(ZOOM_STEPS)])

    def action_save_csv(self) -> None:
        """The metrics table (as filtered) as CSV in the working folder (never into the run folder)."""
        if self.feed is None:
            return
        tables = self.query(MetricsTable).results(MetricsTable)
        words = next((table.words for table in tables), "")
        path = Path.cwd() / f"{self.feed.target.stem}-metrics.csv"
        path.write_text(metrics_csv(self.state.figures(), words), encoding="utf-8")
        self.notify(f"saved {path}")

    def action_open_results(self) -> None:
        if self.feed is not None and self.feed.folder is not None:
            self.app.switch_mode("results")
            self.app.get_screen_stack("results")[0].show_run(self.feed.folder)

    def action_stop_run(self) -> None:
        if self.feed is None or self.feed.folder is None:
            self.notify("no run folder attached", severity="warning")
            return
        confirm_and_stop(self.app, self.feed.folder, dict(self.state.meta))
