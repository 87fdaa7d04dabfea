"""Per-dimension reward curves for a verl run this project did not start, from verl's `rollout_data_dir` dumps.

verl writes `{step}.jsonl` (input, output, score, gts, and the reward's extra info when the trainer keeps it).
When the extras carry the dimensions, their means are the curves; otherwise up to `SCORED_PER_STEP` answers of
each step are scored by `core.rewards` in a separate process (the cockpit's event loop never waits for it).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from core.runs import read_jsonl

log = logging.getLogger(__name__)

SCORED_PER_STEP = 32
SETTLE_S = 1.0  # verl writes a dump from a thread: leave a file alone until it has been quiet this long
IN_FLIGHT = 4  # steps being scored at once
SCORE_KEY = "rollout/score/mean"  # the mean `score` of a step's dump: what verl's reward gave


def _task_for(row: dict, by_desc: dict[str, dict]) -> dict | None:
    """The task an answer was for: our ground-truth JSON in `gts` (the task, or its id in the run's tasks file),
    else the task whose prompt is in `input`."""
    from core.training.verl_backend.reward_fn import grading_inputs

    gts = row.get("gts")
    if isinstance(gts, str) and gts.startswith("{"):
        try:
            return grading_inputs(gts, None)[0]
        except (ValueError, OSError):  # another exporter's ground truth, or a tasks file that is gone
            pass
    text = str(row.get("input") or "")
    return next((task for desc, task in by_desc.items() if desc and desc in text), None)


_TASKS: dict[str, dict] | None = None


def score_rows(rows: list[dict]) -> dict[str, float]:
    """`reward/<name>/mean` of the rows whose task is known (runs in the scoring process)."""
    global _TASKS
    from core.rewards import DIMENSIONS, PENALTIES
    from core.rewards.pool import reward_means, score_chunk

    if _TASKS is None:
        from tasks import load_tasks

        _TASKS = {t.desc.strip(): t.to_dict() for t in load_tasks()}
    jobs = []
    for row in rows:
        task = _task_for(row, _TASKS)
        if task is not None:
            jobs.append((str(row.get("output") or ""), task, {}, None, 0.0))
    return reward_means(score_chunk(jobs), DIMENSIONS, PENALTIES) if jobs else {}


def extra_means(rows: list[dict]) -> dict[str, float]:
    """`reward/<name>/mean` from the dumps' own extra info, when it names the reward's dimensions and penalties."""
    from core.rewards import DIMENSIONS, PENALTIES

    out = {}
    for name in (*DIMENSIONS, *PENALTIES, "rubric"):
        values = [row[name] for row in rows if isinstance(row.get(name), (int, float)) and not isinstance(row.get(name), bool)
                  and not (name == "rubric" and row.get("rubric_criteria") == 0)]  # 0 criteria: no rubric, no score
        if values:
            out[f"reward/{name}/mean"] = sum(values) / len(values)
    return out


def evenly(rows: list[Any], count: int) -> list[Any]:
    if len(rows) <= count:
        return rows
    stride = len(rows) / count
    return [rows[int(i * stride)] for i in range(count)]


class RolloutCurves:
    """Turns new dump files into metric rows (`{"step", "data"}`); `poll()` never blocks on scoring."""

    def __init__(self, folder: Path, *, scored_per_step: int = SCORED_PER_STEP) -> None:
        self.folder = Path(folder)
        self.scored_per_step = scored_per_step
        self._seen: set[tuple[str, int]] = set()
        self._pending: dict[int, tuple[Future, dict[str, float]]] = {}
        self._pool = None
        self.scored_steps = 0

    def _executor(self):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: the child imports only the reward code, and no thread of this process comes along.
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def poll(self) -> list[dict]:
        out = []
        for step, (future, data) in list(self._pending.items()):
            if future.done():
                del self._pending[step]
                try:
                    data.update(future.result())
                    self.scored_steps += 1
                except Exception as exc:  # a dump the reward cannot read: keep verl's own score
                    log.debug("scoring rollout step %d: %s", step, exc)
                out.append({"step": step, "data": data})
        now = time.time()
        try:
            files = sorted((p for p in self.folder.glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
        except OSError:
            files = []
        for path in files:
            if len(self._pending) >= IN_FLIGHT:
                break
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            key = (path.name, int(mtime * 1e9))
            if key in self._seen or now - mtime < SETTLE_S:
                continue
            self._seen.add(key)
            rows = read_jsonl(path)
            scores = [r["score"] for r in rows if isinstance(r.get("score"), (int, float))]
            data: dict[str, float] = {SCORE_KEY: sum(scores) / len(scores)} if scores else {}
            extras = extra_means(rows)
            if extras:
                data.update(extras)
                out.append({"step": int(path.stem), "data": data})
            elif rows:
                self._pending[int(path.stem)] = (self._executor().submit(score_rows, evenly(rows, self.scored_per_step)),
                                                 data)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
