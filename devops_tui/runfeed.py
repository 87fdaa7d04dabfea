"""Reads a run folder (or any verl file-logger JSONL) incrementally for the cockpit, with the core's `FileTail`.

No Textual here: a follower thread calls `RunFeed.poll()`, the screen calls `RunFeed.drain()` and applies
the `RunUpdate` to its `RunState`; what waits between the two is bounded. A long history is shown thinned at
once and its exact figures (min/max/NaN of every row) follow a few polls later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.runs import (
    EVENTS_FILE,
    LOG_FILE,
    META_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    FileTail,
    parse_record,
    read_meta,
)
from devops_tui.rollouts import RolloutCurves
from devops_tui.samples import RolloutSamples, SampleIndex, find_rollout_dir
from devops_tui.series import SERIES_CAPACITY, KeyStats, number_or_nan

LOG_LINES_KEPT = 1000
LOG_TAIL_BYTES = 64 * 1024  # what attaching reads of an existing train.log
READ_CAP_BYTES = 4 * 2**20  # at most this much of one file per poll, so a burst never stalls the follower
SCAN_LINES_PER_POLL = 2500  # of a thinned history's exact figures per poll (the UI thread keeps its turns)


@dataclass
class RunUpdate:
    """Everything new since the last drain; small, so one message can announce it."""

    metrics: list[dict] = field(default_factory=list)  # {"step": N, "data": {...}}
    events: list[dict] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    meta: dict | None = None
    restarted: bool = False  # the metrics file was truncated or replaced: charts start again
    history: bool = False  # `metrics` are the run's existing history, thinned to `stride`
    stride: int = 1
    history_rows: int = 0
    history_stats: dict[str, KeyStats] | None = None  # exact figures of every history row (thinned or not)
    extra_rows: list[dict] = field(default_factory=list)  # curves computed from verl's rollout dumps
    samples_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.metrics or self.events or self.log_lines or self.meta or self.restarted
                    or self.history_stats is not None or self.extra_rows or self.samples_changed)


def thin_history(lines: list[bytes], capacity: int = SERIES_CAPACITY) -> tuple[list[bytes], int]:
    """About `capacity` evenly spaced lines of a long history (always with the last one), and the stride.

    Parsing 100,000 metric rows would cost seconds, a few thousand do not; the charts keep no more anyway.
    """
    stride = 1
    while len(lines) / stride >= capacity:
        stride *= 2
    picked = lines[::stride]
    if lines and (len(lines) - 1) % stride:
        picked.append(lines[-1])
    return picked, stride


def row_stats(rows, stats: dict[str, KeyStats] | None = None) -> dict[str, KeyStats]:
    """Add `{"step", "data"}` rows to per-key exact figures (null counts as NaN)."""
    stats = {} if stats is None else stats
    for row in rows:
        data, step = row.get("data"), row.get("step")
        if not isinstance(data, dict) or not isinstance(step, int):
            continue
        for key, value in data.items():
            value = number_or_nan(value)
            if value is None:
                continue
            figures = stats.get(key)
            if figures is None:
                figures = stats[key] = KeyStats()
            figures.add(step, value)
    return stats


class RunFeed:
    """Follows one run folder (metrics, samples, events, train.log, meta.json) or a single JSONL file.

    `poll()` runs in a worker thread and queues what it read; `drain()` runs on the UI side. The metrics
    file's existing history is read whole but thinned (`thin_history`); then only what is appended.
    """

    def __init__(self, target: Path, *, history_capacity: int = SERIES_CAPACITY) -> None:
        target = Path(target)
        self.target = target
        is_run = target.is_dir() and (target / META_FILE).exists()
        if target.is_file():
            self.folder: Path | None = None
            metrics_path = target
        else:
            self.folder = target
            metrics_path = target / METRICS_FILE
        self.metrics_path = metrics_path
        self.history_capacity = history_capacity
        self._metrics = FileTail(metrics_path)
        self._events = self._log = None
        if self.folder is not None:
            self._events = FileTail(target / EVENTS_FILE, max_bytes=READ_CAP_BYTES)
            self._log = FileTail(target / LOG_FILE, from_end=LOG_TAIL_BYTES, max_bytes=READ_CAP_BYTES)
        rollouts = None if is_run and (target / SAMPLES_FILE).exists() else find_rollout_dir(target)
        # Samples: the run's samples.jsonl, else (a verl run not started here) verl's rollout dumps.
        self.samples: SampleIndex | RolloutSamples | None = (
            RolloutSamples(rollouts) if rollouts is not None else
            SampleIndex(target / SAMPLES_FILE) if self.folder is not None else None)
        # Per-dimension curves from the dumps, for verl runs whose metrics do not have them.
        self._curves = RolloutCurves(rollouts) if rollouts is not None and not is_run else None
        self.rollout_dir = rollouts
        self._meta_mtime: int | None = None
        self._lock = threading.Lock()
        self._pending = RunUpdate()
        self._loaded_history = False
        self._scan: list[bytes] | None = None  # history lines whose exact figures are still to be computed
        self._scan_stats: dict[str, KeyStats] = {}
        self._history_drained = False
        self.closed = False

    @property
    def name(self) -> str:
        return self.target.name

    def pending_size(self) -> int:
        with self._lock:
            p = self._pending
            return len(p.metrics) + len(p.log_lines) + len(p.events)

    def poll(self) -> bool:
        """Read whatever is new into the pending update; True when something arrived."""
        update = RunUpdate()
        restarts = self._metrics.restarts
        lines = self._metrics.poll()
        update.restarted = self._metrics.restarts != restarts
        if update.restarted:
            self._scan, self._scan_stats = None, {}
        if not self._loaded_history or update.restarted:
            picked, stride = thin_history(lines, self.history_capacity)
            update.history, update.stride, update.history_rows = True, stride, len(lines)
            if stride > 1:
                self._scan, self._scan_stats = lines, {}
            lines = picked
            self._loaded_history = True
        records = (parse_record(line, self.metrics_path) for line in lines)
        update.metrics = [r for r in records if r is not None and "data" in r]
        if update.history and self._scan is None:
            update.history_stats = row_stats(update.metrics)  # every row was read: the figures are exact
        elif self._scan is not None and not update.history and self._history_drained:
            update.history_stats = self._scan_some()  # only once the screen has drawn the thinned history
        if self.folder is not None:
            update.events = self._events.poll_records()
            update.log_lines = [line.decode("utf-8", "replace") for line in self._log.poll()]
            update.meta = self._read_meta()
        if self.samples is not None:
            update.samples_changed = self.samples.refresh()
        if self._curves is not None:
            update.extra_rows = self._curves.poll()
        if not update:
            return False
        with self._lock:
            p = self._pending
            if update.restarted:
                p.metrics.clear()
                p.restarted = True
            if update.history:
                p.history, p.stride, p.history_rows = True, update.stride, update.history_rows
            p.metrics.extend(update.metrics)
            p.events.extend(update.events)
            p.log_lines.extend(update.log_lines)
            del p.log_lines[:-LOG_LINES_KEPT]  # lines a slow UI never showed are not worth keeping
            p.extra_rows.extend(update.extra_rows)
            p.samples_changed = p.samples_changed or update.samples_changed
            if update.history_stats is not None:
                p.history_stats = update.history_stats
            if update.meta is not None:
                p.meta = update.meta
        return True

    def _scan_some(self) -> dict[str, KeyStats] | None:
        """Exact figures of the next slice of a thinned history; the whole set once the last slice is done."""
        lines, self._scan = self._scan[:SCAN_LINES_PER_POLL], self._scan[SCAN_LINES_PER_POLL:]
        row_stats((r for r in (parse_record(line, self.metrics_path) for line in lines) if r is not None),
                  self._scan_stats)
        if self._scan:
            return None
        self._scan = None
        return self._scan_stats

    def drain(self) -> RunUpdate:
        with self._lock:
            update, self._pending = self._pending, RunUpdate()
            self._history_drained = self._history_drained or update.history
        return update

    def close(self) -> None:
        """Stop background scoring of rollout dumps (the follower stops at its next poll)."""
        self.closed = True
        if self._curves is not None:
            self._curves.close()

    def _read_meta(self) -> dict | None:
        """meta.json when it changed since the last read (None otherwise, or while it cannot be read)."""
        try:
            mtime = (self.target / META_FILE).stat().st_mtime_ns
        except OSError:
            return None
        if mtime == self._meta_mtime:
            return None
        meta = read_meta(self.target)
        if meta is not None:
            self._meta_mtime = mtime  # one that could not be read is tried again at the next poll
        return meta


def follow_feed(feed: RunFeed, post: Callable[[], None], *, stop: Callable[[], bool],
                poll_interval: float = 0.2, backlog: int = 5000) -> None:
    """Worker loop: poll the feed, announce news with `post()`, back off while the UI lags behind."""
    try:
        while not stop() and not feed.closed:
            got = feed.poll()
            if got:
                post()
            delay = poll_interval
            if feed.pending_size() > backlog:
                delay = poll_interval * 4  # the handler has not drained yet: let it catch up
            time.sleep(delay)
    finally:
        feed.close()
