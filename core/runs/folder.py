"""Writing a run folder: its id, the resolved config, meta.json, and the JSONL files appended line by line.

Every backend writes through `RunDirectory`; see docs/run-format.md for each file and how it is written.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import UserError, shorten
from core.files import write_atomic
from core.runs.lock import LOCK_FILE, RunLock, release_lock
from core.runs.reading import last_step, read_jsonl

STATUSES = ("running", "finished", "failed", "stopped")
# What says which run a folder holds: never dropped when meta.json is rewritten (see `update_meta`).
IDENTITY_FIELDS = ("run_id", "backend", "mode", "started_at")
# What a resume attempt changes and puts back if it fails before it trains (see `mark_resumed`).
RESUME_FIELDS = ("status", "message", "pid", "host", "ended_at")
CONFIG_FILE, META_FILE, METRICS_FILE = "config.yaml", "meta.json", "metrics.jsonl"
SAMPLES_FILE, EVENTS_FILE, LOG_FILE = "samples.jsonl", "events.jsonl", "train.log"
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
META_MAX_BYTES = 2**20  # meta.json is a few hundred bytes; a bigger one is not ours
VERSION_PACKAGES = ("devops-rl", "torch", "transformers", "verl", "vllm", "trl", "textual")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id(mode: str, now: float | None = None) -> str:
    """`YYYYmmdd-HHMMSS-<mode>-<4 hex>` (local time `now`, default now): sorts by start time, safe as a folder name."""
    safe_mode = re.sub(r"[^A-Za-z0-9]+", "-", mode).strip("-") or "run"
    stamp = datetime.fromtimestamp(now) if now is not None else datetime.now()
    return f"{stamp.strftime('%Y%m%d-%H%M%S')}-{safe_mode}-{secrets.token_hex(2)}"


def read_meta(folder: Path) -> dict | None:
    """A run folder's meta.json; None when it is missing, unreadable, not a regular file (a FIFO, a link to
    /dev/zero), larger than META_MAX_BYTES or not a JSON object."""
    from core.files import read_regular

    try:
        meta = json.loads(read_regular(Path(folder) / META_FILE, META_MAX_BYTES))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def meta_problem(meta: dict) -> str | None:
    """What is wrong with meta.json's identity and status (`run_id: null`, `status: 5`), or None: a run whose
    meta.json says this is not resumed or rewritten, since it no longer says which run it is."""
    for key in IDENTITY_FIELDS:
        if not isinstance(meta.get(key), str) or not meta[key]:
            return f"'{key}' is {shorten(json.dumps(meta.get(key)), 40)}, not a non-empty string"
    if meta.get("status") not in STATUSES:
        return f"'status' is {shorten(json.dumps(meta.get('status')), 40)}, not one of {', '.join(STATUSES)}"
    return None


def check_free(path: Path) -> None:
    """UserError unless folder `path` can take a new run: it must not hold a run (a meta.json), nor files devops-rl did
    not write (no meta.json says a run owns them: someone's partial run, notes, a copied config), which a new run
    would overwrite (config.yaml) or append its rows after. Only a writer lock may be there."""
    if (path / META_FILE).exists() or (path / META_FILE).is_symlink():
        raise UserError(f"{shorten(path)}: already holds a run; pick another run id or folder")
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name != LOCK_FILE)
    if foreign:
        shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        raise UserError(f"{shorten(path)}: holds files devops-rl did not write ({shown}) and no meta.json; a new run "
                        "there would overwrite them: pick a new or empty folder")


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


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON line with a single write and flush it, so a crash loses at most this line."""
    line = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": sys.version.split()[0]}
    for name in VERSION_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


class RunDirectory:
    """One run's folder (`runs/<run_id>/`); see docs/run-format.md for every file in it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.run_id = self.path.name
        self._meta: dict = {}  # meta.json as last read or written, so a damaged file is rewritten whole
        self._before_resume: dict | None = None

    # ---- creating and opening ---------------------------------------------------------------

    @classmethod
    def create(cls, root: Path | None, *, mode: str, backend: str, config, run_id: str | None = None) -> RunDirectory:
        """Make a new run folder with its resolved config (secrets masked) and `running` metadata."""
        from core.log import mask_secrets
        from core.paths import runs_root, writable_dir

        root = Path(root) if root is not None else runs_root()
        run_id = run_id or new_run_id(mode)
        if not SAFE_ID.match(run_id):
            raise UserError(f"run id '{shorten(run_id)}': use letters, digits, '.', '_' and '-' only (at most 128 "
                            "characters)")
        path = root / run_id
        writable_dir(root, "the runs folder")
        if path.is_dir():
            check_free(path)  # before the lock file is put there: a folder that is not ours is left as it was
        writable_dir(path, "the run folder")
        run = cls(path)
        run.hold_lock()  # before looking for a run there: two processes creating the same folder, one wins
        try:
            check_free(path)  # again, under the lock: two processes creating the same folder, one wins
            (path / "checkpoints").mkdir(parents=True, exist_ok=True)
            (path / "eval").mkdir(exist_ok=True)
            config_text = config.to_yaml() if hasattr(config, "to_yaml") else str(config)
            write_atomic(path / CONFIG_FILE, mask_secrets(config_text))
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
        except BaseException:
            run.release_lock()  # whoever made the folder half-way, it is not being written now
            raise
        return run

    @classmethod
    def open(cls, spec: str | Path) -> RunDirectory:
        """An existing run by folder path, id under the runs folder or unique id prefix (`core.runs.resolve_run`)."""
        from core.runs.resolve import resolve_run

        return cls(resolve_run(spec))

    # ---- the single-writer lock ----------------------------------------------------------------

    def hold_lock(self) -> RunLock:
        """Hold this folder's writer lock for the rest of the process (a no-op when this process holds it); UserError
        naming the holder when another process writes the run. Every writer of a run folder takes it first."""
        return RunLock(self.path).acquire()

    def release_lock(self) -> None:
        """Give up the writer lock this process holds on the folder (if any)."""
        release_lock(self.path)

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
        from core.log import mask_nested

        append_jsonl(self.samples_path, {"step": int(step), "samples": mask_nested(list(samples))})

    def event(self, kind: str, **fields: Any) -> None:
        """A lifecycle event line: {"time": iso, "event": kind, ...fields}."""
        from core.log import mask_nested

        append_jsonl(self.events_path, {"time": now_iso(), "event": kind, **mask_nested(fields)})

    def meta(self) -> dict:
        """meta.json as a dict ({} when it cannot be read or is not a JSON object)."""
        meta = read_meta(self.path)
        if meta is not None:
            self._meta = meta
        return meta or {}

    def _write_meta(self, meta: dict) -> None:
        write_atomic(self.path / META_FILE, json.dumps(_finite(meta), indent=2, ensure_ascii=False) + "\n")
        self._meta = dict(meta)

    def update_meta(self, **fields: Any) -> dict:
        """Merge fields into meta.json (written atomically, so a reader never sees half a file).

        A meta.json damaged since this object last read it is rewritten from that reading, never without the
        run's identity; one damaged before this process ever read it is refused (UserError), not replaced.
        """
        meta = read_meta(self.path)
        if meta is None and (self.path / META_FILE).exists():
            if not any(self._meta.get(key) for key in IDENTITY_FIELDS):
                raise UserError(f"{shorten(self.path / META_FILE)}: not a JSON object (damaged?); it says which run "
                                "this is, so it is not rewritten: restore it, or start a new run")
            meta = self._meta
        meta = {**(meta or {}), **fields}
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

    def mark_resumed(self) -> None:
        """Status `running` (this process's pid and host) for a resume attempt, remembering what meta.json said, so
        that an attempt that fails before it trains puts it back (`undo_resume`): a finished run stays finished."""
        meta = self.meta()
        self._before_resume = {key: meta.get(key) for key in RESUME_FIELDS}
        self.set_status("running", "resumed")

    def undo_resume(self, reason: str) -> bool:
        """Put back the status a failed resume attempt found (`mark_resumed`), with a `warning` event saying why;
        False when this object made no resume attempt (the caller then records the failure itself)."""
        if self._before_resume is None:
            return False
        self.update_meta(**self._before_resume)
        self._before_resume = None
        self.event("warning", message=f"resume failed before training: {reason}")  # event() masks secrets
        return True

    def resume_started(self) -> None:
        """The resume attempt got as far as training: from here a failure is the run's (status `failed`)."""
        self._before_resume = None

    def truncate_metrics_after(self, step: int) -> None:
        """Drop metrics and samples past `step` (for --resume from that checkpoint); files are replaced atomically."""
        for path in (self.metrics_path, self.samples_path):
            if not path.exists():
                continue
            kept = [r for r in read_jsonl(path) if isinstance(r.get("step"), int) and r["step"] <= step]
            write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
