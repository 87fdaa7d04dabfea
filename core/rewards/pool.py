"""Scoring many responses at once: the reward in this process or a pool of worker processes, and its means.

Both backends score through here: the torch backend's `RewardScorer`, verl's reward function (`score_one`)
and its per-dimension metrics (`reward_means`), so the same answer gets the same breakdown and metric names.
"""

from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)


class RewardScorer:
    """Scores responses with `core.rewards.score`, in this process or in `n_runners` worker processes.

    Each worker scores a chunk with `score_batch`-style validator prefetching (one shellcheck/hadolint process
    per chunk, not per answer). With an LLM judge (`devops.reward.judge`), this process asks the judge for all
    answers at once (bounded concurrency) and the workers blend its grades into the rule scores.
    """

    def __init__(self, n_runners: int, reward_weights: dict[str, dict[str, float]] | None = None,
                 judge=None) -> None:
        self.n_runners = max(1, int(n_runners))
        self.reward_weights = reward_weights or {}
        self.judge = judge  # core.rewards.judge.JudgeSettings or None
        self._pool = None
        if self.n_runners > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: the workers must not inherit torch's threads; they import only the reward code.
            self._pool = ProcessPoolExecutor(max_workers=self.n_runners, mp_context=multiprocessing.get_context("spawn"))
            log.info("reward scoring in %d worker processes", self.n_runners)

    def score(self, answers: list[str], tasks: list[dict]) -> list[dict]:
        judged: list = [None] * len(answers)
        if self.judge is not None:
            from core.rewards.judge import grade_many

            judged = [(v.grades, v.status) for v in grade_many(list(zip(answers, tasks)), self.judge)]
        weight = self.judge.weight if self.judge is not None else 0.0
        jobs = [(a, t, self.reward_weights.get(t.get("type", ""), {}), j, weight)
                for a, t, j in zip(answers, tasks, judged)]
        if self._pool is None:
            return score_chunk(jobs)
        size = max(1, math.ceil(len(jobs) / (self.n_runners * 2)))
        chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        return [result for part in self._pool.map(score_chunk, chunks) for result in part]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def score_chunk(jobs: list[tuple]) -> list[dict]:
    """Breakdowns (as dicts) for `(answer, task, weights, judged, judge_weight)` jobs, the external validators
    run once for the whole chunk; `judged` is `(grades, status)` from the LLM judge or None."""
    from core.rewards import prefetch_validators, score

    prefetch_validators([job[0] for job in jobs])
    results = []
    for answer, task, weights, judged, judge_weight in jobs:
        grades, status = judged if judged is not None else (None, None)
        result = score(answer, task, weights=weights or None, judge=grades, judge_weight=judge_weight)
        if status is not None:
            result.rubric["judge"] = status
        results.append(result.to_dict())
    return results


def score_one(job: tuple[str, dict, dict[str, float]]) -> dict:
    """One reward breakdown as a dict; `devops.reward_weights` for the task's type override dimension weights."""
    from core.rewards import score

    answer, task, weights = job
    return score(answer, task, weights=weights or None).to_dict()


def reward_means(breakdowns: list[dict], dimensions, penalties) -> dict[str, float]:
    """`reward/<name>/mean` for every dimension and penalty, `reward/final/mean`, and `reward/rubric/mean` (the
    task rubric's score) when the tasks have rubrics."""
    count = max(1, len(breakdowns))
    out = {f"reward/{name}/mean": sum(b["dimensions"].get(name, 0.0) for b in breakdowns) / count for name in dimensions}
    out.update({f"reward/{name}/mean": sum(b["penalties"].get(name, 0.0) for b in breakdowns) / count for name in penalties})
    out["reward/final/mean"] = sum(b["final_reward"] for b in breakdowns) / count
    rubric = [b["rubric"]["score"] for b in breakdowns if (b.get("rubric") or {}).get("score") is not None]
    if rubric:
        out["reward/rubric/mean"] = sum(rubric) / len(rubric)
    return out
