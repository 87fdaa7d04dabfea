"""The policy side of a GRPO step on one device: response log-probs and the PPO update with gradient accumulation.

Shaped like verl's `DataParallelPPOActor` (`compute_log_prob`, `update_policy`); the maths is `core_algos`.
A NaN/inf loss or gradient stops the run with `TrainingFailed` before the optimizer applies it.
"""

from __future__ import annotations

from core.errors import UserError
from core.training.batch import Batch


class TrainingFailed(UserError):
    """The run stopped itself (NaN/inf loss or gradients); status failed, the last good checkpoint kept."""

    exit_code = 1


class Actor:
    """The policy with its optimizer and LR scheduler, configured by `actor_rollout_ref.actor`."""

    def __init__(self, policy, optimizer, scheduler, config, *, temperature: float) -> None:
        self.policy, self.optimizer, self.scheduler, self.config = policy, optimizer, scheduler, config
        self.temperature = temperature

    def compute_log_prob(self, model, batch: Batch, rows=None, *, with_entropy: bool = False):
        """Per-token log-probs (and entropy) of the responses under `model`, temperature-scaled like verl."""
        from core.training.core_algos import entropy_from_logits, logprobs_from_logits

        sel = slice(None) if rows is None else rows
        input_ids = batch.input_ids[sel]
        resp_len = batch.response_length
        out = model(
            input_ids=input_ids,
            attention_mask=batch.attention_mask[sel],
            position_ids=batch.position_ids[sel],
            logits_to_keep=resp_len + 1,
            use_cache=False,
        )
        logits = out.logits[:, :-1, :].float() / self.temperature
        labels = input_ids[:, -resp_len:]
        logp = logprobs_from_logits(logits, labels)
        return logp, (entropy_from_logits(logits) if with_entropy else None)

    def log_prob_no_grad(self, model, batch: Batch):
        """`compute_log_prob` over the whole batch in micro-batches, without gradients (old and reference log-probs)."""
        import torch

        micro = max(1, self.config.ppo_micro_batch_size_per_gpu or len(batch.uids))
        with torch.no_grad():
            parts = [self.compute_log_prob(model, batch, slice(i, i + micro))[0] for i in range(0, len(batch.uids), micro)]
        return torch.cat(parts)

    def update_policy(self, batch: Batch, advantages, old_log_prob, ref_log_prob, *, n: int, step: int,
                      seed: int) -> dict[str, float]:
        """PPO epochs over mini-batches (in prompts x n) of micro-batches with gradient accumulation; returns the
        step's actor metrics. `old_log_prob` None means the policy has not moved since the rollout (ratio 1)."""
        import torch

        from core.training.core_algos import agg_loss, compute_policy_loss, kl_penalty

        actor = self.config
        n_seqs = len(batch.uids)
        mini = min(n_seqs, max(1, actor.ppo_mini_batch_size) * n)
        micro = max(1, min(mini, actor.ppo_micro_batch_size_per_gpu or mini))
        mode = actor.loss_agg_mode
        updates: list[dict[str, float]] = []
        self.policy.train()
        gen = torch.Generator().manual_seed(seed * 100_003 + step)
        for _ in range(max(1, actor.ppo_epochs)):
            order = torch.randperm(n_seqs, generator=gen) if n_seqs > mini else torch.arange(n_seqs)
            for start in range(0, n_seqs, mini):
                rows = order[start : start + mini].to(batch.input_ids.device)
                mask_all = batch.response_mask[rows]
                # Normalise every micro-batch by the whole mini-batch, so the accumulated gradient and the
                # summed losses equal those of one big batch.
                norm = {
                    "batch_num_tokens": mask_all.sum().clamp(min=1),
                    "global_batch_size": (mask_all.sum(-1) > 0).sum().clamp(min=1),
                    "loss_scale_factor": batch.response_length,
                }
                acc: dict[str, float] = {}
                self.optimizer.zero_grad(set_to_none=True)
                for m0 in range(0, len(rows), micro):
                    idx = rows[m0 : m0 + micro]
                    mask = batch.response_mask[idx]
                    share = len(idx) / len(rows)
                    logp, entropy = self.compute_log_prob(self.policy, batch, idx, with_entropy=True)
                    old = logp.detach() if old_log_prob is None else old_log_prob[idx]
                    pg_loss, pg_metrics = compute_policy_loss(
                        old, logp, advantages[idx], mask,
                        clip_ratio_low=actor.clip_ratio_low, clip_ratio_high=actor.clip_ratio_high,
                        clip_ratio_c=actor.clip_ratio_c, loss_agg_mode=mode, **norm,
                    )
                    entropy_loss = agg_loss(entropy.detach() if actor.entropy_coeff == 0 else entropy, mask, mode, **norm)
                    loss = pg_loss - actor.entropy_coeff * entropy_loss
                    parts = {"actor/pg_loss": pg_loss.item(), "actor/entropy": entropy_loss.item(), "actor/kl_loss": 0.0}
                    if actor.use_kl_loss:
                        kl_loss = agg_loss(kl_penalty(logp, ref_log_prob[idx], actor.kl_loss_type), mask, mode, **norm)
                        loss = loss + actor.kl_loss_coef * kl_loss
                        parts["actor/kl_loss"] = kl_loss.item()
                    if not torch.isfinite(loss):
                        raise TrainingFailed(
                            f"the loss became {loss.item()} at step {step}; the last good checkpoint is kept. "
                            f"Lower actor_rollout_ref.actor.optim.lr (now {actor.optim.lr}) or check the reward"
                        )
                    loss.backward()
                    for key, value in pg_metrics.items():
                        parts[f"actor/{key}"] = value.item() * share
                    for key, value in parts.items():
                        acc[key] = acc.get(key, 0.0) + value
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), actor.grad_clip)
                if not torch.isfinite(grad_norm):
                    self.optimizer.zero_grad(set_to_none=True)
                    raise TrainingFailed(
                        f"the gradient norm became {grad_norm.item()} at step {step}; the last good checkpoint "
                        f"is kept. Lower actor_rollout_ref.actor.optim.lr (now {actor.optim.lr}) or actor.grad_clip"
                    )
                self.optimizer.step()
                acc["actor/grad_norm"] = grad_norm.item()
                updates.append(acc)
        self.scheduler.step()
        metrics = {key: sum(u[key] for u in updates) / len(updates) for key in updates[0]}
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        return metrics
