"""verl extension: trainer modes `devops_<mode>` that log `reward/<dimension>/mean` at every training step.

verl 0.9 keeps each sample's reward breakdown (`reward_extra_info`) but puts it in metrics only at
validation. Loaded in verl's processes through `VERL_USE_EXTERNAL_MODULES` (see docs/gpu.md); selected by
`trainer.v1.trainer_mode=devops_sync`, which compose.py sets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)

MODE_PREFIX = "devops_"


def reward_metrics(extra_fields: Iterable, keep: Sequence[bool] | None = None) -> dict[str, float]:
    """`reward/<name>/mean` for every dimension and penalty plus `reward/final/mean`, over the samples'
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
    return reward_means(breakdowns, DIMENSIONS, PENALTIES) if breakdowns else {}


class RewardDimensionMetrics:
    """Mixin for a verl v1 PPOTrainer: after verl's own step metrics, add the per-dimension reward means."""

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


def register() -> list[str]:
    """Register `devops_<mode>` for every v1 trainer mode verl has (sync, colocate_async, ...); idempotent."""
    import verl.trainer.ppo.v1  # noqa: F401  (importing it registers verl's own modes)
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer

    added = []
    for name, cls in list(TRAINER_REGISTRY.items()):
        if name.startswith(MODE_PREFIX) or (MODE_PREFIX + name) in TRAINER_REGISTRY:
            continue
        subclass = type(f"Devops{cls.__name__}", (RewardDimensionMetrics, cls), {"__module__": __name__})
        register_trainer(MODE_PREFIX + name)(subclass)
        added.append(MODE_PREFIX + name)
    return added


register()
