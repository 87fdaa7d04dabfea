"""The Live screen: reward curves per dimension, training and system figures, samples, log tail, alerts.

A thread worker follows the run folder and only announces news; this screen drains it into ring
buffers and redraws the visible charts about once a second, only when something changed.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Log, ProgressBar, Static, TabbedContent, TabPane

from core.formatting import format_duration, format_number
from devops_tui.actions import confirm_and_stop
from devops_tui.messages import RunDataReady
from devops_tui.runfeed import LOG_LINES_KEPT, RunFeed, follow_feed
from devops_tui.runstate import Alert, RunState
from devops_tui.widgets.chart import MetricChart

try:  # the reward's own names when it is installed; the documented ones otherwise
    from core.rewards import DIMENSIONS
except ImportError:
    DIMENSIONS = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")

REDRAW_INTERVAL_S = 1.0

REWARD_CHARTS = [("final reward", ["reward/final/mean"])] + [
    (name.replace("_", " "), [f"reward/{name}/mean"]) for name in DIMENSIONS
]
TRAINING_CHARTS = [
    ("policy loss", ["actor/pg_loss"]),
    ("KL", ["actor/ppo_kl", "actor/kl_loss"]),
    ("entropy", ["actor/entropy"]),
    ("clip fraction", ["actor/pg_clipfrac"]),
    ("grad norm", ["actor/grad_norm"]),
    ("score mean/max/min", ["critic/score/mean", "critic/score/max", "critic/score/min"]),
    ("response length", ["response_length/mean", "response_length/max"]),
    ("learning rate", ["actor/lr"]),
]
MEMORY_KEYS = ("actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb")
SYSTEM_CHARTS = [
    ("memory GB", list(MEMORY_KEYS)),
    ("throughput tokens/s", ["perf/throughput"]),
    ("step time s (step/gen/update)", ["timing_s/step", "timing_s/gen", "timing_s/update_actor"]),
    ("GPU util %", []),
]


def memory_keys(keys) -> list[str]:
    """Allocated/reserved, NVML used/total per GPU; host memory when there is no GPU figure at all."""
    keys = set(keys)
    chosen = [k for k in MEMORY_KEYS if k in keys]
    gpus = sorted({k.split("/")[1] for k in keys if k.startswith("gpu/") and k.endswith("/memory_used_gb")}, key=int)
    for index in gpus:
        chosen += [k for k in (f"gpu/{index}/memory_used_gb", f"gpu/{index}/memory_total_gb") if k in keys]
    if not any(k.startswith("gpu/") for k in chosen):
        chosen += [k for k in ("perf/cpu_memory_used_gb", "host/memory_used_gb", "host/memory_total_gb") if k in keys]
    return chosen[:4]


def memory_label(key: str) -> str:
    """Short legend names: allocated, reserved, gpu0 used, gpu0 total, process, host used, host total."""
    names = {"actor/perf/max_memory_allocated_gb": "allocated", "actor/perf/max_memory_reserved_gb": "reserved",
             "perf/cpu_memory_used_gb": "process", "host/memory_used_gb": "host used",
             "host/memory_total_gb": "host total"}
    if key in names:
        return names[key]
    parts = key.split("/")  # gpu/<i>/memory_used_gb
    return f"gpu{parts[1]} {parts[2].removeprefix('memory_').removesuffix('_gb')}"


def penalty_keys(series) -> list[str]:
    """The four penalties that bit hardest so far (the rest stay at zero and would only add noise)."""
    known = {f"reward/{d}/mean" for d in DIMENSIONS} | {"reward/final/mean"}
    names = [k for k in series if k.startswith("reward/") and k.endswith("/mean") and k not in known]
    peak = {k: max(series[k].finite_values(), default=0.0) for k in names}
    return sorted(names, key=lambda k: (-peak[k], k))[:4]


NOTIFY_EVENTS = ("checkpoint", "validation", "warning", "finished", "failed", "stopped")


def describe_event(event: dict) -> str:
    """One line for a lifecycle event: its kind, step and the fields that say what happened."""
    details = ", ".join(f"{k} {format_number(v, style='compact') if isinstance(v, float) else v}"
                        for k, v in event.items() if k not in ("event", "time") and not isinstance(v, (dict, list)))
    return f"{event.get('event')}" + (f": {details}" if details else "")


def describe_sample(record: dict) -> Text:
    """One step's samples: reward, per-dimension scores, penalties, and the start of the response."""
    text = Text()
    text.append(f"step {record.get('step', '?')}\n", style="bold")
    for sample in record.get("samples", [])[:4]:
        breakdown = sample.get("breakdown") or {}
        reward = sample.get("reward", breakdown.get("final_reward"))
        text.append(f"{sample.get('task_id', '?')}", style="bold")
        shown = format_number(reward if isinstance(reward, (int, float)) else None, style="compact")
        text.append(f"  reward {shown}\n")
        dims = breakdown.get("dimensions") or {}
        if dims:
            text.append("  " + "  ".join(f"{k[:4]} {v:.2f}" for k, v in dims.items()
                                          if isinstance(v, (int, float))) + "\n", style="dim")
        penalties = {k: v for k, v in (breakdown.get("penalties") or {}).items() if v}
        if penalties:
            text.append("  penalties: " + ", ".join(f"{k} {v:.2f}" for k, v in penalties.items()) + "\n",
                        style="italic")
        response = str(sample.get("response", "")).strip().splitlines()[:4]
        for line in response:
            # A young policy emits any token; keep only printable characters so the layout holds.
            clean = "".join(ch if ch.isprintable() and ch != "\ufffd" else "·" for ch in line[:200])
            text.append("  │ " + clean + "\n")
    return text


