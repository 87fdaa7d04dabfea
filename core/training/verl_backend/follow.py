"""Following what verl writes while it trains: its metrics, validations, checkpoints and rollout dumps copied
into the run folder (`MetricsPump`), and its start-up stages watched for a stall (`StartupWatchdog`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from core.errors import UserError

log = logging.getLogger(__name__)

VERL_METRICS_NAME = "metrics.jsonl"  # verl's file logger, inside the run's verl/ folder
STARTUP_NAME = "startup.jsonl"  # start-up stages noted by verl's TaskRunner and trainer (extension.startup_note)
LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"
VAL_SCORE_KEY = "val/score/mean"  # the native backend's validation key, so viewers need no verl special case
ROLLOUT_SETTLE_S = 2.0  # a rollout dump untouched this long is complete

# The start-up watchdog: the longest wait for the next stage before the run fails. Each stage is one that
# verl can wait in forever without a word (Ray resources that never free up); "ready" ends the watch.
STARTUP_TIMEOUT_ENV = "DEVOPS_RL_VERL_STARTUP_TIMEOUT_S"  # seconds for every stage, and/or stage=seconds entries
STARTUP_STAGES = {
    "launched": (600.0, "verl's TaskRunner never started in Ray: see train.log, and 'ray status' for a cluster "
                        "that cannot place it"),
    "runner": (600.0, "TransferQueue or the trainer never started: 'ray status' shows what Ray is waiting for"),
    "trainer": (3600.0, "verl's workers never came up (each GPU worker waits for 3 CPUs + 1 GPU in Ray, then loads "
                        "the model and starts vLLM): see 'ray status' and train.log"),
    # verl's TaskRunner starts the agent loop only after trainer.init(): its rollout servers and
    # rollout.agent.num_workers worker actors, each waiting for a CPU in Ray.
    "agent_loop": (1800.0, "verl's agent loop never started (its rollout servers and agent-loop workers, one Ray CPU "
                           "each: actor_rollout_ref.rollout.agent.num_workers): see 'ray status' and train.log"),
}


def validation_score(data: dict) -> float | None:
    """Mean validation reward over verl's `val-core/<data_source>/reward/mean@N` keys (one per task type)."""
    values = [v for k, v in data.items() if k.startswith("val-core/") and "/reward/mean@" in k
              and isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def latest_checkpoint_step(checkpoints: Path) -> int | None:
    """The step verl last checkpointed (its `latest_checkpointed_iteration.txt`), or None."""
    try:
        return int((Path(checkpoints) / LATEST_CHECKPOINT).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


class MetricsPump:
    """Copies verl's file-logger records into the run folder, adding the driver's NVML/host figures and
    turning validations, checkpoints and rollout dumps into events and samples. One `poll()` per tick."""

    def __init__(self, run_dir, verl_dir: Path, *, sample: Callable[[], dict] | None = None,
                 progress: Callable[[dict], None] | None = None, samples_per_step: int = 4) -> None:
        from core.runs import FileTail

        self.run_dir = run_dir
        self.tail = FileTail(Path(verl_dir) / VERL_METRICS_NAME)
        self.rollouts = Path(verl_dir) / "rollouts"
        self.sample = sample
        self.progress = progress
        self.samples_per_step = samples_per_step
        self.last_step: int | None = None
        self._checkpoint = latest_checkpoint_step(run_dir.checkpoints_dir)
        self._rollouts_seen: set[str] = set()
        self._started = time.monotonic()
        self._first_step: int | None = None

    def poll(self, *, final: bool = False) -> int:
        """Handle everything new; returns how many metric records were copied. `final`: verl has exited,
        so every rollout dump is complete, however recent."""
        copied = 0
        for record in self.tail.poll_records():
            step, data = record.get("step"), record.get("data")
            if not isinstance(step, int) or not isinstance(data, dict):
                continue
            if self.sample is not None:
                for key, value in self.sample().items():
                    data.setdefault(key, value)
            score = validation_score(data)
            if score is not None:
                data.setdefault(VAL_SCORE_KEY, score)
            self.run_dir.log_metrics(step, data)
            copied += 1
            self.last_step = step
            if score is not None:
                self.run_dir.event("validation", step=step, score=score)
            if self.progress is not None:
                self.progress(self._progress(step, data))
        self._poll_checkpoint()
        self._poll_rollouts(final)
        return copied

    def _progress(self, step: int, data: dict) -> dict:
        """The same progress record the native backend reports."""
        if self._first_step is None:
            self._first_step = step - 1
        total = self.run_dir.meta().get("total_steps")
        elapsed = time.monotonic() - self._started
        rate = elapsed / max(step - self._first_step, 1)
        return {"step": step, "total_steps": total, "epoch": data.get("training/epoch"), "metrics": data,
                "elapsed_s": elapsed, "eta_s": rate * (total - step) if isinstance(total, int) else None}

    def _poll_checkpoint(self) -> None:
        step = latest_checkpoint_step(self.run_dir.checkpoints_dir)
        if step is not None and step != self._checkpoint:
            self._checkpoint = step
            self.run_dir.event("checkpoint", step=step, path=str(self.run_dir.checkpoints_dir / f"global_step_{step}"))

    def _poll_rollouts(self, final: bool) -> None:
        """verl's `trainer.rollout_data_dir` dumps `<step>.jsonl` (input, output, score, gts) per step; a few
        per step become samples, re-scored here for their breakdown (the reward is cheap and deterministic)."""
        if self.samples_per_step <= 0 or not self.rollouts.is_dir():
            return
        from core.runs import read_jsonl

        now = time.time()
        for path in sorted(self.rollouts.glob("*.jsonl")):
            try:
                stat = path.stat()
            except OSError:
                continue
            key = (path.name, stat.st_mtime_ns)
            settling = not final and now - stat.st_mtime < ROLLOUT_SETTLE_S
            if key in self._rollouts_seen or not path.stem.isdigit() or settling:
                continue  # seen, not a step dump, or verl's writer thread may still be on it
            self._rollouts_seen.add(key)
            rows = read_jsonl(path)[: self.samples_per_step]
            if rows:
                self.run_dir.log_samples(int(path.stem), [rollout_sample(row) for row in rows])

    def skip_existing_rollouts(self) -> None:
        """Mark the dumps already on disk (an earlier attempt's) as seen; rewritten ones count as new."""
        if self.rollouts.is_dir():
            self._rollouts_seen.update((p.name, p.stat().st_mtime_ns) for p in self.rollouts.glob("*.jsonl"))


def rollout_sample(row: dict) -> dict:
    """A samples.jsonl entry from one verl rollout-dump row (its `gts` is our ground_truth JSON)."""
    from core.rewards.pool import score_one
    from core.training.verl_backend.reward_fn import grading_inputs

    sample = {"task_id": None, "prompt": row.get("input"), "response": row.get("output"), "reward": row.get("score"),
              "breakdown": None}
    try:
        task, weights = grading_inputs(row.get("gts"), None)
    except Exception:  # not our row format: keep what verl gave
        return sample
    sample["task_id"] = task.get("id")
    sample["breakdown"] = score_one((row.get("output") or "", task, weights))
    return sample


class StartupWatchdog:
    """Fails a verl start that stalls: verl waits silently for Ray resources that never come. Reads the
    stages verl's TaskRunner and trainer note (runner -> trainer -> agent_loop -> ready); ends at "ready" or the
    first step."""

    def __init__(self, verl_dir: Path, limits: dict[str, float]) -> None:
        from core.runs import FileTail

        self.tail = FileTail(Path(verl_dir) / STARTUP_NAME)
        self.limits = limits
        self.stage, self.since, self.done = "launched", time.monotonic(), False

    def poll(self, stepped: bool = False) -> str | None:
        """None while the start-up moves on (or is over); the failure message once a stage outlasts its limit."""
        if self.done:
            return None
        for note in self.tail.poll_records():
            self.stage, self.since = str(note.get("stage")), time.monotonic()
            log.info("verl start-up: %s", note)
        if stepped or self.stage not in self.limits:
            self.done = True
            return None
        waited = time.monotonic() - self.since
        if waited < self.limits[self.stage]:
            return None
        return (f"verl made no start-up progress for {waited:.0f} s after stage '{self.stage}': "
                f"{STARTUP_STAGES[self.stage][1]} (limit: {STARTUP_TIMEOUT_ENV})")


def startup_limits() -> dict[str, float]:
    """Each start-up stage's limit in seconds: the defaults, changed by `DEVOPS_RL_VERL_STARTUP_TIMEOUT_S`: a
    number for every stage, `stage=N` for one (comma-separated, later entries win: `600,trainer=120`)."""
    text = os.environ.get(STARTUP_TIMEOUT_ENV, "").strip()
    limits = {stage: limit for stage, (limit, _) in STARTUP_STAGES.items()}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        stage, _, value = entry.rpartition("=")
        stage = stage.strip()
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if stage and stage not in limits:
            raise UserError(f"{STARTUP_TIMEOUT_ENV}: {text!r}: no start-up stage {stage!r}; the stages are "
                            f"{', '.join(limits)}")
        if not seconds > 0:
            raise UserError(f"{STARTUP_TIMEOUT_ENV}: {text!r}: must be a number of seconds > 0, or stage=seconds "
                            "entries (e.g. 600,trainer=120); unset for the defaults")
        limits.update({stage: seconds} if stage else dict.fromkeys(limits, seconds))
    return limits
