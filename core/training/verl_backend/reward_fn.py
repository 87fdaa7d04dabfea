"""verl's `custom_reward_function` over this project's reward: `compute_score` returns `score` plus every
dimension and penalty and the rubric's score and share of criteria met, which verl keeps per sample as
`reward_extra_info`.

verl loads this file by path (`reward.custom_reward_function.path`) in its reward workers; it is the
same scoring the native backend runs (`core.rewards.pool.score_one`), per-type weights included.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

FINAL_KEY = "score"
# The rubric's part, under keys every sample has (verl stacks reward_extra_info key by key): its score (0.0 when
# the task has no rubric), how many criteria it has (0: no rubric, so no score) and the share of them met.
RUBRIC_KEY, CRITERIA_KEY, PASSED_KEY = "rubric", "rubric_criteria", "rubric_passed"


@functools.lru_cache(maxsize=4)
def _tasks_table(path: str, mtime_ns: int) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def grading_inputs(ground_truth: Any, extra_info: Mapping | None) -> tuple[dict, dict[str, float]]:
    """(task mapping, per-dimension weights) from the row's ground_truth (JSON written by data.py: the task id
    and the run's tasks file, read once per process, or the task itself)."""
    data = ground_truth
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError:
            data = None
    if isinstance(data, Mapping) and data.get("tasks_file") and data.get("task_id"):
        path = str(data["tasks_file"])
        entry = _tasks_table(path, os.stat(path).st_mtime_ns).get(str(data["task_id"]))
        if not isinstance(entry, Mapping):
            raise ValueError(f"{path}: no task {data['task_id']!r} (the run's data folder was changed?)")
        data = entry
    if isinstance(data, Mapping) and isinstance(data.get("task"), Mapping):
        return dict(data["task"]), dict(data.get("reward_weights") or {})
    task_id = (extra_info or {}).get("task_id")
    if task_id:  # a row from another exporter: find the task by id
        from tasks import get_task

        return get_task(str(task_id)).to_dict(), {}
    raise ValueError("ground_truth must be the JSON task mapping written by core.training.verl_backend.data "
                     f"(or extra_info must carry task_id); got {type(ground_truth).__name__}")


def flatten_breakdown(breakdown: Mapping) -> dict[str, float]:
    """{"score": final, "<dimension>": v, ..., "<penalty>": v, ..., "rubric": v, "rubric_criteria": n,
    "rubric_passed": share}: flat floats, as verl's reward_extra_info wants."""
    out = {FINAL_KEY: float(breakdown["final_reward"])}
    out.update({name: float(v) for name, v in breakdown["dimensions"].items()})
    out.update({name: float(v) for name, v in breakdown["penalties"].items()})
    rubric = breakdown.get("rubric") or {}
    criteria = (rubric.get("criteria") or []) if rubric.get("score") is not None else []
    out[RUBRIC_KEY] = float(rubric["score"]) if criteria else 0.0
    out[CRITERIA_KEY] = float(len(criteria))
    out[PASSED_KEY] = sum(c.get("status") == "passed" for c in criteria) / len(criteria) if criteria else 0.0
    return out


def unflatten(extra: Mapping) -> dict:
    """The breakdown shape (`final_reward`, `dimensions`, `penalties`, `rubric` {score, passed} or no score when
    the task has no rubric) back from one flat reward_extra_info."""
    from core.rewards import DIMENSIONS, PENALTIES

    graded = bool(extra.get(CRITERIA_KEY))
    return {
        "final_reward": float(extra.get(FINAL_KEY) or 0.0),
        "dimensions": {name: float(extra.get(name) or 0.0) for name in DIMENSIONS},
        "penalties": {name: float(extra.get(name) or 0.0) for name in PENALTIES},
        "rubric": {"score": float(extra.get(RUBRIC_KEY) or 0.0) if graded else None,
                   "passed": float(extra.get(PASSED_KEY) or 0.0) if graded else None},
    }


def judge_settings(judge: Any):
    """`core.rewards.judge.JudgeSettings` from the `judge` reward argument (the `devops.reward.judge` section,
    which the launcher passes as `reward.custom_reward_function.reward_kwargs.judge`); None when it is off."""
    if judge is None:
        return None
    from core.rewards.judge import JudgeSettings

    return judge if isinstance(judge, JudgeSettings) else JudgeSettings.from_config(judge)


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping | None = None,
                  judge: Any = None, **kwargs: Any) -> dict[str, float]:
    """verl's reward signature; `score` is the final reward in [0, 1], the other keys its breakdown. With the LLM
    judge on (`judge`, the `devops.reward.judge` section), its grades are blended into each rubric criterion as
    in the native backend; a judge that fails falls back to the rule score."""
    from core.rewards.pool import score_one

    task, weights = grading_inputs(ground_truth, extra_info)
    settings = judge_settings(judge)
    if settings is None:
        return flatten_breakdown(score_one((solution_str or "", task, weights)))
    from core.rewards.judge import score_with_judge

    result = score_with_judge([(solution_str or "", task)], settings, weights=weights or None)[0]
    return flatten_breakdown(result.to_dict())
