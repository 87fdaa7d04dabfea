"""Scoring many responses at once: the reward in this process or a pool of worker processes, and its means.

Both backends score through here: the torch backend's `RewardScorer`, verl's reward function (`score_one`)
and its per-dimension metrics (`reward_means`), so the same answer gets the same breakdown and metric names.
"""

from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)


class RewardScorer:
    """Scores responses with `core.rewards.score`, in this process or in `n_runners` worker processes."""

    def __init__(self, n_runners: int, reward_weights: dict[str, dict[str, float]] | None = None) -> None:
        self.n_runners = max(1, int(n_runners))
        self.reward_weights = reward_weights or {}
        self._pool = None
        if self.n_runners > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: the workers must not inherit torch's threads; they import only the reward code.
            self._pool = ProcessPoolExecutor(max_workers=self.n_runners, mp_context=multiprocessing.get_context("spawn"))
            log.info("reward scoring in %d worker processes", self.n_runners)

    def score(self, answers: list[str], tasks: list[dict]) -> list[dict]:
        jobs = [(a, t, self.reward_weights.get(t.get("type", ""), {})) for a, t in zip(answers, tasks)]
        if self._pool is None:
            return [score_one(job) for job in jobs]
        chunk = max(1, math.ceil(len(jobs) / (self.n_runners * 2)))
        return list(self._pool.map(score_one, jobs, chunksize=chunk))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def score_one(job: tuple[str, dict, dict[str, float]]) -> dict:
    """One reward breakdown as a dict; `devops.reward_weights` for the task's type override dimension weights."""
    from core.rewards import score

    answer, task, weights = job
    return score(answer, task, weights=weights or None).to_dict()


def reward_means(breakdowns: list[dict], dimensions, penalties) -> dict[str, float]:
    """`reward/<name>/mean` for every dimension and penalty, and `reward/final/mean`."""
    count = max(1, len(breakdowns))
    out = {f"reward/{name}/mean": sum(b["dimensions"].get(name, 0.0) for b in breakdowns) / count for name in dimensions}
    out.update({f"reward/{name}/mean": sum(b["penalties"].get(name, 0.0) for b in breakdowns) / count for name in penalties})
    out["reward/final/mean"] = sum(b["final_reward"] for b in breakdowns) / count
    return out
