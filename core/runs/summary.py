"""What a run is and how far it got, for `runs list`, `runs show`, `tail` and the cockpit's Runs and Live screens.

One status for every face: `run_status` gives the word (a `running` run whose process is gone from this host is
`crashed`), `status_text` the line: finished / stopped at N of M / failed: cause / crashed at step N / running.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.runs.folder import CONFIG_FILE, META_FILE, METRICS_FILE, read_meta
from core.runs.process import on_this_host, pid_alive
from core.runs.reading import FileTail, metric_rows

REWARD_KEYS = ("critic/score/mean", "reward/final/mean")  # training reward; validation is val/score/mean
GONE = "crashed"  # the status of a `running` run whose process no longer exists
PLANNED_KEY = "training/total_steps"  # the planned step count, logged by the trainer with every step


def reward_of(data: dict) -> float | None:
    """A metrics row's training reward (`critic/score/mean`, else `reward/final/mean`), if finite."""
    for key in REWARD_KEYS:
        value = data.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def run_alive(meta: dict) -> bool | None:
    """For a `running` run on this host: whether its process still exists. None when that cannot be told
    (another host, where the same pid means another process; no pid; or the run is not running)."""
    if meta.get("status") != "running" or not on_this_host(meta):
        return None
    return pid_alive(meta.get("pid"))


def shown_status(status: str, alive: bool | None) -> str:
    return GONE if status == "running" and alive is False else status


def run_status(meta: dict) -> str:
    """The status word for this meta.json: its `status`, or `crashed` when a running run's process is gone."""
    status = str(meta.get("status") or "unknown")
    return shown_status(status, run_alive(meta))


def status_text(status: str, meta: dict, steps: int | None = None, planned: int | None = None) -> str:
    """The status as one line: `finished`, `stopped at N of M`, `failed: cause`, `crashed at step N`, `running`.

    `status` is `run_status(meta)` (or a RunSummary's), `steps` the last step logged, `planned` the planned total.
    """
    if status == "stopped":
        if steps is None:
            return "stopped before step 1"
        return f"stopped at {steps} of {planned}" if planned else f"stopped at step {steps}"
    if status == "failed":
        cause = str(meta.get("message") or "").strip().splitlines()
        return f"failed: {cause[0]}" if cause else "failed (see train.log)"
    if status == GONE:
        return f"crashed at step {steps}" if steps is not None else "crashed before step 1"
    return status


def planned_steps(meta: dict, logged: int | None, folder: Path | None = None) -> int | None:
    """The planned total: logged by the trainer, else meta.json's while running (a final status stamps the
    last step there), else the config's trainer.total_training_steps."""
    if logged:
        return logged
    total = meta.get("total_steps")
    if meta.get("status") == "running" and isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    if folder is None:
        return None
    try:
        mtime = (Path(folder) / CONFIG_FILE).stat().st_mtime_ns
    except OSError:
        return None
    return _configured_steps(str(folder), mtime)


