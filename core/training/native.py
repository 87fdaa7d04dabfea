"""The native GRPO backend: one process, CPU or one CUDA GPU, plain torch + transformers.

Samples `n` responses per prompt, scores them with the reward, computes group advantages and updates the
policy with verl's clipped loss (`core_algos`), writing metrics, samples, events and checkpoints to the run folder.
"""

from __future__ import annotations

import logging
import math
import random
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError

log = logging.getLogger(__name__)


class TrainingFailed(UserError):
    """The run stopped itself (NaN/inf loss or gradients); status failed, the last good checkpoint kept."""

    exit_code = 1


class StopRequest:
    """SIGINT/SIGTERM set a flag the loop checks between phases; a second signal aborts at once."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def __bool__(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:
        if self.signal_name is not None:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        log.warning("%s received: stopping after saving a checkpoint (press Ctrl-C again to abort now)", self.signal_name)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class _Stopped(Exception):
    """Raised inside the loop when a stop was requested; the current step is abandoned."""


@dataclass
class Batch:
    """One step's rollouts: left-padded prompts followed by right-padded responses."""

    input_ids: Any  # (B, P + R)
    attention_mask: Any
    position_ids: Any
    response_mask: Any  # (B, R) float
    records: list[dict]
    uids: list[str]
    texts: list[str]
    prompt_lengths: list[int]
    scores: Any = None  # (B,)
    breakdowns: list[dict] = field(default_factory=list)

    @property
    def response_length(self) -> int:
        return self.response_mask.shape[1]

    def select(self, rows: list[int]) -> Batch:
        import torch

        idx = torch.tensor(rows, dtype=torch.long)
        return Batch(
            input_ids=self.input_ids[idx],
            attention_mask=self.attention_mask[idx],
            position_ids=self.position_ids[idx],
            response_mask=self.response_mask[idx],
            records=[self.records[i] for i in rows],
            uids=[self.uids[i] for i in rows],
            texts=[self.texts[i] for i in rows],
            prompt_lengths=[self.prompt_lengths[i] for i in rows],
            scores=self.scores[idx] if self.scores is not None else None,
            breakdowns=[self.breakdowns[i] for i in rows] if self.breakdowns else [],
        )


def concat_batches(parts: list[Batch], pad_id: int) -> Batch:
    """Join rollouts of several generation rounds (dynamic sampling), re-padding to a common width."""
    import torch

    if len(parts) == 1:
        return parts[0]
    prompt_w = max(p.input_ids.shape[1] - p.response_length for p in parts)
    resp_w = max(p.response_length for p in parts)

    def pad(t, left: int, right: int, value):
        return torch.nn.functional.pad(t, (left, right), value=value)

    cols = {"input_ids": [], "attention_mask": [], "response_mask": []}
    for p in parts:
        left = prompt_w - (p.input_ids.shape[1] - p.response_length)
        right = resp_w - p.response_length
        cols["input_ids"].append(pad(p.input_ids, left, right, pad_id))
        cols["attention_mask"].append(pad(p.attention_mask, left, right, 0))
        cols["response_mask"].append(pad(p.response_mask, 0, right, 0.0))
    attention = torch.cat(cols["attention_mask"])
    return Batch(
        input_ids=torch.cat(cols["input_ids"]),
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
        response_mask=torch.cat(cols["response_mask"]),
        records=[r for p in parts for r in p.records],
        uids=[u for p in parts for u in p.uids],
        texts=[t for p in parts for t in p.texts],
        prompt_lengths=[n for p in parts for n in p.prompt_lengths],
        scores=torch.cat([p.scores for p in parts]),
        breakdowns=[b for p in parts for b in p.breakdowns],
    )


class PromptStream:
    """Training prompts in a seeded order per epoch; its position is saved in checkpoints."""

    def __init__(self, records: list[dict], *, shuffle: bool, seed: int, epoch: int = 0, offset: int = 0) -> None:
        if not records:
            raise UserError("the training split is empty; add tasks to tasks/data or lower devops.val_fraction")
        self.records, self.shuffle, self.seed = records, shuffle, seed
        self.epoch, self.offset = epoch, offset
        self._order = self._order_for(epoch)

    def _order_for(self, epoch: int) -> list[int]:
        order = list(range(len(self.records)))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def take(self, count: int) -> list[dict]:
        out = []
        while len(out) < count:
            if self.offset >= len(self._order):
                self.epoch, self.offset = self.epoch + 1, 0
                self._order = self._order_for(self.epoch)
            out.append(self.records[self._order[self.offset]])
            self.offset += 1
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}


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


