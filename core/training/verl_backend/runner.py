"""verl's v1 TaskRunner with this project's trainer: `run()` checks the cluster's CPUs, then has verl build
the per-dimension reward subclass of the trainer its own `trainer_mode` names (sync, colocate_async, ...).

Imported only where verl runs (the launcher's child, and Ray when it starts the actor), so verl and Ray are
imported at the top. verl keeps its own mode names, so its `trainer_mode == "sync"` branches still apply.
"""

from __future__ import annotations

import ray
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.v1 import get_trainer_cls, trainer_base

from core.training.verl_backend.detect import check_cpus
from core.training.verl_backend.extension import RewardDimensionMetrics, startup_note, with_reward_dimensions

# The plain class under verl's `@ray.remote`: Ray refuses subclasses of an actor class itself.
_VerlTaskRunner = TaskRunnerV1.__ray_metadata__.modified_class.__ray_actor_class__


class DevopsTaskRunner(_VerlTaskRunner):
    def run(self, config):
        mode = config.trainer.v1.trainer_mode
        verl_trainer = get_trainer_cls(mode)
        trainer = with_reward_dimensions(verl_trainer)
        startup_note("runner", mode=mode, trainer=trainer.__name__, verl_trainer=verl_trainer.__name__,
                     reward_metrics=trainer._compute_metrics is RewardDimensionMetrics._compute_metrics)
        check_cpus(config, ray.cluster_resources().get("CPU", 0), cluster=True)
        # verl's run() looks the mode up in its registry; this actor process runs nothing else meanwhile.
        registry = trainer_base.TRAINER_REGISTRY
        registry[mode] = trainer
        try:
            super().run(config)
        finally:
            registry[mode] = verl_trainer

    def init_agent_loop_manager(self):
        """verl's own, after trainer.init(): its rollout servers and agent-loop workers; the watchdog's last stage."""
        super().init_agent_loop_manager()
        startup_note("ready")


RemoteTaskRunner = ray.remote(DevopsTaskRunner)
