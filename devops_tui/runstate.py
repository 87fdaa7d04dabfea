"""What the Live screen shows of a run, built from `RunUpdate`s: series, latest values, samples, events, alerts.

No Textual here: the screen applies each drained update and reads the derived figures when it redraws.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from core.runs import REWARD_KEYS, run_alive, run_status  # the reward and status `runs list` shows: both faces agree
from devops_tui.runfeed import RunUpdate
from devops_tui.series import SERIES_CAPACITY, Series

SAMPLE_STEPS_KEPT = 20
EVENTS_KEPT = 200


@dataclass
class Alert:
    """Something the user should look at now: `level` is "error" or "warning"."""

    level: str
    text: str


class RunState:
    """What the Live screen shows, built from `RunUpdate`s: series, latest values, samples, events."""

    def __init__(self, capacity: int = SERIES_CAPACITY, clock: Callable[[], float] = time.time) -> None:
        self.capacity = capacity
        self.clock = clock
        self.series: dict[str, Series] = {}
        self.latest: dict[str, float] = {}
        self.step: int | None = None
        self.rows_seen = 0
        self.samples: deque[dict] = deque(maxlen=SAMPLE_STEPS_KEPT)
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self.meta: dict = {}
        self.first_row_time: float | None = None
        self.last_row_time: float | None = None
        self.version = 0  # bumps when anything a chart shows changed

    def reset_metrics(self) -> None:
        self.series.clear()
        self.latest.clear()
        self.step = None
        self.rows_seen = 0
        self.first_row_time = self.last_row_time = None

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
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                value = float(value)
                series = self.series.get(key)
                if series is None:
                    series = self.series[key] = Series(self.capacity)
                series.append(step, value)
                self.latest[key] = value
            self.step = step
            self.rows_seen += 1
        if update.metrics:
            self.last_row_time = now
            if self.first_row_time is None:
                self.first_row_time = now
        for record in update.samples:
            self.samples.append(record)
        self.events.extend(update.events)
        if update.meta is not None:
            self.meta = update.meta
        if update.metrics or update.samples or update.meta is not None or update.restarted:
            self.version += 1

    # -- derived figures -------------------------------------------------------------------------
    def reward_key(self) -> str | None:
        for key in REWARD_KEYS:
            if key in self.series:
                return key
        return None

    def total_steps(self) -> int | None:
        for value in (self.meta.get("total_steps"), self.latest.get("training/total_steps")):
            if isinstance(value, (int, float)) and value > 0:
                return int(value)
        return None

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
        """meta.json's status (`running?` when its process is gone), or "file" for a bare metrics file."""
        return run_status(self.meta) if self.meta or self.rows_seen == 0 else "file"

    def alerts(self, *, stall_after_s: float = 120.0, window: int = 20) -> list[Alert]:
        """NaN/inf figures, a flat or collapsing reward, entropy collapse, a stalled or vanished run."""
        alerts: list[Alert] = []
        if self.meta.get("status") == "failed":
            alerts.append(Alert("error", f"run failed: {self.meta.get('message') or 'see the Log tab'}"))
        bad = sorted(k for k, v in self.latest.items() if not math.isfinite(v))
        if bad:
            alerts.append(Alert("error", f"NaN/inf at step {self.step}: {', '.join(bad[:3])}"))
        key = self.reward_key()
        values = self.series[key].finite_values() if key else []
        if len(values) >= window:
            recent = values[-window:]
            spread = max(recent) - min(recent)
            if spread < 1e-4:
                alerts.append(Alert("warning", f"reward flat at {recent[-1]:.3f} for {window} points: "
                                               "raise lr, widen the clip range or add entropy_coeff"))
            half = window // 2
            best = max(sum(values[i:i + half]) / half for i in range(0, len(values) - half + 1))
            now_mean = sum(values[-half:]) / half
            if best > 0.05 and now_mean < 0.5 * best:
                alerts.append(Alert("warning", f"reward collapsed from {best:.3f} to {now_mean:.3f}: "
                                               "check samples for reward hacking; lower lr or raise KL"))
        entropy = self.latest.get("actor/entropy")
        if entropy is not None and math.isfinite(entropy) and entropy < 0.05 and self.rows_seen >= window:
            alerts.append(Alert("warning", f"entropy {entropy:.3f}: distribution collapse; add entropy_coeff"))
        if self.meta.get("status") == "running":
            if run_alive(self.meta) is False:
                pid = self.meta.get("pid")
                alerts.append(Alert("error", f"process {pid} is gone but the run says running: it crashed"))
            elif self.last_row_time is not None:
                per_step = self.seconds_per_step() or 0.0
                limit = max(stall_after_s, 5 * per_step)
                quiet = self.clock() - self.last_row_time
                if quiet > limit:
                    alerts.append(Alert("warning", f"no new step for {quiet:.0f}s: stalled?"))
        return alerts