@functools.lru_cache(maxsize=256)
def _configured_steps(folder: str, mtime: int) -> int | None:
    """trainer.total_training_steps of a run's config.yaml (cached per file version: listings repeat every few s)."""
    import yaml

    from core.files import read_regular

    try:
        config = yaml.safe_load(read_regular(Path(folder) / CONFIG_FILE).decode("utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return None
    value = (config.get("trainer") or {}).get("total_training_steps") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch of an ISO 8601 time (UTC when it names no zone) or a number; None otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


DIGEST_READ_BYTES = 8 * 2**20  # a long history is read in pieces of this size, so its rows are never all in memory


class MetricsDigest:
    """The last step, last and best reward of a metrics file, kept up to date by reading only what was appended."""

    def __init__(self, path: Path) -> None:
        self.tail = FileTail(path, max_bytes=DIGEST_READ_BYTES)
        self.steps: int | None = None
        self.last_reward: float | None = None
        self.best_reward: float | None = None
        self.planned: int | None = None  # `training/total_steps` of the last row that has it

    def update(self) -> None:
        while True:
            restarts = self.tail.restarts
            records = self.tail.poll_records()
            if self.tail.restarts != restarts:  # replaced or rewritten (--resume): the records are the new file's
                self.steps = self.last_reward = self.best_reward = self.planned = None
            if not records:
                return
            for step, data in metric_rows(records):
                self.steps = step if self.steps is None else max(self.steps, step)
                reward = reward_of(data)
                if reward is not None:
                    self.last_reward = reward
                    self.best_reward = reward if self.best_reward is None else max(self.best_reward, reward)
                planned = data.get(PLANNED_KEY)
                if isinstance(planned, (int, float)) and not isinstance(planned, bool) and planned > 0:
                    self.planned = int(planned)


@dataclass
class RunSummary:
    """One line of `runs list` and of the cockpit's Runs table."""

    run_id: str
    path: Path
    status: str  # as meta.json says
    mode: str
    backend: str
    started_at: str | None
    ended_at: str | None
    steps: int | None
    total_steps: int | None
    last_reward: float | None
    best_reward: float | None
    message: str | None
    alive: bool | None  # see run_alive
    meta: dict
    planned_steps: int | None = None  # see planned_steps

    @property
    def shown_status(self) -> str:
        """The status word (`crashed` for a running run whose process is gone)."""
        return shown_status(self.status, self.alive)

    @property
    def status_text(self) -> str:
        """The status line: finished / stopped at N of M / failed: cause / crashed at step N / running."""
        return status_text(self.shown_status, self.meta, self.steps, self.planned_steps)

    @property
    def started(self) -> float | None:
        return timestamp(self.started_at)


def summarize(path: Path, *, meta: dict | None = None, digest: MetricsDigest | None = None) -> RunSummary:
    """Summarise one run folder (`meta` and `digest`: what the caller already read, to be brought up to date)."""
    path = Path(path)
    meta = (read_meta(path) or {}) if meta is None else meta
    digest = digest or MetricsDigest(path / METRICS_FILE)
    digest.update()
    total = meta.get("total_steps")
    return RunSummary(
        run_id=str(meta.get("run_id") or path.name),
        path=path,
        status=str(meta.get("status") or "unknown"),
        mode=str(meta.get("mode") or "?"),
        backend=str(meta.get("backend") or "?"),
        started_at=meta.get("started_at"),
        ended_at=meta.get("ended_at"),
        steps=digest.steps,
        total_steps=int(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else None,
        last_reward=digest.last_reward,
        best_reward=digest.best_reward,
        message=meta.get("message"),
        alive=run_alive(meta),
        meta=meta,
        planned_steps=planned_steps(meta, digest.planned, path if meta.get("status") in ("stopped", "failed") else None),
    )


def list_runs(root: Path | None = None, cache: dict | None = None) -> list[RunSummary]:
    """Every run folder (one holding meta.json) under the runs root, oldest first by id.

    With `cache` (a dict the caller keeps between calls), meta.json is read again only when it changed and
    metrics only from where the last call stopped; whether a running process is alive is checked every time.
    """
    from core.paths import runs_root

    root = Path(root) if root is not None else runs_root()
    if not root.is_dir():
        return []
    cache = {} if cache is None else cache
    summaries = []
    for path in sorted(root.iterdir()):
        meta_path = path / META_FILE
        try:
            stat = meta_path.stat()
        except OSError:
            continue  # not a run folder (or a file)
        fingerprint = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        known = cache.get(path)
        if known is None or known[0] != fingerprint:
            known = (fingerprint, read_meta(path) or {}, known[2] if known else MetricsDigest(path / METRICS_FILE))
            cache[path] = known
        summaries.append(summarize(path, meta=known[1], digest=known[2]))
    for gone in set(cache) - {s.path for s in summaries}:  # deleted folders
        del cache[gone]
    return summaries
