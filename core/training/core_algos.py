"""The GRPO maths as small pure torch functions, named and shaped as in `verl.trainer.ppo.core_algos`.

Tensors are (batch, response_length) unless said otherwise; masks are 1 on response tokens. Tests check
each function equal to verl's on random tensors where verl is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from core.training.config.schema import KL_TYPES, LOSS_AGG_MODES


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is non-zero; NaNs outside the mask do not leak in."""
    valid = torch.where(mask.bool(), values, 0.0) * mask
    return valid.sum() if axis is None else valid.sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of `values` over the masked elements (an all-zero mask gives 0, not NaN)."""
    count = mask.sum(dim=axis) if axis is not None else mask.sum()
    return masked_sum(values, mask, axis) / (count + 1e-8)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax of `logits` over the last axis: logsumexp(x) - sum(softmax(x) * x)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label under the logits, (..., vocab) -> (...)."""
    picked = torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits.float(), dim=-1).to(picked.dtype)


def _group_ids(index: Sequence[Any]) -> tuple[torch.Tensor, int]:
    mapping: dict[Any, int] = {}
    ids = [mapping.setdefault(key.item() if hasattr(key, "item") else key, len(mapping)) for key in index]
    return torch.tensor(ids, dtype=torch.long), len(mapping)


