"""What the Live screen shows of a run, built from `RunUpdate`s: series, exact figures, events, status and alerts.

No Textual here: the screen applies each drained update and reads the derived figures when it redraws. The
alerts come from `core.runs.health` (the trainer's own `alert` events and the same checks computed here).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from core.runs import (  # the reward and status `runs list` shows: every face agrees
    PLANNED_KEY,
    REWARD_KEYS,
    Alert,
    HealthMonitor,
    Thresholds,
    by_severity,
    planned_steps,
    run_alerts,
    run_alive,
    run_status,
    status_text,
)
from core.training.curriculum import STAGE_EVENT
from devops_tui.runfeed import RunUpdate, row_stats
from devops_tui.series import SERIES_CAPACITY, KeyStats, Series, number_or_nan

EVENTS_KEPT = 200
HISTORY_KEPT = 500


@dataclass(frozen=True)
class AlertRecord:
    """One alert in the run's history: when it was first seen and who raised it (the trainer, or this cockpit)."""

    alert: Alert
    source: str  # "trainer" (an `alert` event in the run folder) or "cockpit" (computed here)
    seen: str  # the event's time, or when the cockpit first computed it (ISO 8601)


class RunState:
    """What the Live screen shows, built from `RunUpdate`s: series, latest values, figures, events, alerts."""

    def __init__(self, capacity: int = SERIES_CAPACITY, clock: Callable[[], float] = time.time,
                 thresholds: Thresholds | None = None) -> None:
        self.capacity = capacity
        self.clock = clock
        self.thresholds = thresholds or Thresholds()
        self.series: dict[str, Series] = {}
        self.latest: dict[str, float] = {}
        self.step: int | None = None
        self.rows_seen = 0
        self.rows_total = 0  # rows in the file (a thinned history shows fewer)
        self.stride = 1
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self.meta: dict = {}
        self.folder: Path | None = None
        self.first_row_time: float | None = None
        self.last_row_time: float | None = None
        self.version = 0  # bumps when anything a chart shows changed
        self.samples_version = 0
        self.warmstart: dict | None = None  # the newest `warmstart` event, until the first metrics row
        self.stage: dict | None = None  # the newest `curriculum_stage` event: the stage drawing the prompts
        self.history: list[AlertRecord] = []
        self.acknowledged: set[tuple[str, str]] = set()
        self._history_keys: set[tuple] = set()
        self._history_figures: dict[str, KeyStats] = {}
        self._live_figures: dict[str, KeyStats] = {}
        self._exact = True
        self._trainer_keys: set[str] = set()
        self.health = HealthMonitor(self.thresholds)

    def use_thresholds(self, thresholds: Thresholds, vocab_size: int | None = None) -> None:
        """The run's own alert thresholds (its config's devops.alerts) and vocabulary size, once known."""
        self.thresholds = thresholds
        self.health.thresholds = thresholds
        self.health.vocab_size = vocab_size
        self.version += 1

    def reset_metrics(self) -> None:
        self.series.clear()
        self.latest.clear()
        self.step = None
        self.rows_seen = self.rows_total = 0
        self.stride = 1
        self.first_row_time = self.last_row_time = None
        self._history_figures, self._live_figures, self._exact = {}, {}, True
        self.health.reset()

    def apply(self, update: RunUpdate) -> None:
        if update.restarted:
            self.reset_metrics()
        now = self.clock()
        for row in update.metrics:
            data = row.get("data")
            if not isinstance(data, dict):
                continue
            step = row.get("step", data.get("training/global_step", self.rows_seen))
            try:
                step = int(step)
            except (TypeError, ValueError):
                step = self.rows_seen
            for key, value in data.items():
                value = number_or_nan(value)
                if value is None:
                    continue
                series = self.series.get(key)
                if series is None:
                    series = self.series[key] = Series(self.capacity)
                    self._trainer_keys.add(key)
                series.append(step, value)
                self.latest[key] = value
            self.health.add(step, data)
            self.step = step if self.step is None else max(self.step, step)
            self.rows_seen += 1
        if update.history:
            self.stride = update.stride
            self.rows_total = update.history_rows
            self._exact = update.stride == 1
            self._history_figures = row_stats(update.metrics)
        elif update.metrics:
            self.rows_total += len(update.metrics)
            row_stats(update.metrics, self._live_figures)
        if update.history_stats is not None:
            self._history_figures, self._exact = update.history_stats, True
            for key, figures in update.history_stats.items():  # NaN in rows the thinning skipped still alerts
                if figures.first_bad_step is not None:
                    self.health.add(figures.first_bad_step, {key: None})
        for row in update.extra_rows:
            step, data = row.get("step"), row.get("data") or {}
            for key, value in data.items():
                if key in self._trainer_keys or not isinstance(value, (int, float)):
                    continue  # the trainer's own figure wins over one computed from its dumps
                self.series.setdefault(key, Series(self.capacity)).append(step, float(value))
        if update.metrics:
            self.last_row_time = now
            if self.first_row_time is None:
                self.first_row_time = now
        for event in update.events:
            self.events.append(event)
            if event.get("event") == "warmstart":
                self.warmstart = event
                self.version += 1
            elif event.get("event") == STAGE_EVENT:
                self.stage = event
                self.version += 1
            alert = Alert.from_event(event)
            if alert is not None:
                self._remember(alert, "trainer", str(event.get("time") or ""))
        if update.meta is not None:
            self.meta = update.meta
        if update.samples_changed:
            self.samples_version += 1
        if update.metrics or update.extra_rows or update.meta is not None or update.restarted \
                or update.history_stats is not None:
            self.version += 1

    # -- derived figures -------------------------------------------------------------------------
    def reward_key(self) -> str | None:
        for key in REWARD_KEYS:
            if key in self.series:
                return key
        return None

    def figures(self) -> dict[str, KeyStats]:
        """Exact last/min/max/mean of every key (`exact()` says whether a thinned history is still being read)."""
        out = dict(self._history_figures)
        for key, live in self._live_figures.items():
            out[key] = out[key].merged(live) if key in out else live
        return out

    def exact(self) -> bool:
        return self._exact

    def planned_steps(self) -> int | None:
        logged = self.latest.get(PLANNED_KEY)
        return planned_steps(self.meta, int(logged) if logged and math.isfinite(logged) else None, self.folder)

    def total_steps(self) -> int | None:
        """The planned total while it is known; a finished run's total is its last step."""
        planned = self.planned_steps()
        if planned:
            return planned
        total = self.meta.get("total_steps")
        return int(total) if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0 else None

    def seconds_per_step(self) -> float | None:
        timing = self.series.get("timing_s/step")
        if timing is not None and timing.finite_values():
            recent = timing.finite_values()[-20:]
            return sum(recent) / len(recent)
        return None

    def eta_seconds(self) -> float | None:
        total, per_step = self.total_steps(), self.seconds_per_step()
        if total is None or per_step is None or self.step is None:
            return None
        return max(total - self.step, 0) * per_step

    def status(self) -> str:
        """The status word (`crashed` when a running run's process is gone), or "file" for a bare metrics file."""
        return run_status(self.meta) if self.meta or self.rows_seen == 0 else "file"

    def status_text(self) -> str:
        """finished / stopped at N of M / failed: cause / crashed at step N / running (as `runs list` says it)."""
        status = self.status()
        return status if status == "file" else status_text(status, self.meta, self.step, self.planned_steps())

    def warmstart_text(self) -> str | None:
        """`warm-start 312/600, loss 0.41` while the run's SFT warm-start goes on (before its first step)."""
        event = self.warmstart
        if event is None or self.rows_seen or self.status() != "running":
            return None
        loss = event.get("loss")
        return f"warm-start {event.get('step')}/{event.get('total_steps')}" + (
            f", loss {loss:.2f}" if isinstance(loss, (int, float)) else "")

    def stage_text(self) -> str | None:
        """`stage 2/3: drills x2 + builtin` for a run with a curriculum (devops.curriculum), from its newest stage."""
        event = self.stage
        if event is None:
            return None
        return f"stage {event.get('stage')}/{event.get('of')}: {event.get('mix')}"

    # -- alerts ----------------------------------------------------------------------------------
    def _remember(self, alert: Alert, source: str, seen: str) -> None:
        # One row per alert: the trainer's event and the cockpit's own check of the same series are the same alert.
        key = (alert.kind, alert.series, alert.step if alert.kind == "nan" else None)
        if key in self._history_keys:
            return
        self._history_keys.add(key)
        self.history.append(AlertRecord(alert, source, seen))
        del self.history[:-HISTORY_KEPT]

    def alerts(self) -> list[Alert]:
        """Every alert that holds now, most severe first: the run's process (failed, crashed, stalled) and its
        numbers (core.runs.health); each one also goes into the history the first time it shows."""
        quiet = self.clock() - self.last_row_time if self.last_row_time is not None else None
        alerts = run_alerts(self.meta, alive=run_alive(self.meta), quiet_s=quiet,
                            seconds_per_step=self.seconds_per_step(), thresholds=self.thresholds,
                            last_step=self.step, folder=self.folder)
        alerts += self.health.active()
        seen = datetime.fromtimestamp(self.clock(), UTC).isoformat(timespec="seconds")
        for alert in alerts:
            self._remember(alert, "cockpit", seen)
        return by_severity(alerts)

    def shown_alerts(self, extra: list[Alert] | None = None) -> list[Alert]:
        """What the alert bar shows: errors (now or in the history) and current warnings, until acknowledged."""
        active = (extra or []) + self.alerts()
        errors = {a.key: a for a in [r.alert for r in self.history if r.alert.level == "error"] + active
                  if a.level == "error" and a.key not in self.acknowledged}
        warnings = [a for a in active if a.level != "error" and a.key not in self.acknowledged]
        return by_severity(list(errors.values()) + warnings)

    def acknowledge(self, alerts: list[Alert]) -> int:
        """Stop showing these alerts in the bar (the Alerts tab keeps them; another check or series still shows);
        returns how many were acknowledged."""
        keys = {a.key for a in alerts} - self.acknowledged
        self.acknowledged |= keys
        return len(keys)