def _peak_rss_gb() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


class NativeTrainer:
    """GRPO on one device. `run()` returns when the run finished, stopped or failed (then it raises)."""

    def __init__(self, cfg, *, mode: str, run_dir, resume: bool = False, progress: Callable[[dict], None] | None = None):
        self.cfg, self.mode, self.run_dir, self.resume, self.progress = cfg, mode, run_dir, resume, progress
        self.stop = StopRequest()
        self.actor = cfg.actor_rollout_ref.actor
        self.rollout = cfg.actor_rollout_ref.rollout

    # ---- setup ----------------------------------------------------------------------------------

    def _check_supported(self) -> None:
        from core.training.config import native_ignored_settings

        if self.cfg.algorithm.adv_estimator != "grpo":
            raise UserError(
                f"algorithm.adv_estimator: {self.cfg.algorithm.adv_estimator!r} is not supported by the torch backend; "
                "use grpo (or --backend verl)"
            )
        ignored = native_ignored_settings(self.cfg)
        if ignored:
            log.warning("the torch backend ignores: %s", ", ".join(ignored))

    def _load_models(self, model_path: Path, policy_path: Path):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        use_bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        self.dtype = torch.bfloat16 if use_bf16 else torch.float32
        tokenizer = AutoTokenizer.from_pretrained(policy_path)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        policy = AutoModelForCausalLM.from_pretrained(policy_path, dtype=self.dtype).to(self.device)
        if self.cfg.actor_rollout_ref.model.enable_gradient_checkpointing:
            policy.gradient_checkpointing_enable()
        ref = None
        if self.actor.use_kl_loss or self.cfg.algorithm.use_kl_in_reward:
            ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.dtype).to(self.device)
            ref.eval().requires_grad_(False)
        return tokenizer, policy, ref

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        gen_eos = getattr(self.policy.generation_config, "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        return sorted(i for i in ids if i is not None)

    def _encode_prompt(self, record: dict) -> list[int]:
        from core.training.sft import truncate_prompt

        text = self.tokenizer.apply_chat_template(record["prompt"], tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return truncate_prompt(ids, self.cfg.data.max_prompt_length, self.cfg.data.truncation, record["task_id"])

    # ---- rollout --------------------------------------------------------------------------------

    def generate(self, records: list[dict], n: int) -> Batch:
        """Sample `n` responses per record (interleaved: the group of a prompt is contiguous)."""
        import torch

        prompts = []
        for record in records:
            key = record["task_id"]
            if key not in self._prompt_cache:
                self._prompt_cache[key] = self._encode_prompt(record)
            prompts.append(self._prompt_cache[key])
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        rows = [p for p in prompts for _ in range(n)]
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in rows], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=self.device)
        kwargs = {"max_new_tokens": self.cfg.data.max_response_length, "pad_token_id": pad, "eos_token_id": self._eos_ids()}
        top_k = self.rollout.top_k if self.rollout.top_k > 0 else 0  # verl's -1 (vLLM) and 0 (HF) mean "off"
        kwargs.update(do_sample=True, temperature=self.rollout.temperature, top_p=self.rollout.top_p, top_k=top_k)
        self.policy.eval()
        try:
            with torch.no_grad():
                out = self.policy.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        except RuntimeError as exc:  # sampling from NaN/inf probabilities: the weights diverged
            if "inf" not in str(exc) and "nan" not in str(exc):
                raise
            raise TrainingFailed(
                f"the model's probabilities became NaN/inf at step {self.global_step} (the weights diverged); the last "
                f"good checkpoint is kept. Lower actor_rollout_ref.actor.optim.lr (now {self.actor.optim.lr})"
            ) from exc
        responses = out[:, width:]
        if responses.shape[1] == 0:
            responses = torch.full((len(rows), 1), pad, device=self.device)
        is_eos = torch.isin(responses, torch.tensor(self._eos_ids(), device=self.device))
        # Mask: every token up to and including the first end-of-sequence token.
        after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0
        response_mask = (~after_eos).float()
        full_attention = torch.cat([attention, response_mask.long()], dim=-1)
        texts = self.tokenizer.batch_decode(
            [r[: int(m.sum())] for r, m in zip(responses, response_mask)], skip_special_tokens=True
        )
        uids = [f"{self._uid_counter + i}" for i in range(len(records)) for _ in range(n)]
        self._uid_counter += len(records)
        return Batch(
            input_ids=torch.cat([input_ids, responses], dim=-1),
            attention_mask=full_attention,
            position_ids=(full_attention.cumsum(-1) - 1).clamp(min=0),
            response_mask=response_mask,
            records=[r for r in records for _ in range(n)],
            uids=uids,
            texts=texts,
            prompt_lengths=[len(p) for p in rows],
        )

    def score(self, batch: Batch) -> None:
        import torch

        batch.breakdowns = self.scorer.score(batch.texts, [r["task"] for r in batch.records])
        batch.scores = torch.tensor([b["final_reward"] for b in batch.breakdowns], dtype=torch.float32, device=self.device)

    # ---- log-probs and the update -----------------------------------------------------------------

    def log_probs(self, model, batch: Batch, rows=None, *, with_entropy: bool = False):
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
        logits = out.logits[:, :-1, :].float() / self.rollout.temperature
        labels = input_ids[:, -resp_len:]
        logp = logprobs_from_logits(logits, labels)
        return logp, (entropy_from_logits(logits) if with_entropy else None)

    def _no_grad_log_probs(self, model, batch: Batch):
        import torch

        micro = max(1, self.actor.ppo_micro_batch_size_per_gpu or len(batch.uids))
        with torch.no_grad():
            parts = [self.log_probs(model, batch, slice(i, i + micro))[0] for i in range(0, len(batch.uids), micro)]
        return torch.cat(parts)

    def update(self, batch: Batch, advantages, old_log_prob, ref_log_prob) -> dict[str, float]:
        """PPO epochs over mini-batches (in prompts x n) of micro-batches with gradient accumulation."""
        import torch

        from core.training.core_algos import agg_loss, compute_policy_loss, kl_penalty

        actor = self.actor
        n_seqs = len(batch.uids)
        n = self.rollout.n
        mini = min(n_seqs, max(1, actor.ppo_mini_batch_size) * n)
        micro = max(1, min(mini, actor.ppo_micro_batch_size_per_gpu or mini))
        mode = actor.loss_agg_mode
        updates: list[dict[str, float]] = []
        self.policy.train()
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.global_step)
        for _ in range(max(1, actor.ppo_epochs)):
            order = torch.randperm(n_seqs, generator=gen) if n_seqs > mini else torch.arange(n_seqs)
            for start in range(0, n_seqs, mini):
                rows = order[start : start + mini].to(self.device)
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
                    logp, entropy = self.log_probs(self.policy, batch, idx, with_entropy=True)
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
                            f"the loss became {loss.item()} at step {self.global_step}; the last good checkpoint is kept. "
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
                        f"the gradient norm became {grad_norm.item()} at step {self.global_step}; the last good checkpoint "
                        f"is kept. Lower actor_rollout_ref.actor.optim.lr (now {actor.optim.lr}) or actor.grad_clip"
                    )
                self.optimizer.step()
                acc["actor/grad_norm"] = grad_norm.item()
                updates.append(acc)
        self.scheduler.step()
        metrics = {key: sum(u[key] for u in updates) / len(updates) for key in updates[0]}
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        return metrics

    # ---- one step -------------------------------------------------------------------------------

    def collect(self) -> tuple[Batch, dict[str, float]]:
        """Generate and score one step's rollouts; with dynamic sampling, drop groups whose rewards are all
        equal and refill from the next prompts (up to filter_groups.max_num_gen_batches rounds)."""
        import torch

        bs = self.cfg.data.train_batch_size
        n = self.rollout.n
        fg = self.cfg.algorithm.filter_groups
        kept: list[Batch] = []
        n_groups = rounds = dropped = 0
        gen_s = reward_s = 0.0
        while True:
            rounds += 1
            t0 = time.monotonic()
            batch = self.generate(self.stream.take(bs), n)
            gen_s += time.monotonic() - t0
            if self.stop:
                raise _Stopped
            t0 = time.monotonic()
            self.score(batch)
            reward_s += time.monotonic() - t0
            if not fg.enable:
                kept, n_groups = [batch], bs
                break
            scores = batch.scores.view(-1, n)
            varied = [g for g in range(scores.shape[0]) if scores[g].std() > 0 if n > 1]
            dropped += scores.shape[0] - len(varied)
            need = bs - n_groups
            take = varied[:need]
            if take:
                kept.append(batch.select([g * n + j for g in take for j in range(n)]))
                n_groups += len(take)
            limit = fg.max_num_gen_batches
            if n_groups >= bs or (limit and rounds >= limit):
                if not kept:  # nothing varied: keep the last round so the step still logs (zero advantages)
                    kept, n_groups = [batch], bs
                elif n_groups < bs:
                    log.warning("dynamic sampling: only %d of %d groups had varied rewards after %d rounds", n_groups, bs, rounds)
                break
        merged = concat_batches(kept, self.tokenizer.pad_token_id)
        return merged, {"timing_s/gen": gen_s, "timing_s/reward": reward_s, "batch/num_gen_batches": rounds,
                        "batch/dropped_groups": dropped}

    def step(self) -> dict[str, float]:
        import torch

        from core.training.core_algos import apply_kl_penalty, compute_grpo_outcome_advantage, masked_mean

        t_step = time.monotonic()
        epoch = self.stream.epoch
        batch, metrics = self.collect()
        mask = batch.response_mask
        token_scores = torch.zeros_like(mask)
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        token_scores[torch.arange(len(last)), last] = batch.scores
        actor, algo = self.actor, self.cfg.algorithm
        single_update = actor.ppo_epochs <= 1 and actor.ppo_mini_batch_size >= self.cfg.data.train_batch_size
        t0 = time.monotonic()
        # One optimizer step on fresh rollouts: old log-probs equal the new ones (ratio 1), so skip the pass.
        old_log_prob = None if single_update and not algo.use_kl_in_reward else self._no_grad_log_probs(self.policy, batch)
        metrics["timing_s/old_log_prob"] = time.monotonic() - t0
        ref_log_prob = None
        t0 = time.monotonic()
        if self.ref is not None:
            ref_log_prob = self._no_grad_log_probs(self.ref, batch)
        metrics["timing_s/ref"] = time.monotonic() - t0
        token_rewards = token_scores
        if algo.use_kl_in_reward:
            token_rewards, current_kl = apply_kl_penalty(
                token_scores, old_log_prob, ref_log_prob, mask, self.kl_coef, algo.kl_penalty
            )
            metrics["actor/reward_kl_penalty"] = current_kl.item()
            metrics["actor/reward_kl_penalty_coeff"] = self.kl_coef
            self.kl_coef = next_kl_coef(algo.kl_ctrl, self.kl_coef, current_kl.item(), len(batch.uids))
        advantages, _ = compute_grpo_outcome_advantage(
            token_rewards, mask, batch.uids, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo
        )
        if self.stop:
            raise _Stopped
        t0 = time.monotonic()
        metrics.update(self.update(batch, advantages, old_log_prob, ref_log_prob))
        metrics["timing_s/update_actor"] = time.monotonic() - t0
        metrics.update(self._batch_metrics(batch, token_rewards, advantages))
        metrics["timing_s/step"] = time.monotonic() - t_step
        n_tokens = float(batch.attention_mask.sum())
        metrics["perf/total_num_tokens"] = n_tokens
        metrics["perf/throughput"] = n_tokens / max(metrics["timing_s/step"], 1e-9)
        metrics["perf/time_per_step"] = metrics["timing_s/step"]
        metrics.update(self._memory_metrics())
        metrics["training/global_step"] = float(self.global_step)
        metrics["training/epoch"] = float(epoch)
        self._last_batch = batch
        return metrics

    def _batch_metrics(self, batch: Batch, token_rewards, advantages) -> dict[str, float]:
        from core.rewards import DIMENSIONS, PENALTIES
        from core.training.core_algos import masked_mean

        mask = batch.response_mask
        lengths = mask.sum(-1)
        max_len = self.cfg.data.max_response_length
        scores = batch.scores
        seq_rewards = token_rewards.sum(-1)
        valid_adv = advantages[mask.bool()]
        out = {
            "critic/score/mean": scores.mean().item(),
            "critic/score/max": scores.max().item(),
            "critic/score/min": scores.min().item(),
            "critic/rewards/mean": seq_rewards.mean().item(),
            "critic/rewards/max": seq_rewards.max().item(),
            "critic/rewards/min": seq_rewards.min().item(),
            "critic/advantages/mean": masked_mean(advantages, mask).item(),
            "critic/advantages/max": valid_adv.max().item() if valid_adv.numel() else 0.0,
            "critic/advantages/min": valid_adv.min().item() if valid_adv.numel() else 0.0,
            "response_length/mean": lengths.mean().item(),
            "response_length/max": lengths.max().item(),
            "response_length/min": lengths.min().item(),
            "response_length/clip_ratio": (lengths >= max_len).float().mean().item(),
            "prompt_length/mean": sum(batch.prompt_lengths) / len(batch.prompt_lengths),
            "prompt_length/max": float(max(batch.prompt_lengths)),
        }
        out.update(reward_means(batch.breakdowns, DIMENSIONS, PENALTIES))
        return out

    def _memory_metrics(self) -> dict[str, float]:
        import torch

        from core.training import sysmon

        out = dict(sysmon.sample())
        if self.device.type == "cuda":
            out["actor/perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(self.device) / 1024**3
            out["actor/perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(self.device) / 1024**3
        else:  # on CPU the device memory is the process's: its peak resident set
            out["actor/perf/max_memory_allocated_gb"] = _peak_rss_gb()
            out["actor/perf/max_memory_reserved_gb"] = _peak_rss_gb()
        if "perf/cpu_memory_used_gb" not in out:
            import psutil

            out["perf/cpu_memory_used_gb"] = psutil.Process().memory_info().rss / 1024**3
        return out

    # ---- validation, samples, checkpoints ---------------------------------------------------------

    def validate(self) -> dict[str, float]:
        import torch

        from core.rewards import DIMENSIONS, PENALTIES

        if not self.val_records:
            return {}
        size = self.cfg.data.val_batch_size or len(self.val_records)
        t0 = time.monotonic()
        breakdowns: list[dict] = []
        # Sampled like the rollouts (greedy decoding of a small model loops and scores 0), from the same seed
        # each time so validations compare, and in a forked RNG so training's random stream is untouched.
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(self.seed)
            for i in range(0, len(self.val_records), size):
                batch = self.generate(self.val_records[i : i + size], 1)
                self.score(batch)
                breakdowns.extend(batch.breakdowns)
        means = reward_means(breakdowns, DIMENSIONS, PENALTIES)
        out = {f"val/{key}": value for key, value in means.items()}
        out["val/score/mean"] = means["reward/final/mean"]
        out["timing_s/testing"] = time.monotonic() - t0
        self.run_dir.event("validation", step=self.global_step, score=out["val/score/mean"], n=len(breakdowns))
        log.info("validation at step %d: score %.3f on %d tasks", self.global_step, out["val/score/mean"], len(breakdowns))
        return out

    def _samples(self, batch: Batch) -> list[dict]:
        count = max(0, self.cfg.devops.samples_per_step)
        picked = list(range(0, len(batch.uids), max(1, self.rollout.n)))[:count]
        return [
            {
                "task_id": batch.records[i]["task_id"],
                "prompt": batch.records[i]["prompt"][-1]["content"],
                "response": batch.texts[i],
                "reward": float(batch.scores[i]),
                "breakdown": batch.breakdowns[i],
            }
            for i in picked
        ]

    def save(self) -> None:
        from core.training.checkpoint import save_checkpoint

        if self._saved_step == self.global_step and (self.run_dir.checkpoints_dir / f"global_step_{self.global_step}").is_dir():
            return
        path = save_checkpoint(
            self.run_dir.checkpoints_dir,
            self.global_step,
            model=self.policy,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            trainer_state={"data": self.stream.state(), "uid_counter": self._uid_counter, "total_steps": self.total_steps,
                           "kl_coef": self.kl_coef, "base_model": str(self.base_path)},
            keep=self.cfg.devops.keep_checkpoints,
        )
        self._saved_step = self.global_step
        self.run_dir.event("checkpoint", step=self.global_step, path=str(path))
        log.debug("checkpoint %s", path)

    # ---- the run --------------------------------------------------------------------------------

    def _prepare(self) -> None:
        import numpy as np
        import torch

        from tasks.prompt import system_prompt
        from core.training.checkpoint import latest_checkpoint, load_checkpoint
        from core.training.sft import select_device
        from core.training.tiny_model import BUILTIN_TINY, resolve_model_path
        from tasks import load_tasks, split_tasks, to_record

        cfg = self.cfg
        self._check_supported()
        self.seed = cfg.devops.seed
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)
        self.device = select_device(cfg.devops.device)
        all_tasks = load_tasks()
        train_tasks, val_tasks = split_tasks(all_tasks, cfg.devops.val_fraction, self.seed)
        prompt = system_prompt()
        train_records = [to_record(t, prompt) for t in train_tasks]
        self.val_records = [to_record(t, prompt) for t in val_tasks]
        model_arg = cfg.actor_rollout_ref.model.path
        base = resolve_model_path(model_arg)
        if model_arg == BUILTIN_TINY and cfg.devops.sft_warmstart_steps > 0:
            from core.training.sft import SftSettings, ensure_warmstart

            settings = SftSettings(
                steps=cfg.devops.sft_warmstart_steps, batch_size=8, seed=self.seed,
                max_prompt_length=cfg.data.max_prompt_length, truncation=cfg.data.truncation,
                max_answer_tokens=2 * cfg.data.max_response_length,
                max_length=cfg.data.max_prompt_length + 2 * cfg.data.max_response_length,
            )
            base = ensure_warmstart(base, settings, train_tasks, device=cfg.devops.device)
        self.base_path = base
        checkpoint = latest_checkpoint(self.run_dir.checkpoints_dir) if self.resume else None
        if self.resume and checkpoint is None:
            log.warning("--resume: no checkpoint in %s; starting from step 0", self.run_dir.checkpoints_dir)
        self.tokenizer, self.policy, self.ref = self._load_models(base, checkpoint[1] if checkpoint else base)
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(),
            lr=self.actor.optim.lr,
            weight_decay=getattr(self.actor.optim, "weight_decay", 0.01),
            betas=tuple(getattr(self.actor.optim, "betas", (0.9, 0.999))),
        )
        steps_per_epoch = max(1, len(train_records) // cfg.data.train_batch_size)
        self.total_steps = cfg.trainer.total_training_steps or steps_per_epoch * cfg.trainer.total_epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_schedule(self.actor.optim.lr_scheduler_type, self.actor.optim.lr_warmup_steps_ratio, self.total_steps)
        )
        self.scorer = RewardScorer(cfg.devops.n_runners, cfg.devops.reward_weights)
        self._prompt_cache: dict[str, list[int]] = {}
        self._uid_counter = 0
        self.kl_coef = cfg.algorithm.kl_ctrl.kl_coef
        self.global_step = 0
        data_state = {"epoch": 0, "offset": 0}
        if checkpoint is not None:
            state = load_checkpoint(checkpoint[1], optimizer=self.optimizer, scheduler=self.scheduler)
            self.global_step = state["global_step"]
            self._uid_counter = state.get("uid_counter", 0)
            self.kl_coef = state.get("kl_coef", self.kl_coef)
            data_state = state["data"]
            self.run_dir.truncate_metrics_after(self.global_step)
            self.run_dir.event("resumed", step=self.global_step, checkpoint=str(checkpoint[1]))
            log.info("resumed from %s (step %d)", checkpoint[1], self.global_step)
        self._saved_step = self.global_step
        self.run_dir.update_meta(total_steps=self.total_steps)
        self.data_seed = cfg.data.seed if cfg.data.seed is not None else self.seed
        self.stream = PromptStream(train_records, shuffle=cfg.data.shuffle, seed=self.data_seed, **data_state)
        n_params = sum(p.numel() for p in self.policy.parameters())
        log.info(
            "torch backend on %s (%s): model %s (%.2fM params), %d train / %d val tasks, %d steps of %d prompts x %d",
            self.device, str(self.dtype).replace("torch.", ""), base, n_params / 1e6, len(train_records),
            len(self.val_records), self.total_steps, cfg.data.train_batch_size, self.rollout.n,
        )

    def run(self):
        from core.training.tiny_model import quiet_progress_bars

        with self.stop, quiet_progress_bars():
            try:
                self._prepare()
                trainer = self.cfg.trainer
                first_step = self.global_step
                started = time.monotonic()  # the ETA is from the steps' own pace (not the model build or warm-start)
                if trainer.val_before_train and self.global_step == 0 and trainer.test_freq and trainer.test_freq > 0:
                    self.run_dir.log_metrics(0, self.validate())
                while self.global_step < self.total_steps:
                    if self.stop:
                        raise _Stopped
                    before = (self.stream.state(), self._uid_counter)
                    self.global_step += 1
                    try:
                        metrics = self.step()
                    except _Stopped:  # abandon this step: its prompts are drawn again after --resume
                        self.global_step -= 1
                        self.stream = PromptStream(self.stream.records, shuffle=self.stream.shuffle, seed=self.data_seed, **before[0])
                        self._uid_counter = before[1]
                        raise
                    if trainer.test_freq and trainer.test_freq > 0 and (
                        self.global_step % trainer.test_freq == 0 or self.global_step == self.total_steps
                    ):
                        metrics.update(self.validate())
                    self.run_dir.log_metrics(self.global_step, metrics)
                    self.run_dir.log_samples(self.global_step, self._samples(self._last_batch))
                    if trainer.save_freq and trainer.save_freq > 0 and self.global_step % trainer.save_freq == 0:
                        self.save()
                    if self.progress is not None:
                        done = self.global_step - first_step
                        elapsed = time.monotonic() - started
                        rate = elapsed / max(done, 1)
                        self.progress({
                            "step": self.global_step, "total_steps": self.total_steps,
                            "epoch": self.stream.epoch, "metrics": metrics, "elapsed_s": elapsed,
                            "eta_s": rate * (self.total_steps - self.global_step),
                        })
                self.save()
                self.run_dir.set_status("finished", f"{self.global_step} steps")
                self.run_dir.event("finished", step=self.global_step)
            except _Stopped:
                if self.global_step > self._saved_step:
                    self.save()
                message = f"stopped by {self.stop.signal_name} at step {self.global_step}"
                self.run_dir.set_status("stopped", message)
                self.run_dir.event("stopped", step=self.global_step, signal=self.stop.signal_name)
                log.warning("%s; resume with --resume --run-dir %s", message, self.run_dir.path)
            except KeyboardInterrupt:
                self.run_dir.set_status("stopped", "aborted by a second interrupt (no checkpoint)")
                self.run_dir.event("stopped", step=self.global_step, signal="SIGINT", aborted=True)
                raise
            except BaseException as exc:
                message = str(exc) or type(exc).__name__
                self.run_dir.set_status("failed", message)
                self.run_dir.event("failed", step=self.global_step, message=message)
                raise
            finally:
                scorer = getattr(self, "scorer", None)
                if scorer is not None:
                    scorer.close()
        return self.run_dir


