"""The eval results file (`eval_results_<timestamp>.json`): its summary, its checked reading, and its writing,
rewritten atomically after each task so an interrupted eval keeps what finished and `--resume` completes it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from core.errors import UserError
from core.files import read_bytes, read_regular, write_atomic
from core.log import mask_secrets

RESULTS_PREFIX = "eval_results_"
FORMAT_VERSION = 1


class _Checked(BaseModel):
    model_config = ConfigDict(strict=True)  # unknown keys are kept (newer writers may add some), wrong types are not


class _Breakdown(_Checked):
    dimensions: dict[str, float] = {}
    penalties: dict[str, float] = {}


class _Entry(_Checked):
    task_id: str
    type: str | None = None
    difficulty: str | None = None
    reward: float | None = None
    breakdown: _Breakdown | None = None
    elapsed_seconds: float | None = None
    answer: str | None = None
    usage: dict[str, int] = {}
    error: str | None = None


class _Summary(_Checked):
    mean_reward: float | None = None
    count: int = 0
    failures: int = 0
    by_type: dict[str, float | None] = {}
    by_difficulty: dict[str, float | None] = {}
    by_dimension: dict[str, float | None] = {}
    by_penalty: dict[str, float | None] = {}
    wall_time_s: float = 0.0


class _ResultsData(_Checked):
    summary: _Summary
    results: list[_Entry]
    settings: dict[str, Any] | None = None
    task_ids: list[str] = []
    status: str | None = None


def read_results(path: Path, hint: str) -> dict:
    """A results file's data, checked key by key; a one-line UserError naming the file (and key) ending in `hint`."""
    path = Path(path)
    try:
        data = json.loads(read_bytes(path, "file"))
    except UserError as exc:  # missing, a FIFO or device, too large, unreadable
        raise UserError(f"{exc}; {hint}") from None
    except ValueError as exc:
        raise UserError(f"{path}: not readable JSON ({str(exc).splitlines()[0]}); {hint}") from None
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict) or not isinstance(data.get("results"), list):
        raise UserError(f"{path}: not an eval results file (needs 'summary' and 'results'); {hint}")
    try:
        _ResultsData.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        raise UserError(f"{path}: {where}: {first['msg'].lower()} (got {first['input']!r:.60}); {hint}") from None
    return data


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def summarize(results: list[dict], *, total: int | None = None, wall_time_s: float = 0.0) -> dict[str, Any]:
    """The `summary` of a results list: means overall, per type/difficulty/dimension/penalty, counts, tokens."""
    scored = [r for r in results if r.get("reward") is not None]
    by: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in ("type", "difficulty", "dimension", "penalty")}
    for entry in scored:
        by["type"][entry.get("type") or "?"].append(entry["reward"])
        by["difficulty"][entry.get("difficulty") or "?"].append(entry["reward"])
        breakdown = entry.get("breakdown") or {}
        for dim, value in (breakdown.get("dimensions") or {}).items():
            by["dimension"][dim].append(float(value))
        for pen, value in (breakdown.get("penalties") or {}).items():
            by["penalty"][pen].append(float(value))
    tokens = {"prompt": 0, "completion": 0, "total": 0}
    for entry in results:
        usage = entry.get("usage") or {}
        tokens["prompt"] += int(usage.get("prompt_tokens", 0))
        tokens["completion"] += int(usage.get("completion_tokens", 0))
        tokens["total"] += int(usage.get("total_tokens", 0))
    rewards = [r["reward"] for r in scored]
    return {
        "mean_reward": _mean(rewards),
        "min_reward": min(rewards) if rewards else None,
        "max_reward": max(rewards) if rewards else None,
        "count": len(scored),
        "failures": len(results) - len(scored),
        "total": total if total is not None else len(results),
        "by_type": {k: _mean(v) for k, v in sorted(by["type"].items())},
        "count_by_type": {k: len(v) for k, v in sorted(by["type"].items())},
        "by_difficulty": {k: _mean(v) for k, v in sorted(by["difficulty"].items())},
        "by_dimension": {k: _mean(v) for k, v in by["dimension"].items()},
        "by_penalty": {k: _mean(v) for k, v in by["penalty"].items()},
        "wall_time_s": round(wall_time_s, 3),
        "mean_elapsed_s": _mean([float(r.get("elapsed_seconds") or 0.0) for r in scored]),
        "tokens": tokens,
    }


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_results_path(folder: Path) -> Path:
    """`folder/eval_results_<UTC timestamp>.json`, unique even when two evals start in the same second."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    path = folder / f"{RESULTS_PREFIX}{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{RESULTS_PREFIX}{stamp}-{n}.json"
    return path


class ResultsFile:
    """One eval's results on disk, always valid JSON: settings, planned task ids, summary and results."""

    def __init__(self, path: Path, data: dict, fallbacks: list[Path] | None = None) -> None:
        self.path = Path(path)
        self.data = data
        self.fallbacks = list(fallbacks) if fallbacks is not None else [Path.cwd(), Path(tempfile.gettempdir())]
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, settings: dict, task_ids: list[str]) -> ResultsFile:
        if path.exists():
            raise UserError(f"--out: {path} already exists; pick another file or add --resume to complete it")
        data = {"format": FORMAT_VERSION, "status": "running", "created_at": _now_iso(), "updated_at": _now_iso(),
                "settings": settings, "task_ids": list(task_ids), "summary": summarize([], total=len(task_ids)), "results": []}
        return cls(path, data)  # written with the first result, so a fatal first request leaves no file

    @classmethod
    def load(cls, path: Path) -> ResultsFile:
        return cls(path, read_results(path, "start a new eval without --resume"))

    @property
    def done_ids(self) -> set[str]:
        """Tasks with a scored answer (failed ones are tried again on resume)."""
        return {r["task_id"] for r in self.data["results"] if r.get("reward") is not None}

    @property
    def wall_time_s(self) -> float:
        return float(self.data["summary"].get("wall_time_s") or 0.0)

    def add(self, entry: dict, wall_time_s: float) -> None:
        with self._lock:
            results = [r for r in self.data["results"] if r["task_id"] != entry["task_id"]]
            results.append(entry)
            self.data["results"] = results
            self._update(wall_time_s)
            self._write()

    def finish(self, status: str, wall_time_s: float) -> None:
        with self._lock:
            if status != "complete" and not self.data["results"] and not self.path.exists():
                return
            self.data["status"] = status
            self._update(wall_time_s)
            self._write()

    def _update(self, wall_time_s: float) -> None:
        order = {task_id: i for i, task_id in enumerate(self.data.get("task_ids", []))}
        self.data["results"].sort(key=lambda r: order.get(r["task_id"], len(order)))
        self.data["updated_at"] = _now_iso()
        self.data["summary"] = summarize(self.data["results"], total=len(self.data.get("task_ids", [])), wall_time_s=wall_time_s)

    def to_json(self) -> str:
        """One line per top-level key and per result: readable, and fast (the C encoder; `indent` is pure Python)."""
        head = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in self.data.items() if k != "results"]
        results = ",\n".join(json.dumps(r, ensure_ascii=False) for r in self.data["results"])
        return "{\n" + ",\n".join(head) + ',\n"results": [\n' + results + "\n]}\n"

    def save(self) -> None:
        """Write the whole file atomically (temp file, fsync, rename): a crash leaves the previous version."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, mask_secrets(self.to_json(), patterns=False))  # the environment's API keys

    def _write(self) -> None:
        """`save()`; when that place cannot be written, save into the first fallback folder that can and stop the
        eval with a UserError naming both, so no computed answer is lost."""
        try:
            self.save()
        except OSError as exc:
            wanted, reason = self.path, exc.strerror or str(exc)
            for folder in self.fallbacks:
                if folder.absolute() == wanted.parent.absolute():
                    continue
                self.path = new_results_path(folder) if (folder / wanted.name).exists() else folder / wanted.name
                try:
                    self.save()
                except OSError:
                    continue
                raise UserError(f"{wanted}: cannot write the results ({reason}); the {len(self.data['results'])} finished "
                                f"so far are in {self.path}; continue with 'devops-rl eval --resume --out {self.path}'") from None
            self.path = wanted
            raise UserError(f"{wanted}: cannot write the results ({reason}), nor in {', '.join(map(str, self.fallbacks))}; "
                            "free some space or pass a writable --out") from None


def check_writable(folder: Path, what: str) -> None:
    """A UserError now, before any request is sent, when no results file could be created in `folder`."""
    probe = Path(folder).absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{what} {folder}: {probe} is a file, not a folder; pass a .json path in a folder you can write")
    try:
        handle, name = tempfile.mkstemp(dir=probe, prefix=".devops-rl-write-check-")
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        raise UserError(f"{what} {folder}: cannot write there ({exc.strerror or exc}); "
                        "pass --out with a folder you can write") from None


def find_resumable(folder: Path) -> Path | None:
    """The newest results file in `folder` that did not complete."""
    for path in sorted(folder.glob(f"{RESULTS_PREFIX}*.json"), reverse=True):
        try:
            status = json.loads(read_regular(path)).get("status")
        except (OSError, ValueError):
            continue
        if status != "complete":
            return path
    return None


def result_entry(task, answer=None, error: str | None = None, elapsed: float = 0.0) -> dict[str, Any]:
    """One `results` entry: task id/type/difficulty, reward, breakdown, elapsed seconds, answer, usage."""
    entry: dict[str, Any] = {"task_id": task.id, "type": task.type, "difficulty": task.difficulty}
    if answer is not None:
        entry.update(reward=round(float(answer.breakdown.final_reward), 6), breakdown=answer.breakdown.to_dict(),
                     elapsed_seconds=round(answer.elapsed, 3), answer=answer.text, usage=answer.usage,
                     finish_reason=answer.finish_reason)
    else:
        entry.update(reward=None, breakdown=None, elapsed_seconds=round(elapsed, 3), answer=None, usage={}, error=error)
    return entry


