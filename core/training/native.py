"""The native GRPO backend: one process, CPU or one CUDA GPU, plain torch + transformers.

Samples `n` responses per prompt, scores them with the reward, computes group advantages and updates the
policy with verl's clipped loss (`core_algos`), writing metrics, samples, events and checkpoints to the run folder.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

from core.errors import UserError
from core.runs import PLANNED_KEY
from core.runs.health import ZERO_STD as ZERO_STD_KEY
from core.training.batch import Batch, concat_batches
from core.training.curriculum import STAGE_EVENT, STAGE_KEY, StagedPromptStream
from core.training.metric_utils import sequence_advantages, zero_std_groups
from core.training.model_files import check_model_files, load_models
from core.training.signals import StopRequest
from core.training.step_outputs import StepOutputs, step_samples

log = logging.getLogger(__name__)


class _Stopped(Exception):
    """Raised inside the loop when a stop was requested; the current step is abandoned."""


class NativeTrainer:
    """GRPO on one device. `run()` returns when the run finished, stopped or failed (then it raises)."""

    def __init__(self, cfg, *, mode: str, run_dir, resume: bool = False, progress: Callable[[dict], None] | None = None):
        self.cfg, self.mode, self.run_dir, self.resume, self.progress = cfg, mode, run_dir, resume, progress
        self.stop = StopRequest()
        self.outputs: StepOutputs | None = None  # opened after start-up, closed however the run ends
        self.global_step = 0  # what a failure during start-up reports, before any checkpoint is read
        self.actor_cfg = cfg.actor_rollout_ref.actor
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

    # ---- rollout --------------------------------------------------------------------------------

    def generate(self, records: list[dict], n: int) -> Batch:
        """Sample `n` responses per record (interleaved: the group of a prompt is contiguous)."""
        batch = self.sampler.generate(records, n, first_uid=self._uid_counter, step=self.global_step)
        self._uid_counter += len(records)
        return batch

    def score(self, batch: Batch) -> None:
        import torch

        batch.breakdowns = self.scorer.score(batch.texts, [r["task"] for r in batch.records])
        batch.scores = torch.tensor([b["final_reward"] for b in batch.breakdowns], dtype=torch.float32, device=self.device)

    # ---- one step -------------------------------------------------------------------------------

    def collect(self) -> tuple[Batch, dict[str, float]]:
        """Generate and score one step's rollouts; with dynamic sampling, drop groups whose rewards are all
        equal and refill from the next prompts (up to filter_groups.max_num_gen_batches rounds)."""
        bs = self.cfg.data.train_batch_size
        n = self.rollout.n
        fg = self.cfg.algorithm.filter_groups
        kept: list[Batch] = []
        n_groups = rounds = dropped = 0
        groups_seen = groups_flat = 0  # every generated group, and those whose n rewards are all equal
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
            seen, flat = zero_std_groups(batch.scores, n)
            groups_seen, groups_flat = groups_seen + seen, groups_flat + flat
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
        metrics = {"timing_s/gen": gen_s, "timing_s/reward": reward_s, "batch/num_gen_batches": rounds,
                   "batch/dropped_groups": dropped}
        if groups_seen:
            metrics[ZERO_STD_KEY] = groups_flat / groups_seen
        return merged, metrics

    def step(self) -> dict[str, float]:
        import torch

        from core.training.core_algos import apply_kl_penalty, compute_grpo_outcome_advantage
        from core.training.metric_utils import compute_data_metrics, compute_memory_metrics

        t_step = time.monotonic()
        began = self.stream.at_step(self.global_step)
        if began is not None:
            self._stage_began(began, self.global_step)
        epoch = self.stream.epoch
        batch, metrics = self.collect()
        mask = batch.response_mask
        token_scores = torch.zeros_like(mask)
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        token_scores[torch.arange(len(last)), last] = batch.scores
        actor, algo = self.actor_cfg, self.cfg.algorithm
        single_update = actor.ppo_epochs <= 1 and actor.ppo_mini_batch_size >= self.cfg.data.train_batch_size
        t0 = time.monotonic()
        # One optimizer step on fresh rollouts: old log-probs equal the new ones (ratio 1), so skip the pass.
        old_log_prob = None if single_update and not algo.use_kl_in_reward else self.actor.log_prob_no_grad(self.policy, batch)
        metrics["timing_s/old_log_prob"] = time.monotonic() - t0
        ref_log_prob = None
        t0 = time.monotonic()
        if self.ref is not None:
            ref_log_prob = self.actor.log_prob_no_grad(self.ref, batch)
        metrics["timing_s/ref"] = time.monotonic() - t0
        token_rewards = token_scores
        if algo.use_kl_in_reward:
            token_rewards, current_kl = apply_kl_penalty(
                token_scores, old_log_prob, ref_log_prob, mask, self.kl_ctrl.value, algo.kl_penalty
            )
            metrics["actor/reward_kl_penalty"] = current_kl.item()
            metrics["actor/reward_kl_penalty_coeff"] = self.kl_ctrl.value
            self.kl_ctrl.update(current_kl.item(), len(batch.uids))
        advantages, _ = compute_grpo_outcome_advantage(
            token_rewards, mask, batch.uids, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo
        )
        self._last_advantages = sequence_advantages(advantages, mask)
        if self.stop:
            raise _Stopped
        t0 = time.monotonic()
        metrics.update(self.actor.update_policy(batch, advantages, old_log_prob, ref_log_prob, n=self.rollout.n,
                                                step=self.global_step, seed=self.seed))
        metrics["timing_s/update_actor"] = time.monotonic() - t0
        metrics.update(compute_data_metrics(batch, token_rewards, advantages, self.cfg.data.max_response_length))
        metrics["timing_s/step"] = time.monotonic() - t_step
        n_tokens = float(batch.attention_mask.sum())
        metrics["perf/total_num_tokens"] = n_tokens
        metrics["perf/throughput"] = n_tokens / max(metrics["timing_s/step"], 1e-9)
        metrics["perf/time_per_step"] = metrics["timing_s/step"]
        metrics.update(compute_memory_metrics(self.device))
        metrics["training/global_step"] = float(self.global_step)
        metrics["training/epoch"] = float(epoch)
        metrics[PLANNED_KEY] = float(self.total_steps)
        if self.cfg.devops.curriculum:
            metrics[STAGE_KEY] = float(self.stream.stage + 1)
        self._last_batch = batch
        return metrics

    # ---- validation, samples, checkpoints ---------------------------------------------------------

    def validate(self) -> dict[str, float]:
        import torch

        from core.rewards import DIMENSIONS, PENALTIES
        from core.rewards.pool import reward_means

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

    def save(self) -> None:
        from core.training.checkpoint import save_checkpoint

        if self._saved_step == self.global_step and (self.run_dir.checkpoints_dir / f"global_step_{self.global_step}").is_dir():
            return
        path = save_checkpoint(
            self.run_dir.checkpoints_dir,
            self.global_step,
            model=self.policy,
            tokenizer=self.tokenizer,
            optimizer=self.actor.optimizer,
            scheduler=self.actor.scheduler,
            trainer_state={"data": self.stream.state(), "uid_counter": self._uid_counter, "total_steps": self.total_steps,
                           "kl_coef": self.kl_ctrl.value, "base_model": str(self.base_path)},
            keep=self.cfg.devops.keep_checkpoints,
        )
        self._saved_step = self.global_step
        self.run_dir.event("checkpoint", step=self.global_step, path=str(path))
        log.debug("checkpoint %s", path)

    # ---- the run --------------------------------------------------------------------------------

    def _prepare(self) -> None:
        import numpy as np
        import torch

        from core.rewards.judge import JudgeSettings
        from core.rewards.pool import RewardScorer
        from core.training.core_algos import get_kl_controller
        from core.training.curriculum import distinct_tasks, planned_steps, training_stages
        from core.training.device import select_device
        from core.training.tiny_model import BUILTIN_TINY, resolve_model_path
        from tasks import to_record
        from tasks.prompt import system_prompt

        cfg = self.cfg
        self._check_supported()
        self.seed = cfg.devops.seed
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)
        self.device = select_device(cfg.devops.device)
        # devops.curriculum's stages, or one stage of devops.tasks (default tasks/data), weighted
        self.stages, val_tasks, _ = training_stages(cfg.devops)
        train_tasks = [t for stage in self.stages for t in stage.tasks]  # what the SFT warm-start reads
        prompt = system_prompt()
        records = {t.id: to_record(t, prompt) for t in distinct_tasks(self.stages)}
        stage_records = [[records[t.id] for t in stage.tasks] for stage in self.stages]
        self.val_records = [to_record(t, prompt) for t in val_tasks]
        model_arg = cfg.actor_rollout_ref.model.path
        base = resolve_model_path(model_arg)
        if model_arg == BUILTIN_TINY and cfg.devops.sft_warmstart_steps > 0:
            from core.training.sft import SftSettings, ensure_warmstart, warmstart_reporter

            settings = SftSettings(
                steps=cfg.devops.sft_warmstart_steps, batch_size=8, seed=self.seed,
                max_prompt_length=cfg.data.max_prompt_length, truncation=cfg.data.truncation,
                max_answer_tokens=cfg.data.max_response_length,
                max_length=cfg.data.max_prompt_length + cfg.data.max_response_length,
            )
            base = ensure_warmstart(base, settings, train_tasks, device=cfg.devops.device,
                                    progress=warmstart_reporter(self.run_dir))
        self.base_path = base
        self.total_steps = planned_steps(cfg, self.stages)
        self.scorer = RewardScorer(cfg.devops.n_runners, cfg.devops.reward_weights,
                                   judge=JudgeSettings.from_config(cfg.devops.reward.judge))
        self._uid_counter = 0
        self.kl_ctrl = get_kl_controller(cfg.algorithm.kl_ctrl)
        data_state = {"epoch": 0, "offset": 0}
        check_model_files(base)  # before any checkpoint is tried: a broken base model is not a broken checkpoint
        resumed = self._resume_from_checkpoint(base) if self.resume else None
        if resumed is None:
            self._build(base, base)
            if self.resume:  # never checkpointed (train_cmd refuses a run whose checkpoints were deleted)
                log.warning("--resume: no checkpoint in %s yet; starting again from step 0", self.run_dir.checkpoints_dir)
                self.run_dir.truncate_metrics_after(0)
                self.run_dir.event("warning", message="--resume: no checkpoint yet; started again from step 0")
        else:
            folder, state = resumed
            self.global_step = state["global_step"]
            self._uid_counter = state.get("uid_counter", 0)
            self.kl_ctrl.value = state.get("kl_coef", self.kl_ctrl.value)
            data_state = state["data"]
            self.run_dir.truncate_metrics_after(self.global_step)
            self.run_dir.event("resumed", step=self.global_step, checkpoint=str(folder))
            log.info("resumed from %s (step %d)", folder, self.global_step)
        self._saved_step = self.global_step
        self.run_dir.update_meta(total_steps=self.total_steps)
        self.data_seed = cfg.data.seed if cfg.data.seed is not None else self.seed
        self._stage_records = stage_records
        self.stream = self._stream(data_state)
        if self.global_step == 0:
            self._stage_began(self.stages[0], 1)
        n_params = sum(p.numel() for p in self.policy.parameters())
        log.info(
            "torch backend on %s (%s): model %s (%.2fM params), %d train / %d val tasks, %d steps of %d prompts x %d",
            self.device, str(self.dtype).replace("torch.", ""), base, n_params / 1e6, len(train_tasks),
            len(self.val_records), self.total_steps, cfg.data.train_batch_size, self.rollout.n,
        )

    def _stream(self, state: dict) -> StagedPromptStream:
        """The prompt stream at a saved position (a checkpoint from before curricula has no stage: stage 0)."""
        return StagedPromptStream(self.stages, self._stage_records, shuffle=self.cfg.data.shuffle, seed=self.data_seed,
                                  **state)

    def _stage_began(self, stage, step: int) -> None:
        """A curriculum stage takes over the prompts: an event the cockpit reads, and a log line."""
        if not self.cfg.devops.curriculum:
            return
        self.run_dir.event(STAGE_EVENT, step=step, stage=stage.index + 1, of=len(self.stages), mix=stage.label(),
                           tasks=len(stage.tasks))
        log.info("curriculum stage %d/%d from step %d: %s (%d prompts a pass)", stage.index + 1, len(self.stages),
                 step, stage.label(), len(stage.tasks))

    def _build(self, model_path: Path, policy_path: Path) -> None:
        """Models, optimizer, scheduler and actor, with the policy's weights from `policy_path`."""
        import torch

        from core.training.actor import Actor
        from core.training.core_algos import lr_schedule
        from core.training.rollout import RolloutSampler

        self.tokenizer, self.policy, self.ref = load_models(self.cfg, self.device, model_path, policy_path)
        self.dtype = self.policy.dtype
        optim = self.actor_cfg.optim
        optimizer = torch.optim.AdamW(self.policy.parameters(), lr=optim.lr, weight_decay=optim.weight_decay,
                                      betas=tuple(optim.betas))
        warmup = int(optim.lr_warmup_steps_ratio * self.total_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(optim.lr_scheduler_type, warmup, self.total_steps))
        self.actor = Actor(self.policy, optimizer, scheduler, self.actor_cfg, temperature=self.rollout.temperature)
        self.sampler = RolloutSampler(self.cfg, self.tokenizer, self.policy, self.device)

    def _resume_from_checkpoint(self, base: Path) -> tuple[Path, dict] | None:
        """Load the newest checkpoint that loads whole; (folder, trainer state), or None when the run never wrote one.

        Each newer one that does not load is set aside (renamed, never deleted) with a warning, so the step's next
        save is not blocked by it. When none loads, nothing is renamed and a UserError says why.
        """
        import pickle

        import torch

        from core.training.checkpoint import STATE_FILE, list_checkpoints, load_checkpoint, set_aside

        found = list_checkpoints(self.run_dir.checkpoints_dir)
        unreadable: list[tuple[int, Path, str]] = []
        for step, folder in reversed(found):
            try:
                self._build(base, folder)
                state = load_checkpoint(folder, optimizer=self.actor.optimizer, scheduler=self.actor.scheduler)
                if state.get("global_step") != step or not isinstance(state.get("data"), dict):
                    raise ValueError(f"{STATE_FILE} does not hold step {step} and its data position")
            except torch.OutOfMemoryError:
                raise
            except (UserError, OSError, ValueError, KeyError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
                unreadable.append((step, folder, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__))
                continue
            for bad_step, bad, reason in unreadable:
                kept = set_aside(bad)
                message = (f"checkpoint of step {bad_step} cannot be loaded ({reason}); resumed from step {step} "
                           f"instead, the broken one kept as {kept.name}")
                log.warning("%s", message)
                self.run_dir.event("warning", message=message)
            return folder, state
        if unreadable:
            raise UserError(f"--resume: none of the {len(found)} checkpoints in {self.run_dir.checkpoints_dir} loads "
                            f"(the newest: {unreadable[0][2]}); restore one, or start a new run")
        return None

    def _startup_failed(self, exc: BaseException) -> None:
        """A failure before the first step: a resume attempt puts the run's status back as it was (a finished run
        stays finished, a stopped one resumable); a new run is failed, or stopped by a second Ctrl-C."""
        message = str(exc) or type(exc).__name__
        if self.run_dir.undo_resume(message):
            return
        if isinstance(exc, KeyboardInterrupt):
            self.run_dir.set_status("stopped", "aborted during start-up (no checkpoint)")
            self.run_dir.event("stopped", step=0, signal=self.stop.signal_name or "SIGINT", aborted=True)
        else:
            self.run_dir.set_status("failed", message)
            self.run_dir.event("failed", step=0, message=message)

    def run(self):
        from core.training.tiny_model import quiet_progress_bars

        with self.stop, quiet_progress_bars():
            try:
                self._prepare()
                self.outputs = StepOutputs(self.cfg, self.run_dir, vocab_size=len(self.tokenizer))
            except BaseException as exc:
                self._startup_failed(exc)
                if self.outputs is not None:
                    self.outputs.close(1)
                scorer = getattr(self, "scorer", None)
                if scorer is not None:
                    scorer.close()
                raise
            self.run_dir.resume_started()
            try:
                trainer = self.cfg.trainer
                first_step = self.global_step
                started = time.monotonic()  # the ETA is from the steps' own pace (not the model build or warm-start)
                if trainer.val_before_train and self.global_step == 0 and trainer.test_freq and trainer.test_freq > 0:
                    self.outputs.log(0, self.validate())
                while self.global_step < self.total_steps:
                    if self.stop:
                        raise _Stopped
                    before = (self.stream.state(), self._uid_counter)
                    self.global_step += 1
                    try:
                        metrics = self.step()
                    except _Stopped:  # abandon this step: its prompts are drawn again after --resume
                        self.global_step -= 1
                        self.stream = self._stream(before[0])
                        self._uid_counter = before[1]
                        raise
                    if trainer.test_freq and trainer.test_freq > 0 and (
                        self.global_step % trainer.test_freq == 0 or self.global_step == self.total_steps
                    ):
                        metrics.update(self.validate())
                    samples = step_samples(self._last_batch, getattr(self, "_last_advantages", None), self.rollout.n,
                                           self.cfg.devops.samples_per_step)
                    self.outputs.log(self.global_step, metrics, samples)
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
                self.outputs.close(0 if self.run_dir.meta().get("status") in ("finished", "stopped") else 1)
                scorer = getattr(self, "scorer", None)
                if scorer is not None:
                    scorer.close()
        return self.run_dir


def run_native(cfg, *, mode: str, run_dir, resume: bool = False, progress: Callable[[dict], None] | None = None):
    """Run GRPO with the torch backend into `run_dir`; returns it (status finished or stopped)."""
    return NativeTrainer(cfg, mode=mode, run_dir=run_dir, resume=resume, progress=progress).run()