def next_kl_coef(kl_ctrl, coef: float, current_kl: float, n_seqs: int) -> float:
    """verl's KL controllers: fixed keeps the coefficient; adaptive (Ziegler et al.) moves it towards target_kl."""
    if kl_ctrl.type != "adaptive":
        return coef
    error = max(-0.2, min(0.2, current_kl / kl_ctrl.target_kl - 1))
    return coef * (1 + error * n_seqs / kl_ctrl.horizon)


def lr_schedule(kind: str, warmup_ratio: float, total_steps: int) -> Callable[[int], float]:
    """verl's schedules as a LambdaLR factor: linear warm-up over `warmup_ratio` of the steps, then constant
    or cosine decay to 0."""
    warmup = int(warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if kind == "cosine":
            progress = (step - warmup) / max(1, total_steps - warmup)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return factor


def reward_means(breakdowns: list[dict], dimensions, penalties) -> dict[str, float]:
    """`reward/<name>/mean` for every dimension and penalty, and `reward/final/mean`."""
    count = max(1, len(breakdowns))
    out = {f"reward/{name}/mean": sum(b["dimensions"].get(name, 0.0) for b in breakdowns) / count for name in dimensions}
    out.update({f"reward/{name}/mean": sum(b["penalties"].get(name, 0.0) for b in breakdowns) / count for name in penalties})
    out["reward/final/mean"] = sum(b["final_reward"] for b in breakdowns) / count
    return out


def run_native(cfg, *, mode: str, run_dir, resume: bool = False, progress: Callable[[dict], None] | None = None):
    """Run GRPO with the torch backend into `run_dir`; returns it (status finished or stopped)."""
    return NativeTrainer(cfg, mode=mode, run_dir=run_dir, resume=resume, progress=progress).run()
