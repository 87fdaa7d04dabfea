"""Reads a run folder (or any verl file-logger JSONL) incrementally into bounded buffers for the cockpit.

No Textual here: a follower thread calls `RunFeed.poll()`, the screen calls `RunFeed.drain()` and
turns the `RunUpdate` into ring-buffered `RunState` that the charts read; memory never grows with the run.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.training.rundir import REWARD_KEYS, pid_alive  # REWARD_KEYS: the reward `runs list` shows, so both faces agree

SERIES_CAPACITY = 2048  # points kept per metric; older history is thinned, never dropped entirely
LOG_LINES_KEPT = 1000
LOG_TAIL_BYTES = 64 * 1024  # what attaching reads of an existing train.log
SAMPLE_STEPS_KEPT = 20
EVENTS_KEPT = 200


def _parse_json(line: bytes | str) -> dict | None:
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


class FileTail:
    """Incremental reader of an append-only file that notices truncation and replacement.

    Keeps a partial last line until its newline arrives (a writer crash loses at most that line).
    """

    def __init__(self, path: Path, *, start_at_end_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.offset = 0
        self.identity: tuple[int, int] | None = None
        self.partial = b""
        self.restarts = 0
        self._start_at_end_bytes = start_at_end_bytes

    def read_lines(self, max_bytes: int | None = None) -> list[bytes]:
        """Complete new lines since the last call (without newlines); [] when nothing new."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return []
        identity = (stat.st_dev, stat.st_ino)
        if self.identity is not None and (identity != self.identity or stat.st_size < self.offset):
            self.offset, self.partial = 0, b""  # replaced or truncated: read it again from the top
            self.restarts += 1
        first = self.identity is None
        self.identity = identity
        if first and self._start_at_end_bytes is not None and stat.st_size > self._start_at_end_bytes:
            self.offset = stat.st_size - self._start_at_end_bytes
            self.partial = b""
            skip_first_fragment = True
        else:
            skip_first_fragment = False
        if stat.st_size == self.offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read(max_bytes) if max_bytes else handle.read()
        self.offset += len(chunk)
        data = self.partial + chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if skip_first_fragment and lines:
            lines.pop(0)
        return [line.rstrip(b"\r") for line in lines if line.strip()]


class Series:
    """One metric's history in bounded memory: every point until full, then every 2nd, 4th, ..."""

    __slots__ = ("capacity", "steps", "values", "stride", "_seen", "last_step", "last_value")

    def __init__(self, capacity: int = SERIES_CAPACITY) -> None:
        self.capacity = capacity
        self.steps: list[float] = []
        self.values: list[float] = []
        self.stride = 1
        self._seen = 0
        self.last_step: float | None = None
        self.last_value: float | None = None

    def append(self, step: float, value: float) -> None:
        self.last_step, self.last_value = step, value
        keep = self._seen % self.stride == 0
        self._seen += 1
        if not keep:
            return
        self.steps.append(step)
        self.values.append(value)
        if len(self.values) >= self.capacity:
            self.steps = self.steps[::2]
            self.values = self.values[::2]
            self.stride *= 2
            self._seen = 1

    def finite_values(self) -> list[float]:
        return [v for v in self.values if math.isfinite(v)]

    def __len__(self) -> int:
        return len(self.values)


def smooth(values: list[float], weight: float = 0.8) -> list[float]:
    """TensorBoard's debiased exponential moving average (NaN points are skipped, not propagated)."""
    out, last, count = [], 0.0, 0
    for value in values:
        if not math.isfinite(value):
            out.append(math.nan)
            continue
        count += 1
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**count))
    return out


@dataclass
class RunUpdate:
    """Everything new since the last drain; small, so one message can announce it."""

    metrics: list[dict] = field(default_factory=list)  # {"step": N, "data": {...}}
    samples: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    meta: dict | None = None
    restarted: bool = False  # the metrics file was truncated or replaced: charts start again

    def __bool__(self) -> bool:
        return bool(self.metrics or self.samples or self.events or self.log_lines or self.meta or self.restarted)


def _stride_for(n_lines: int, capacity: int) -> int:
    stride = 1
    while n_lines / stride >= capacity:
        stride *= 2
    return stride


def load_metrics_history(path: Path, capacity: int = SERIES_CAPACITY) -> tuple[list[dict], int, int]:
    """Read an existing metrics file thinned to about `capacity` rows (always with the last row).

    Returns (rows, stride, bytes_read); parsing 100,000 rows would cost seconds, a few thousand do not.
    """
    try:
        data = Path(path).read_bytes()
    except OSError:
        return [], 1, 0
    end = data.rfind(b"\n") + 1  # a partial last line is left for the follower
    lines = [line for line in data[:end].split(b"\n") if line.strip()]
    stride = _stride_for(len(lines), capacity)
    picked = lines[::stride]
    if lines and (len(lines) - 1) % stride:
        picked.append(lines[-1])
    rows = [r for r in (_parse_json(line) for line in picked) if r is not None and "data" in r]
    return rows, stride, end


