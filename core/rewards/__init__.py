"""The task-grounded, explainable DevOps reward (see docs/architecture.md for its contract and docs/reward.md
for how it scores): `score(answer, task) -> RewardBreakdown`, `score_batch(pairs)` for a worker's batch.
"""

from core.rewards.breakdown import (
    DIMENSIONS,
    RewardBreakdown,
    calculate_devops_reward,
    prefetch_validators,
    score,
    score_batch,
    weights_for,
)
from core.rewards.checks.penalties import PENALTIES

__all__ = ["DIMENSIONS", "PENALTIES", "RewardBreakdown", "calculate_devops_reward", "prefetch_validators", "score",
           "score_batch", "weights_for"]
