"""What each training step writes besides its metrics line: samples, trackers, health alerts.

`StepOutputs` feeds the run folder, the `trainer.logger` trackers and the health monitor; `step_samples` picks the answers.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def step_samples(batch, advantages: list[float] | None, n: int, groups: int) -> list[dict]:
    """The step's answers for `groups` prompts, each prompt's whole group (its n answers with their advantages),
    with the prompt, the full answer and the reward breakdown (evidence and rubric)."""
    n = max(1, n)
    starts = list(range(0, len(batch.uids), n))[: max(0, groups)]
    advantages = advantages or [None] * len(batch.uids)
    return [
        {
            "task_id": batch.records[i]["task_id"],
            "group": batch.uids[i],
            "prompt": batch.records[i]["prompt"][-1]["content"],
            "response": batch.texts[i],
            "reward": float(batch.scores[i]),
            "advantage": advantages[i],
            "breakdown": batch.breakdowns[i],
        }
        for start in starts
        for i in range(start, min(start + n, len(batch.uids)))
    ]


class StepOutputs:
    """The health monitor, whose new alerts become `alert` events, and the `trainer.logger` trackers (tensorboard,
    wandb) where verl would write them, next to the run folder's metrics and samples."""

    def __init__(self, cfg, run_dir, vocab_size: int):
        from core.runs import HealthMonitor, Thresholds
        from core.runs.export import open_trackers

        trainer = cfg.trainer
        self.run_dir = run_dir
        self.health = HealthMonitor(Thresholds.from_mapping(cfg.devops.alerts.model_dump()), vocab_size=vocab_size)
        self.trackers = open_trackers(trainer.logger, project=trainer.project_name,
                                      experiment=trainer.experiment_name, config=cfg.to_dict())

    def log(self, step: int, metrics: dict[str, float], samples: list[dict] | None = None) -> None:
        """One step's metrics (and samples) into the run folder and every tracker; new alerts as events."""
        self.run_dir.log_metrics(step, metrics)
        if samples is not None:
            self.run_dir.log_samples(step, samples)
        for tracker in self.trackers:
            tracker.log_metrics(step, metrics)
            if samples:
                tracker.log_samples(step, samples)
        self.health.add(step, metrics)
        for alert in self.health.poll_new():
            self.run_dir.event("alert", **alert.to_event())
            log.warning("alert: %s", alert.message)

    def close(self, exit_code: int) -> None:
        for tracker in self.trackers:
            try:
                tracker.close(exit_code)
            except Exception as exc:  # a tracker must not hide how the run ended
                log.warning("closing %s: %s", type(tracker).__name__, exc)