def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage: each response's total reward minus its group's mean (over responses to the
    same prompt, `index`), divided by the group's unbiased std + epsilon unless `norm_adv_by_std_in_grpo`
    is False (Dr. GRPO). A group of one gets mean 0 and std 1. Returns (advantages, returns), equal."""
    scores = token_level_rewards.sum(dim=-1)
    with torch.no_grad():
        groups, n_groups = _group_ids(index)
        groups = groups.to(scores.device)
        counts = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, groups, torch.ones_like(scores))
        sums = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, groups, scores)
        mean = sums / counts
        centred = scores - mean[groups]
        sq = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, groups, centred**2)
        std = torch.sqrt(sq / (counts - 1).clamp(min=1))
        single = counts[groups] == 1
        mean_i = torch.where(single, torch.zeros_like(scores), mean[groups])
        std_i = torch.where(single, torch.ones_like(scores), std[groups])
        advantage = scores - mean_i
        if norm_adv_by_std_in_grpo:
            advantage = advantage / (std_i + epsilon)
        advantage = advantage.unsqueeze(-1) * response_mask
    return advantage, advantage


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    batch_num_tokens: torch.Tensor | float | None = None,
    global_batch_size: torch.Tensor | float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a (batch, length) loss matrix into a scalar.

    token-mean: sum over all tokens / number of tokens; token-sum: the plain sum; seq-mean-token-sum: per-sequence sum, mean over
    sequences; seq-mean-token-mean: per-sequence mean, mean over sequences; seq-mean-token-sum-norm: like
    seq-mean-token-sum divided by a constant (the padded length unless `loss_scale_factor` is given, Dr. GRPO).
    `batch_num_tokens` / `global_batch_size` let a micro-batch be normalised by the whole mini-batch's count,
    so accumulated gradients equal one big batch's.
    """
    if loss_agg_mode == "token-mean":
        denominator = loss_mask.sum() if batch_num_tokens is None else batch_num_tokens
        return masked_sum(loss_mat, loss_mask) / denominator
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask)
    seq_tokens = loss_mask.sum(dim=-1)
    seq_mask = (seq_tokens > 0).to(loss_mat.dtype)
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = (loss_mat * loss_mask).sum(dim=-1)
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_losses = (loss_mat * loss_mask).sum(dim=-1) / (seq_tokens + 1e-8)
    else:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; one of {', '.join(LOSS_AGG_MODES)}")
    denominator = seq_mask.sum() if global_batch_size is None else global_batch_size
    loss = masked_sum(seq_losses, seq_mask) / denominator
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The vanilla PPO clipped objective with asymmetric clip (clip-higher) and dual-clip.

    ratio = exp(log_prob - old_log_prob); loss = max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high)),
    and for A < 0 at most -A * clip_ratio_c (dual-clip, arXiv:1912.09729). Returns the aggregated loss and
    the detached metrics `pg_clipfrac`, `ppo_kl`, `pg_clipfrac_lower`.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}")
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clip_losses = torch.maximum(unclipped, clipped)
    pg_clipfrac = masked_mean(torch.gt(clipped, unclipped).float(), response_mask)
    dual_bound = -advantages * clip_ratio_c
    dual_clipped = torch.minimum(dual_bound, clip_losses)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_losses, dual_bound).float() * (advantages < 0).float(), response_mask)
    pg_losses = torch.where(advantages < 0, dual_clipped, clip_losses)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **agg_kwargs)
    metrics = {"pg_clipfrac": pg_clipfrac.detach(), "ppo_kl": ppo_kl.detach(), "pg_clipfrac_lower": pg_clipfrac_lower.detach()}
    return pg_loss, metrics


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (Schulman's k1/k2/k3 estimators).

    kl (k1): logp - ref; abs: |logp - ref|; mse (k2): (logp - ref)^2 / 2; low_var_kl (k3):
    exp(ref - logp) - (ref - logp) - 1, clamped to [-10, 10] for stability. A `+` suffix (e.g. k3+) is the
    straight-through variant: the estimator's value with k2's gradient, the one whose expectation is KL's gradient.
    """
    base = kl_type.removesuffix("+")
    diff = log_prob - ref_log_prob
    if base in ("kl", "k1"):
        value = diff
    elif base == "abs":
        value = diff.abs()
    elif base in ("mse", "k2"):
        value = 0.5 * diff.square()
    elif base in ("low_var_kl", "k3"):
        kl = torch.clamp(-diff, min=-20, max=20)
        value = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    else:
        raise ValueError(f"unknown KL type {kl_type!r}; one of {', '.join(KL_TYPES)}, each optionally with a '+' suffix")
    if base == kl_type or base in ("mse", "k2"):
        return value
    k2 = 0.5 * diff.square()
    return k2 - k2.detach() + value.detach()


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kl_type: str = "kl",
) -> tuple[torch.Tensor, torch.Tensor]:
    """`use_kl_in_reward`: token rewards minus kl_coef times the per-token KL; returns (rewards, mean KL)."""
    kld = kl_penalty(old_log_prob, ref_log_prob, kl_type) * response_mask
    current_kl = masked_mean(kld, response_mask, axis=-1).mean()
    return token_level_scores - kl_coef * kld, current_kl


class FixedKLController:
    """verl's fixed in-reward KL coefficient: `value` never moves."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """A fixed coefficient ignores the measured KL."""


class AdaptiveKLController(FixedKLController):
    """verl's adaptive coefficient (Ziegler et al., arXiv:1909.08593): moves `value` towards `target_kl`, the
    proportional error clipped to +-20%, scaled by the sequences seen over the horizon."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        super().__init__(init_kl_coef)
        self.target, self.horizon = target_kl, horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = max(-0.2, min(0.2, current_kl / self.target - 1))
        self.value *= 1 + error * n_steps / self.horizon


def get_kl_controller(kl_ctrl) -> FixedKLController:
    """The controller `algorithm.kl_ctrl` asks for (type fixed or adaptive)."""
    if kl_ctrl.type == "adaptive":
        return AdaptiveKLController(kl_ctrl.kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon)
    return FixedKLController(kl_ctrl.kl_coef)


def lr_schedule(kind: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The learning-rate factor per optimizer step, for LambdaLR: linear warm-up over `warmup_steps` reaching 1 at
    its last step, then constant or a cosine decay to 0 at `total_steps`.

    After warm-up this equals verl's `get_constant_schedule_with_warmup` / `get_cosine_schedule_with_warmup`;
    during warm-up it is one step ahead of verl's zero-indexed default (1 / warmup_steps at step 0, not 0).
    """

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if kind == "cosine":
            progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return factor
