"""verl's `custom_reward_function` over this project's reward: `compute_score` returns `score` plus every
dimension and penalty, which verl keeps per sample as `reward_extra_info`.

verl loads this file by path (`reward.custom_reward_function.path`) in its reward workers; it is the
same scoring the native backend runs (`core.rewards.pool.score_one`), per-type weights included.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

FINAL_KEY = "score"


def grading_inputs(ground_truth: Any, extra_info: Mapping | None) -> tuple[dict, dict[str, float]]:
    """(task mapping, per-dimension weights) from the row's ground_truth (JSON written by data.py)."""
    data = ground_truth
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError:
            data = None
    if isinstance(data, Mapping) and isinstance(data.get("task"), Mapping):
        return dict(data["task"]), dict(data.get("reward_weights") or {})
    task_id = (extra_info or {}).get("task_id")
    if task_id:  # a row from another exporter: find the task by id
        from tasks import get_task

        return get_task(str(task_id)).to_dict(), {}
    raise ValueError("ground_truth must be the JSON task mapping written by core.training.verl_backend.data "
                     f"(or extra_info must carry task_id); got {type(ground_truth).__name__}")


def flatten_breakdown(breakdown: Mapping) -> dict[str, float]:
    """{"score": final, "<dimension>": v, ..., "<penalty>": v, ...}: flat floats, as verl's reward_extra_info wants."""
    out = {FINAL_KEY: float(breakdown["final_reward"])}
    out.update({name: float(v) for name, v in breakdown["dimensions"].items()})
    out.update({name: float(v) for name, v in breakdown["penalties"].items()})
    return out


def unflatten(extra: Mapping) -> dict:
    """The breakdown shape (`final_reward`, `dimensions`, `penalties`) back from one flat reward_extra_info."""
    from core.rewards import DIMENSIONS, PENALTIES

    return {
        "final_reward": float(extra.get(FINAL_KEY) or 0.0),
        "dimensions": {name: float(extra.get(name) or 0.0) for name in DIMENSIONS},
        "penalties": {name: float(extra.get(name) or 0.0) for name in PENALTIES},
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