class RunFeed:
    """Follows one run folder (metrics, samples, events, train.log, meta.json) or a single JSONL file.

    `poll()` runs in a worker thread and queues what it read; `drain()` runs on the UI side.
    """

    def __init__(self, target: Path, *, history_capacity: int = SERIES_CAPACITY) -> None:
        target = Path(target)
        self.target = target
        if target.is_file():
            self.folder: Path | None = None
            metrics_path = target
        else:
            self.folder = target
            metrics_path = target / "metrics.jsonl"
        self.metrics_path = metrics_path
        self.history_capacity = history_capacity
        self._metrics = FileTail(metrics_path)
        self._samples = FileTail(target / "samples.jsonl", start_at_end_bytes=256 * 1024) if self.folder else None
        self._events = FileTail(target / "events.jsonl") if self.folder else None
        self._log = FileTail(target / "train.log", start_at_end_bytes=LOG_TAIL_BYTES) if self.folder else None
        self._meta_mtime: float | None = None
        self._lock = threading.Lock()
        self._pending = RunUpdate()
        self._loaded_history = False
        self.history_stride = 1

    @property
    def name(self) -> str:
        return self.target.name

    def pending_size(self) -> int:
        with self._lock:
            p = self._pending
            return len(p.metrics) + len(p.log_lines) + len(p.samples) + len(p.events)

    def poll(self) -> bool:
        """Read whatever is new into the pending update; True when something arrived."""
        update = RunUpdate()
        if not self._loaded_history:
            rows, stride, offset = load_metrics_history(self.metrics_path, self.history_capacity)
            self.history_stride = stride
            update.metrics.extend(rows)
            if offset:
                self._metrics.offset = offset
                self._metrics.identity = self._identity(self.metrics_path)
            self._loaded_history = True
        restarts = self._metrics.restarts
        for line in self._metrics.read_lines():
            record = _parse_json(line)
            if record is not None and "data" in record:
                update.metrics.append(record)
        if self._metrics.restarts != restarts:
            update.restarted = True
        if self._samples is not None:
            update.samples = [r for r in map(_parse_json, self._samples.read_lines()) if r is not None]
            update.events = [r for r in map(_parse_json, self._events.read_lines()) if r is not None]
            update.log_lines = [line.decode("utf-8", "replace") for line in self._log.read_lines()]
            update.meta = self._read_meta()
        if not update:
            return False
        with self._lock:
            p = self._pending
            if update.restarted:
                p.metrics.clear()
                p.restarted = True
            p.metrics.extend(update.metrics)
            p.samples.extend(update.samples)
            p.events.extend(update.events)
            p.log_lines.extend(update.log_lines)
            del p.log_lines[:-LOG_LINES_KEPT]  # lines a slow UI never showed are not worth keeping
            if update.meta is not None:
                p.meta = update.meta
        return True

    def drain(self) -> RunUpdate:
        with self._lock:
            update, self._pending = self._pending, RunUpdate()
        return update

    @staticmethod
    def _identity(path: Path) -> tuple[int, int] | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return (stat.st_dev, stat.st_ino)

    def _read_meta(self) -> dict | None:
        path = self.target / "meta.json"
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        if mtime == self._meta_mtime:
            return None
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # being rewritten; read it next time
        self._meta_mtime = mtime
        return meta if isinstance(meta, dict) else None


def follow_feed(feed: RunFeed, post: Callable[[], None], *, stop: Callable[[], bool],
                poll_interval: float = 0.2, backlog: int = 5000) -> None:
    """Worker loop: poll the feed, announce news with `post()`, back off while the UI lags behind."""
    while not stop():
        got = feed.poll()
        if got:
            post()
        delay = poll_interval
        if feed.pending_size() > backlog:
            delay = poll_interval * 4  # the handler has not drained yet: let it catch up
        time.sleep(delay)


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
        return str(self.meta.get("status", "unknown" if self.meta or self.rows_seen == 0 else "file"))

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
            pid = self.meta.get("pid")
            host = self.meta.get("host")
            if pid and (host in (None, "", os.uname().nodename)) and pid_alive(pid) is False:
                alerts.append(Alert("error", f"process {pid} is gone but the run says running: it crashed"))
            elif self.last_row_time is not None:
                per_step = self.seconds_per_step() or 0.0
                limit = max(stall_after_s, 5 * per_step)
                quiet = self.clock() - self.last_row_time
                if quiet > limit:
                    alerts.append(Alert("warning", f"no new step for {quiet:.0f}s: stalled?"))
        return alerts
