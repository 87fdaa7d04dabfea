"""The multi-dimensional, explainable DevOps reward (see docs/architecture.md for its contract and
docs/reward.md for how it scores): `score(answer, task) -> RewardBreakdown`.
"""

from core.rewards.breakdown import DIMENSIONS, RewardBreakdown, calculate_devops_reward, score, weights_for
from core.rewards.penalties import PENALTIES

__all__ = ["DIMENSIONS", "PENALTIES", "RewardBreakdown", "calculate_devops_reward", "score", "weights_for"]
