"""Reads a run folder (or any verl file-logger JSONL) incrementally for the cockpit, with the core's `FileTail`.

No Textual here: a follower thread calls `RunFeed.poll()`, the screen calls `RunFeed.drain()` and applies
the `RunUpdate` to its `RunState`; what waits between the two is bounded.
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
from devops_tui.series import SERIES_CAPACITY

LOG_LINES_KEPT = 1000
LOG_TAIL_BYTES = 64 * 1024  # what attaching reads of an existing train.log
SAMPLES_TAIL_BYTES = 256 * 1024  # ... and of samples.jsonl (the screen shows the last steps only)
READ_CAP_BYTES = 4 * 2**20  # at most this much of one file per poll, so a burst never stalls the follower


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


class RunFeed:
    """Follows one run folder (metrics, samples, events, train.log, meta.json) or a single JSONL file.

    `poll()` runs in a worker thread and queues what it read; `drain()` runs on the UI side. The metrics
    file's existing history is read whole but thinned (`thin_history`); then only what is appended.
    """

    def __init__(self, target: Path, *, history_capacity: int = SERIES_CAPACITY) -> None:
        target = Path(target)
        self.target = target
        if target.is_file():
            self.folder: Path | None = None
            metrics_path = target
        else:
            self.folder = target
            metrics_path = target / METRICS_FILE
        self.metrics_path = metrics_path
        self.history_capacity = history_capacity
        self._metrics = FileTail(metrics_path)
        self._samples = self._events = self._log = None
        if self.folder is not None:
            self._samples = FileTail(target / SAMPLES_FILE, from_end=SAMPLES_TAIL_BYTES, max_bytes=READ_CAP_BYTES)
            self._events = FileTail(target / EVENTS_FILE, max_bytes=READ_CAP_BYTES)
            self._log = FileTail(target / LOG_FILE, from_end=LOG_TAIL_BYTES, max_bytes=READ_CAP_BYTES)
        self._meta_mtime: int | None = None
        self._lock = threading.Lock()
        self._pending = RunUpdate()
        self._loaded_history = False

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
        restarts = self._metrics.restarts
        lines = self._metrics.poll()
        if not self._loaded_history:
            lines, _ = thin_history(lines, self.history_capacity)
            self._loaded_history = True
        records = (parse_record(line, self.metrics_path) for line in lines)
        update.metrics = [r for r in records if r is not None and "data" in r]
        update.restarted = self._metrics.restarts != restarts
        if self.folder is not None:
            update.samples = self._samples.poll_records()
            update.events = self._events.poll_records()
            update.log_lines = [line.decode("utf-8", "replace") for line in self._log.poll()]
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
    while not stop():
        got = feed.poll()
        if got:
            post()
        delay = poll_interval
        if feed.pending_size() > backlog:
            delay = poll_interval * 4  # the handler has not drained yet: let it catch up
        time.sleep(delay)
