"""The run folder every backend writes and every viewer reads: config, metadata, metrics, samples, events.

Writers append whole lines and flush; readers (`read_jsonl`, `follow`) tolerate a partial last line and
files that were truncated or replaced, and read verl's `file` logger JSONL as well. See docs/run-format.md.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.errors import UserError

log = logging.getLogger(__name__)

STATUSES = ("running", "finished", "failed", "stopped")
EVENTS = ("started", "resumed", "checkpoint", "validation", "warning", "finished", "failed", "stopped")
CONFIG_FILE, META_FILE, METRICS_FILE = "config.yaml", "meta.json", "metrics.jsonl"
SAMPLES_FILE, EVENTS_FILE, LOG_FILE = "samples.jsonl", "events.jsonl", "train.log"
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
REWARD_KEYS = ("critic/score/mean", "reward/final/mean")  # training reward; validation is val/score/mean
VERSION_PACKAGES = ("devops-rl", "torch", "transformers", "verl", "vllm", "trl", "textual")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_id(mode: str) -> str:
    """`YYYYmmdd-HHMMSS-<mode>-<4 hex>`: sorts by start time and is safe as a folder name."""
    safe_mode = re.sub(r"[^A-Za-z0-9]+", "-", mode).strip("-") or "run"
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{safe_mode}-{secrets.token_hex(2)}"


def _finite(value: Any) -> Any:
    """JSON-safe values: non-finite floats become null (as verl's orjson logger writes them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _finite(value.item())
    return value


def _masked(value: Any) -> Any:
    """Every string inside nested dicts and lists passed through `mask_secrets`."""
    from core.log import mask_secrets

    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    return value


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON line with a single write and flush it, so a crash loses at most this line."""
    line = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": sys.version.split()[0]}
    for name in VERSION_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def pid_alive(pid) -> bool | None:
    """Whether a process with this id (from meta.json) exists on this machine; None when the id is
    missing or not a positive integer (0 or a negative id would signal a process group)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunDirectory:
    """One run's folder (`runs/<run_id>/`); see docs/run-format.md for every file in it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.run_id = self.path.name

    # ---- creating and opening ---------------------------------------------------------------

    @classmethod
    def create(cls, root: Path | None, *, mode: str, backend: str, config, run_id: str | None = None) -> RunDirectory:
        """Make a new run folder with its resolved config (secrets masked) and `running` metadata."""
        from core.log import mask_secrets
        from core.paths import runs_root

        root = Path(root) if root is not None else runs_root()
        run_id = run_id or new_run_id(mode)
        if not SAFE_ID.match(run_id):
            raise UserError(f"run id '{run_id}': use letters, digits, '.', '_' and '-' only (at most 128 characters)")
        path = root / run_id
        if (path / META_FILE).exists():
            raise UserError(f"{path}: already holds a run; pick another run id or folder")
        (path / "checkpoints").mkdir(parents=True, exist_ok=True)
        (path / "eval").mkdir(exist_ok=True)
        run = cls(path)
        config_text = config.to_yaml() if hasattr(config, "to_yaml") else str(config)
        _write_atomic(path / CONFIG_FILE, mask_secrets(config_text))
        for name in (METRICS_FILE, SAMPLES_FILE, EVENTS_FILE):
            (path / name).touch()
        run._write_meta({
            "run_id": run_id,
            "backend": backend,
            "mode": mode,
            "status": "running",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "versions": _versions(),
            "argv": [mask_secrets(arg) for arg in sys.argv],
            "started_at": now_iso(),
            "ended_at": None,
            "total_steps": None,
            "message": None,
        })
        run.event("started", mode=mode, backend=backend)
        return run

    @classmethod
    def open(cls, path_or_id: str | Path) -> RunDirectory:
        """An existing run by folder path, by id under the runs folder, or by a unique id prefix."""
        from core.paths import runs_root

        candidate = Path(path_or_id)
        if (candidate / META_FILE).is_file():
            return cls(candidate)
        root = runs_root()
        text = str(path_or_id)
        if (root / text / META_FILE).is_file():
            return cls(root / text)
        # SAFE_ID admits no glob characters, so the id can be used as a glob prefix as it is
        matches = sorted(p for p in root.glob(f"{text}*") if (p / META_FILE).is_file()) if SAFE_ID.match(text) else []
        if len(matches) == 1:
            return cls(matches[0])
        if len(matches) > 1:
            raise UserError(f"run '{text}' is ambiguous: {', '.join(p.name for p in matches[:4])}...; give more of the id")
        raise UserError(f"no run '{text}' (no {META_FILE} in {candidate} or under {root}); see 'devops-rl runs list'")

    # ---- files ------------------------------------------------------------------------------

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES_FILE

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS_FILE

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    # ---- writing ----------------------------------------------------------------------------

    def log_metrics(self, step: int, data: dict[str, float]) -> None:
        """One verl file-logger line: {"step": N, "data": {...}}."""
        append_jsonl(self.metrics_path, {"step": int(step), "data": data})

    def log_samples(self, step: int, samples: list[dict]) -> None:
        """A few of this step's prompts and responses with their rewards; secrets anywhere in them are masked
        (the reward's evidence quotes answers, and a hard-coded secret is exactly what it quotes)."""
        append_jsonl(self.samples_path, {"step": int(step), "samples": _masked(list(samples))})

    def event(self, kind: str, **fields: Any) -> None:
        """A lifecycle event line: {"time": iso, "event": kind, ...fields}."""
        append_jsonl(self.events_path, {"time": now_iso(), "event": kind, **_masked(fields)})

    def meta(self) -> dict:
        """meta.json as a dict ({} when it cannot be read)."""
        try:
            return json.loads((self.path / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _write_meta(self, meta: dict) -> None:
        _write_atomic(self.path / META_FILE, json.dumps(_finite(meta), indent=2, ensure_ascii=False) + "\n")

    def update_meta(self, **fields: Any) -> dict:
        """Merge fields into meta.json (written atomically, so a reader never sees half a file)."""
        meta = self.meta()
        meta.update(fields)
        self._write_meta(meta)
        return meta

    def set_status(self, status: str, message: str | None = None) -> None:
        """running | finished | failed | stopped; a final status stamps ended_at and the last step."""
        from core.log import mask_secrets

        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        fields: dict[str, Any] = {"status": status, "message": mask_secrets(message) if message else message}
        if status == "running":
            fields.update(pid=os.getpid(), host=socket.gethostname(), ended_at=None)
        else:
            fields.update(ended_at=now_iso(), total_steps=last_step(self.metrics_path))
        self.update_meta(**fields)

    def truncate_metrics_after(self, step: int) -> None:
        """Drop metrics and samples past `step` (for --resume from that checkpoint); files are replaced atomically."""
        for path in (self.metrics_path, self.samples_path):
            if not path.exists():
                continue
            kept = [r for r in read_jsonl(path) if isinstance(r.get("step"), int) and r["step"] <= step]
            _write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))


# ---- reading ---------------------------------------------------------------------------------------


def _parse_line(raw: bytes, path: Path) -> dict | None:
    try:
        record = json.loads(raw)
    except ValueError:
        log.debug("%s: skipping a line that is not JSON: %r", path, raw[:80])
        return None
    return record if isinstance(record, dict) else None


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON record in a file ([] if missing); a partial or broken line is skipped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    records = []
    loads = json.loads
    for line in data.decode("utf-8", "replace").split("\n"):  # one decode: json.loads(str) beats json.loads(bytes)
        try:
            record = loads(line)
        except ValueError:
            if line.strip():
                log.debug("%s: skipping a line that is not JSON: %r", path, line[:80])
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def last_step(metrics_path: Path) -> int | None:
    steps = [r["step"] for r in read_jsonl(metrics_path) if isinstance(r.get("step"), int)]
    return max(steps) if steps else None


_HEAD_BYTES = 64


class FileTail:
    """Non-blocking reader of the complete lines appended to a file since the last `poll()`.

    Waits for the file to appear; keeps a partial last line until its newline arrives; when the file is
    replaced (new inode), truncated (shrinks) or rewritten in place (its first bytes change), starts again
    from the top and counts it in `restarts`.
    """

    def __init__(self, path: Path, *, from_start: bool = True) -> None:
        self.path = Path(path)
        self.restarts = 0
        self._skip_existing = not from_start
        self._handle = None
        self._identity: tuple[int, int] | None = None
        self._position = 0
        self._head = b""
        self._pending = b""

    def poll(self) -> list[bytes]:
        """The complete lines that arrived since the last call (possibly after a restart)."""
        if self._handle is not None and self._restarted():
            self.close()
            self.restarts += 1
        if self._handle is None and not self._open():
            return []
        chunk = self._handle.read()
        if not chunk:
            return []
        self._position += len(chunk)
        if len(self._head) < _HEAD_BYTES:
            self._head = os.pread(self._handle.fileno(), min(_HEAD_BYTES, self._position), 0)
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        return [raw for raw in data[:cut].split(b"\n") if raw.strip()]

    def _open(self) -> bool:
        try:
            self._handle = open(self.path, "rb")  # noqa: SIM115 - kept open across polls
        except FileNotFoundError:
            return False
        st = os.fstat(self._handle.fileno())
        self._identity, self._pending = (st.st_dev, st.st_ino), b""
        self._position = st.st_size if self._skip_existing else 0
        self._skip_existing = False
        self._handle.seek(self._position)
        self._head = os.pread(self._handle.fileno(), min(_HEAD_BYTES, self._position), 0) if self._position else b""
        return True

    def _restarted(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # deleted: keep the open file until a new one appears
        if (st.st_dev, st.st_ino) != self._identity or st.st_size < self._position:
            return True
        return bool(self._head) and os.pread(self._handle.fileno(), len(self._head), 0) != self._head

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class JsonlTail(FileTail):
    """A `FileTail` that parses each line as a JSON object (lines that are not are skipped)."""

    def poll_records(self) -> list[dict]:
        records = []
        for raw in self.poll():
            record = _parse_line(raw, self.path)
            if record is not None:
                records.append(record)
        return records


def follow(
    path: Path,
    *,
    from_start: bool = True,
    poll_interval: float = 0.2,
    stop: Callable[[], bool] | None = None,
    on_restart: Callable[[], None] | None = None,
) -> Iterator[dict]:
    """Yield JSON records as lines are appended to `path`, until `stop()` is true once all is read.

    Tolerates a partial last line, and a file that is replaced, truncated or rewritten: then it reads the
    file again from the start, calling `on_restart()` first so the caller can drop what it had.
    """
    tail = JsonlTail(path, from_start=from_start)
    restarts = 0
    try:
        while True:
            records = tail.poll_records()
            if tail.restarts != restarts:
                restarts = tail.restarts
                if on_restart is not None:
                    on_restart()
            if records:
                yield from records
                continue
            if stop is not None and stop():
                return
            time.sleep(poll_interval)
    finally:
        tail.close()


def follow_metrics(path: Path, **kwargs) -> Iterator[tuple[int, dict[str, Any]]]:
    """(step, data) pairs from a metrics file in verl's file-logger format."""
    for record in follow(path, **kwargs):
        step, data = record.get("step"), record.get("data")
        if isinstance(step, int) and isinstance(data, dict):
            yield step, data


# ---- listing -------------------------------------------------------------------------------------


@dataclass
class RunSummary:
    """One line of `runs list`: what a run is and how far it got."""

    run_id: str
    path: Path
    status: str
    mode: str
    backend: str
    started_at: str | None
    ended_at: str | None
    steps: int | None
    last_reward: float | None
    best_reward: float | None
    message: str | None
    alive: bool | None  # for running runs on this host: whether the process still exists

    @property
    def shown_status(self) -> str:
        """The status, marking a `running` run whose process is gone (killed) as `running?`."""
        return "running?" if self.status == "running" and self.alive is False else self.status


def reward_of(data: dict) -> float | None:
    for key in REWARD_KEYS:
        value = data.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def summarize(path: Path) -> RunSummary:
    run = RunDirectory(path)
    meta = run.meta()
    steps, rewards = None, []
    for record in read_jsonl(run.metrics_path):
        data = record.get("data")
        if isinstance(record.get("step"), int) and isinstance(data, dict):
            steps = max(steps or 0, record["step"])
            reward = reward_of(data)
            if reward is not None:
                rewards.append(reward)
    alive = None
    if meta.get("status") == "running" and meta.get("host") == socket.gethostname():
        alive = pid_alive(meta.get("pid"))
    return RunSummary(
        run_id=meta.get("run_id") or path.name,
        path=path,
        status=meta.get("status", "unknown"),
        mode=meta.get("mode", "?"),
        backend=meta.get("backend", "?"),
        started_at=meta.get("started_at"),
        ended_at=meta.get("ended_at"),
        steps=steps,
        last_reward=rewards[-1] if rewards else None,
        best_reward=max(rewards) if rewards else None,
        message=meta.get("message"),
        alive=alive,
    )


def list_runs(root: Path | None = None) -> list[RunSummary]:
    """Every run folder under the runs root (those with a meta.json), oldest first by id."""
    from core.paths import runs_root

    root = Path(root) if root is not None else runs_root()
    if not root.is_dir():
        return []
    return [summarize(p) for p in sorted(root.iterdir()) if (p / META_FILE).is_file()]