class LiveScreen(Screen):
    """Follows one run folder (or verl metrics JSONL) and shows it."""

    BINDINGS = [
        Binding("r", "show_tab('tab-rewards')", "Rewards tab", id="live.rewards", show=False),
        Binding("t", "show_tab('tab-training')", "Training tab", id="live.training", show=False),
        Binding("y", "show_tab('tab-system')", "System tab", id="live.system", show=False),
        Binding("m", "show_tab('tab-samples')", "Samples tab", id="live.samples", show=False),
        Binding("l", "show_tab('tab-log')", "Log tab", id="live.log", show=False),
        Binding("s", "stop_run", "Stop run", id="live.stop"),
        Binding("e", "open_results", "Results", id="live.results"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.feed: RunFeed | None = None
        self.state = RunState()
        self._drawn_version = -1
        self._drawn_tab = ""
        self._events_seen = False
        self.redraws = 0

    def compose(self) -> ComposeResult:
        with Horizontal(id="live-head"):
            yield Static("no run attached: open one on the Runs screen (1) or start one (3)", id="live-title")
            yield ProgressBar(total=None, show_eta=False, id="live-progress")
        yield Static("", id="live-alerts")
        with TabbedContent(id="live-tabs"):
            with TabPane("[u]R[/u]ewards", id="tab-rewards"):
                with Grid(classes="chart-grid"):
                    for i, (title, keys) in enumerate(REWARD_CHARTS + [("penalties", [])]):
                        yield MetricChart(title, keys, id=f"chart-reward-{i}")
            # The other chart tabs are filled the first time they are shown: a faster first paint.
            with TabPane("[u]T[/u]raining", id="tab-training"):
                yield Grid(classes="chart-grid", id="grid-training")
            with TabPane("S[u]y[/u]stem", id="tab-system"):
                yield Grid(classes="chart-grid chart-grid-small", id="grid-system")
            with TabPane("Sa[u]m[/u]ples", id="tab-samples"):
                with VerticalScroll():
                    yield Static("no samples yet", id="live-samples")
            with TabPane("[u]L[/u]og", id="tab-log"):
                yield Log(max_lines=LOG_LINES_KEPT, id="live-log", auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        self.state.clock = self.app.clock
        self.set_interval(REDRAW_INTERVAL_S, self.redraw)
        target = getattr(self.app, "run_target", None)
        if target is not None and self.feed is None:
            self.attach(target)

    # -- following ------------------------------------------------------------------------------
    def attach(self, target: Path) -> None:
        """Follow `target` from now on (the previous follower stops at its next poll)."""
        self.feed = RunFeed(Path(target))
        self.state = RunState(clock=self.app.clock)
        self._drawn_version = -1
        self._events_seen = False
        if self.is_mounted:
            self.query_one("#live-log", Log).clear()
            self.query_one("#live-samples", Static).update("no samples yet")
        self._follow(self.feed)

    @work(thread=True, exclusive=True, group="live-feed", exit_on_error=False)
    def _follow(self, feed: RunFeed) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        follow_feed(feed, lambda: self.post_message(RunDataReady(id(feed))),
                    stop=lambda: worker.is_cancelled or self.feed is not feed)

    def on_run_data_ready(self, message: RunDataReady) -> None:
        feed = self.feed
        if feed is None or message.feed_id != id(feed):
            return  # a follower of a run we left
        update = feed.drain()
        first = self.state.rows_seen == 0 and bool(update.metrics)
        if self._events_seen:  # lifecycle news as it happens (not the history read on attaching)
            for event in update.events:
                if event.get("event") in NOTIFY_EVENTS:
                    self.notify(describe_event(event), severity="error" if event["event"] == "failed" else "information")
        self._events_seen = True
        self.state.apply(update)
        if update.log_lines:
            self.query_one("#live-log", Log).write_lines(update.log_lines)
        if first:
            self.redraw()  # first paint at once; after that at the redraw interval

    # -- drawing --------------------------------------------------------------------------------
    def _active_tab(self) -> str:
        return self.query_one("#live-tabs", TabbedContent).active

    async def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        for grid_id, charts, prefix in (("#grid-training", TRAINING_CHARTS, "chart-train"),
                                        ("#grid-system", SYSTEM_CHARTS, "chart-sys")):
            grid = self.query_one(grid_id, Grid)
            if event.pane.id == grid.parent.id and not grid.children:
                await grid.mount_all(MetricChart(title, keys, id=f"{prefix}-{i}")
                                     for i, (title, keys) in enumerate(charts))
        self.redraw()

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < 100, "-narrow")  # the header needs the progress bar's room

    def on_screen_resume(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Update the header and alerts; redraw the visible tab's charts only if data changed."""
        if not self.is_current or self.feed is None:
            return
        state = self.state
        self._update_head()
        tab = self._active_tab()
        if state.version == self._drawn_version and tab == self._drawn_tab:
            return
        self._drawn_version, self._drawn_tab = state.version, tab
        self.redraws += 1
        series = state.series
        if tab == "tab-rewards":
            for chart in self.query_one("#tab-rewards").query(MetricChart):
                if chart.title == "penalties":
                    keys = penalty_keys(series)
                    chart.set_series(series, keys, [k.split("/")[1] for k in keys])
                else:
                    chart.set_series(series)
        elif tab == "tab-training":
            for chart in self.query_one("#tab-training").query(MetricChart):
                chart.set_series(series)
        elif tab == "tab-system":
            charts = list(self.query_one("#tab-system").query(MetricChart))
            mem = memory_keys(series)
            charts[0].set_series(series, mem, [memory_label(k) for k in mem])
            charts[1].set_series(series)
            charts[2].set_series(series)
            util = sorted(k for k in series if k.startswith("gpu/") and k.endswith("/util"))[:4]
            charts[3].title = "GPU util %" if util else "host CPU %"
            charts[3].set_series(series, util or ["host/cpu_percent"], [f"gpu{k.split('/')[1]}" for k in util] or ["cpu"])
        elif tab == "tab-samples" and state.samples:
            self.query_one("#live-samples", Static).update(describe_sample(state.samples[-1]))

    def _update_head(self) -> None:
        state = self.state
        total = state.total_steps()
        step = state.step
        launched = self.feed is not None and self.feed.target in getattr(self.app, "launched", {})
        parts = [Text(self.feed.name if self.feed else "-", style="bold")]
        parts.append(Text(f" {state.status()}{' (started here)' if launched else ''}"))
        parts.append(Text(f"  step {step if step is not None else '-'}/{total or '?'}"))
        epoch = state.latest.get("training/epoch")
        if epoch is not None:
            shown = int(epoch) if float(epoch).is_integer() else format_number(epoch, style="compact")
            parts.append(Text(f"  epoch {shown}"))
        if state.status() == "running":
            parts.append(Text(f"  ETA {format_duration(state.eta_seconds(), parts=2)}"))
        key = state.reward_key()
        if key:
            parts.append(Text(f"  reward {format_number(state.latest.get(key), style='compact')}"))
        self.query_one("#live-title", Static).update(Text.assemble(*parts))
        bar = self.query_one("#live-progress", ProgressBar)
        if total:
            bar.update(total=total, progress=min(step or 0, total))
        alerts = state.alerts()
        run = getattr(self.app, "launched", {}).get(self.feed.target) if self.feed else None
        if run is not None and not run.alive() and run.process.returncode not in (0, 130):
            last = (run.console_tail(1) or ["no output"])[0]
            alerts.insert(0, Alert("error", f"training exited with code {run.process.returncode}: {last}"))
        box = self.query_one("#live-alerts", Static)
        box.display = bool(alerts)
        if alerts:
            box.update(Text("\n".join(("✖ " if a.level == "error" else "⚠ ") + a.text for a in alerts[:2])))
            box.set_class(any(a.level == "error" for a in alerts), "-error")

    # -- actions --------------------------------------------------------------------------------
    def action_show_tab(self, tab: str) -> None:
        self.query_one("#live-tabs", TabbedContent).active = tab

    def action_open_results(self) -> None:
        if self.feed is not None and self.feed.folder is not None:
            self.app.switch_mode("results")
            self.app.get_screen_stack("results")[0].show_run(self.feed.folder)

    def action_stop_run(self) -> None:
        if self.feed is None or self.feed.folder is None:
            self.notify("no run folder attached", severity="warning")
            return
        confirm_and_stop(self.app, self.feed.folder, dict(self.state.meta))
