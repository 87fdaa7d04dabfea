"""verl extension: the trainer subclass that logs `reward/<dimension>/mean` and the rubric's
`reward/rubric/mean` at every training step, and the start-up notes the launcher's watchdog reads.

verl 0.9 keeps each sample's reward breakdown (`reward_extra_info`) but puts it in metrics only at
validation. `runner.DevopsTaskRunner` swaps this subclass in for the trainer of verl's own mode.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)


RUBRIC_PASSED = "reward/rubric/criteria_passed/mean"  # the mean share of a sample's rubric criteria it met


def reward_metrics(extra_fields: Iterable, keep: Sequence[bool] | None = None) -> dict[str, float]:
    """`reward/<name>/mean` for every dimension and penalty plus `reward/final/mean`, and for samples whose task
    has a rubric `reward/rubric/mean` and `reward/rubric/criteria_passed/mean`, over the samples'
    `extra_fields["reward_extra_info"]` (rows where `keep` is False, i.e. padding, are left out)."""
    from core.rewards import DIMENSIONS, PENALTIES
    from core.rewards.pool import reward_means
    from core.training.verl_backend.reward_fn import FINAL_KEY, unflatten

    breakdowns = []
    for i, fields in enumerate(extra_fields):
        if keep is not None and not keep[i]:
            continue
        info = fields.get("reward_extra_info") if isinstance(fields, dict) else None
        if isinstance(info, dict) and FINAL_KEY in info:
            breakdowns.append(unflatten(info))
    if not breakdowns:
        return {}
    metrics = reward_means(breakdowns, DIMENSIONS, PENALTIES)
    passed = [b["rubric"]["passed"] for b in breakdowns if b["rubric"]["passed"] is not None]
    if passed:
        metrics[RUBRIC_PASSED] = sum(passed) / len(passed)
    return metrics


def startup_note(stage: str, **fields) -> None:
    """Append a start-up stage to the run's `verl/startup.jsonl` (the path verl's processes get in
    `DEVOPS_RL_STARTUP_FILE`); nothing outside a devops-rl run."""
    from core.runs import append_jsonl
    from core.training.verl_backend.compose import STARTUP_FILE_ENV

    path = os.environ.get(STARTUP_FILE_ENV)
    if not path:
        return
    try:
        append_jsonl(path, {"time": time.time(), "stage": stage, "host": socket.gethostname(), "pid": os.getpid(),
                            **fields})
    except OSError as exc:  # the run folder is not shared with this node: the watchdog will say so
        log.warning("could not write start-up note %s to %s: %s", stage, path, exc)


class RewardDimensionMetrics:
    """Mixin for a verl v1 PPOTrainer: after verl's own step metrics, add the per-dimension reward means;
    around verl's `init()` (workers, models), note the start-up stages (the TaskRunner notes `ready` once
    the agent loop that follows is up)."""

    def init(self):
        startup_note("trainer", trainer=type(self).__name__)
        super().init()
        startup_note("agent_loop")

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        try:
            metrics.update(self._reward_dimension_metrics(batch))
        except Exception:  # a metrics extra must never stop a training run
            log.warning("per-dimension reward metrics failed at step %s", global_steps, exc_info=True)

    def _reward_dimension_metrics(self, batch) -> dict[str, float]:
        import transfer_queue as tq

        keep = [not tag.get("is_padding", False) for tag in batch.tags]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        extra = data.pop("extra_fields", None)
        if extra is None:
            return {}
        # As verl's own _validate reads it: NonTensorStack / numpy give .tolist(), TQ's LinkedList is a list.
        return reward_metrics(extra.tolist() if hasattr(extra, "tolist") else list(extra), keep)


@functools.cache
def with_reward_dimensions(trainer_cls: type) -> type:
    """`trainer_cls` (any verl v1 trainer: sync, colocate_async, ...) with the per-dimension metrics."""
    return type(f"Devops{trainer_cls.__name__}", (RewardDimensionMetrics, trainer_cls), {"__module__": __name__})
