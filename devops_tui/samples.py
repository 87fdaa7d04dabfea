"""Every step's samples of a run, for the sample inspector: an index of samples.jsonl (or of verl's rollout dumps)
that reads one step, or one prompt across steps, back on demand instead of keeping the file in memory.

No Textual here: a worker thread refreshes and loads, the screen only shows what a load returned.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from core.runs import FileTail, parse_record, read_jsonl

READ_CAP_BYTES = 8 * 2**20  # of samples.jsonl per refresh: a long history is indexed in a few refreshes
_STEP = re.compile(rb'^\{\s*"step"\s*:\s*(-?\d+)')
_TASK = re.compile(rb'"task_id"\s*:\s*"((?:[^"\\]|\\.)*)"')


def sample_key(sample: dict) -> str:
    """What makes two samples "the same prompt": the task id, else the prompt text (verl dumps have no id)."""
    return str(sample.get("task_id") or sample.get("prompt") or "")


def rollout_sample(row: dict) -> dict:
    """A verl `rollout_data_dir/{step}.jsonl` row (input, output, score, gts, extra reward info) as a sample;
    numeric extras named like the reward's dimensions and penalties become its breakdown."""
    from core.rewards import DIMENSIONS, PENALTIES

    task_id = None
    gts = row.get("gts")
    if isinstance(gts, str) and gts.startswith("{"):
        try:
            task_id = (json.loads(gts).get("task") or {}).get("id")
        except (ValueError, AttributeError):
            task_id = None
    sample = {"task_id": task_id, "group": row.get("uid"), "prompt": row.get("input"), "response": row.get("output"),
              "reward": row.get("score"), "breakdown": None}
    dims = {k: row[k] for k in DIMENSIONS if isinstance(row.get(k), (int, float))}
    pens = {k: row[k] for k in PENALTIES if isinstance(row.get(k), (int, float))}
    if dims or pens:
        sample["breakdown"] = {"final_reward": row.get("score"), "dimensions": dims, "penalties": pens}
    return sample


class SampleIndex:
    """Where each step's line of samples.jsonl starts (`FileTail.poll_spans`), and which steps hold each task.

    `refresh()` indexes what was appended (a replaced or truncated file starts the index again); `load(step)` and
    `load_prompt(key)` read lines back with `os.pread`. All three may run in worker threads.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._tail = FileTail(self.path, max_bytes=READ_CAP_BYTES)
        self._lock = threading.Lock()
        self._spans: dict[int, tuple[int, int]] = {}
        self._tasks: dict[str, list[int]] = {}
        self.version = 0

    def refresh(self) -> bool:
        restarts = self._tail.restarts
        spans = self._tail.poll_spans()
        with self._lock:
            if self._tail.restarts != restarts:
                self._spans.clear()
                self._tasks.clear()
                self.version += 1
            for offset, line in spans:
                match = _STEP.match(line)
                if match:
                    step = int(match.group(1))
                else:  # written by another tool with other key order: parse it once
                    record = parse_record(line, self.path)
                    if record is None or not isinstance(record.get("step"), int):
                        continue
                    step = record["step"]
                self._spans[step] = (offset, len(line))
                for raw in dict.fromkeys(_TASK.findall(line)):
                    steps = self._tasks.setdefault(raw.decode("utf-8", "replace"), [])
                    if not steps or steps[-1] != step:
                        steps.append(step)
            if spans:
                self.version += 1
        return bool(spans)

    def steps(self) -> list[int]:
        with self._lock:
            return sorted(self._spans)

    def _read(self, step: int) -> list[dict]:
        with self._lock:
            span = self._spans.get(step)
        if span is None:
            return []
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return []
        try:
            line = os.pread(fd, span[1], span[0])
        finally:
            os.close(fd)
        record = parse_record(line, self.path)
        samples = record.get("samples") if record is not None and record.get("step") == step else None
        return [s for s in samples if isinstance(s, dict)] if isinstance(samples, list) else []

    def load(self, step: int) -> list[dict]:
        """The samples logged at `step` ([] when there are none, or the file changed under the index)."""
        return self._read(step)

    def load_prompt(self, key: str) -> list[tuple[int, list[dict]]]:
        """(step, samples of that prompt) for every step that has the task id (or prompt text) `key`."""
        with self._lock:
            steps = list(self._tasks.get(key, ())) or sorted(self._spans)
        out = []
        for step in steps:
            matching = [s for s in self._read(step) if sample_key(s) == key]
            if matching:
                out.append((step, matching))
        return out


class RolloutSamples:
    """The same reading for a verl `rollout_data_dir`: one `{step}.jsonl` per step, one answer per line."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder)
        self.version = 0
        self._steps: list[int] = []

    def refresh(self) -> bool:
        try:
            steps = sorted(int(p.stem) for p in self.path.glob("*.jsonl") if p.stem.isdigit())
        except OSError:
            steps = []
        changed = steps != self._steps
        if changed:
            self._steps = steps
            self.version += 1
        return changed

    def steps(self) -> list[int]:
        return list(self._steps)

    def load(self, step: int) -> list[dict]:
        return [rollout_sample(row) for row in read_jsonl(self.path / f"{step}.jsonl")]

    def load_prompt(self, key: str) -> list[tuple[int, list[dict]]]:
        out = []
        needle = json.dumps(key, ensure_ascii=False)[1:-1].encode("utf-8")[:200]
        for step in self.steps():
            path = self.path / f"{step}.jsonl"
            try:
                if needle not in path.read_bytes():
                    continue
            except OSError:
                continue
            matching = [s for s in self.load(step) if sample_key(s) == key]
            if matching:
                out.append((step, matching))
        return out


def find_rollout_dir(target: Path) -> Path | None:
    """verl's `trainer.rollout_data_dir` for a run: `verl/rollouts` in a devops-rl run folder; beside a bare
    file-logger JSONL a `rollouts`/`rollout_data` folder (or any folder of `{step}.jsonl` dumps); the folder
    itself when it holds such dumps."""
    target = Path(target)

    def has_dumps(folder: Path) -> bool:
        try:
            return folder.is_dir() and any(p.stem.isdigit() for p in folder.glob("*.jsonl"))
        except OSError:
            return False

    if target.is_dir():
        for candidate in (target / "verl" / "rollouts", target):
            if has_dumps(candidate):
                return candidate
        return None
    parent = target.parent
    named = [parent / name for name in ("rollouts", "rollout_data", "rollout_data_dir")]
    try:
        others = sorted(p for p in parent.iterdir() if p.is_dir() and p not in named)
    except OSError:
        others = []
    return next((folder for folder in named + others if has_dumps(folder)), None)


def rubric_of(breakdown: dict | None) -> tuple[float | None, list[dict]]:
    """(rubric score, criteria) of a breakdown, whether `rubric` is the reward's dict or a bare criteria list."""
    rubric: Any = (breakdown or {}).get("rubric")
    if isinstance(rubric, list):
        return None, [c for c in rubric if isinstance(c, dict)]
    if isinstance(rubric, dict):
        score = rubric.get("score")
        criteria = rubric.get("criteria") or []
        return (float(score) if isinstance(score, (int, float)) else None), [c for c in criteria if isinstance(c, dict)]
    return None, []
