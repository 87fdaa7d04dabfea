"""Validating a training config the way verl would: batch arithmetic, ranges, frequencies, the model's context.

Each problem is one line, `key: value: why; fix`; `native_ignored_settings` lists what only verl uses.
"""

from __future__ import annotations

import logging
import math

from core.training.config.model_info import model_context_length
from core.training.config.schema import GROUP_ESTIMATORS, VERL_OVERRIDES, TrainingConfig

log = logging.getLogger(__name__)


def _train_split_size(cfg: TrainingConfig) -> int | None:
    """How many tasks the training split holds (devops.tasks, weighted), or None if the tasks cannot be read or
    a curriculum deals them (each stage has its own tasks, and a stage's stream wraps around)."""
    if cfg.devops.curriculum:
        return None
    try:
        from tasks.sources import config_split

        train, _, _ = config_split(cfg.devops)
    except Exception as exc:  # the tasks have their own command and errors; validation should not fail on them
        log.debug("total_steps: tasks unavailable: %s", exc)
        return None
    return len(train)


def _curriculum_steps(cfg: TrainingConfig) -> int | None:
    """The steps of devops.curriculum's stages (core.training.curriculum.planned_steps), or None if its tasks
    cannot be read."""
    if cfg.devops.curriculum[-1].steps is not None:
        return sum(stage.steps for stage in cfg.devops.curriculum)
    try:
        from core.training.curriculum import planned_steps, training_stages

        return planned_steps(cfg, training_stages(cfg.devops)[0])
    except Exception as exc:  # as above: the run itself reports a bad source, with its key
        log.debug("total_steps: curriculum unavailable: %s", exc)
        return None


def total_steps(cfg: TrainingConfig, n_train: int | None = None) -> int | None:
    """The run's optimizer steps: trainer.total_training_steps, else total_epochs x (training tasks // batch size),
    as verl's drop-last data loader counts them. `n_train` is the training split's size when the caller holds it
    (the trainer); otherwise the built-in tasks are split here, or devops.curriculum's stages are counted as the
    torch backend runs them. None when the tasks cannot be read."""
    if cfg.trainer.total_training_steps:
        return cfg.trainer.total_training_steps
    if cfg.devops.curriculum and n_train is None:
        return _curriculum_steps(cfg)
    if n_train is None:
        n_train = _train_split_size(cfg)
    if n_train is None:
        return None
    return max(1, n_train // cfg.data.train_batch_size) * cfg.trainer.total_epochs


def _batch_problems(cfg: TrainingConfig, gpus: int) -> list[str]:
    """verl's batch-size arithmetic (`validate_config`, `ActorConfig.validate`, the FSDP worker's normalisation)."""
    data, actor, rollout = cfg.data, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    if cfg.verl_overrides.get("actor_rollout_ref.actor.use_dynamic_bsz") is True:
        return []  # verl skips these checks when sequences are packed by token count
    problems = []
    real_batch = data.train_batch_size * rollout.n
    if real_batch % gpus:
        problems.append(f"data.train_batch_size: {data.train_batch_size}: train_batch_size x rollout.n = {real_batch} "
                        f"is not divisible by the {gpus} GPUs; use a multiple of {gpus // math.gcd(gpus, rollout.n)}")
    if actor.ppo_mini_batch_size > data.train_batch_size:
        problems.append(f"actor_rollout_ref.actor.ppo_mini_batch_size: {actor.ppo_mini_batch_size}: larger than "
                        f"data.train_batch_size ({data.train_batch_size}); set it <= {data.train_batch_size}")
        return problems
    mini_per_gpu = actor.ppo_mini_batch_size * rollout.n // gpus  # verl normalises the mini-batch like this
    micro = actor.ppo_micro_batch_size_per_gpu
    if mini_per_gpu == 0:
        problems.append(f"actor_rollout_ref.actor.ppo_mini_batch_size: {actor.ppo_mini_batch_size}: x rollout.n "
                        f"({rollout.n}) is smaller than the {gpus} GPUs; raise it to >= {math.ceil(gpus / rollout.n)}")
    elif micro > mini_per_gpu:
        problems.append(f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: {micro}: larger than the mini-batch per "
                        f"GPU ({mini_per_gpu} = ppo_mini_batch_size x n / GPUs); set it <= {mini_per_gpu}")
    elif mini_per_gpu % micro:
        problems.append(f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: {micro}: does not divide the mini-batch "
                        f"per GPU ({mini_per_gpu}); use a divisor of {mini_per_gpu}")
    return problems


def machine_memory_gib() -> float:
    """The most memory one device of this machine offers the native backend: its RAM, or its largest GPU's."""
    import os

    from core.training import sysmon

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return max([ram, *sysmon.gpu_memory_total_gb()])


def _size_problems(cfg: TrainingConfig, n_train: int | None) -> list[str]:
    """Sizes no run of this config could get through: a batch larger than the task set, a step larger than memory."""
    from core.training import doctor

    problems = []
    data, rollout = cfg.data, cfg.actor_rollout_ref.rollout
    if n_train is not None and data.train_batch_size > n_train:
        problems.append(f"data.train_batch_size: {data.train_batch_size}: larger than the {n_train} training tasks; "
                        "verl's data loader drops an incomplete batch, so not one step would run; set it <= "
                        f"{n_train} (or lower devops.val_fraction)")
    if doctor._layout(cfg) != "torch":
        return problems  # vLLM pages its KV cache and verl shards the update: the doctor's estimate applies there
    shape = doctor.model_shape(cfg.actor_rollout_ref.model.path, build_builtin=False)
    estimate = doctor.estimate_memory(cfg, gpu_mem_gib=0, shape=shape, layout="torch") if shape else None
    available = machine_memory_gib()
    if estimate is not None and estimate.peak_gib > available:
        problems.append(f"data.train_batch_size: {data.train_batch_size}: one step of the torch backend needs about "
                        f"{estimate.peak_gib:,.0f} GiB ({data.train_batch_size} x rollout.n {rollout.n} sequences of "
                        f"{data.max_prompt_length + data.max_response_length} tokens), more than the {available:,.0f} "
                        "GiB of this machine; lower data.train_batch_size, rollout.n or the max lengths")
    return problems


def validate(cfg: TrainingConfig, n_gpus: int | None = None) -> list[str]:
    """Problems verl (or the native backend) would hit, one per string: "key: value: why; fix". Empty when fine."""
    problems: list[str] = []
    data, actor, rollout = cfg.data, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    trainer, algo = cfg.trainer, cfg.algorithm
    gpus = trainer.n_gpus_per_node * trainer.nnodes
    if n_gpus is not None and gpus > n_gpus:
        problems.append(f"trainer.n_gpus_per_node: {trainer.n_gpus_per_node}: asks for {gpus} GPUs but {n_gpus} "
                        f"{'is' if n_gpus == 1 else 'are'} available; set trainer.n_gpus_per_node={max(n_gpus, 1)}")
    problems += _batch_problems(cfg, gpus)
    n_train = _train_split_size(cfg)
    problems += _size_problems(cfg, n_train)
    if algo.adv_estimator in GROUP_ESTIMATORS and rollout.n < 2:
        problems.append(f"actor_rollout_ref.rollout.n: {rollout.n}: {algo.adv_estimator} compares the responses to "
                        "one prompt, so it needs at least 2; set rollout.n >= 2 (4 is the usual balance)")
    if algo.adv_estimator in GROUP_ESTIMATORS and rollout.temperature == 0:
        problems.append("actor_rollout_ref.rollout.temperature: 0: greedy sampling gives identical responses per prompt "
                        "and zero advantages; use a temperature around 1.0")
    if not 0 < actor.clip_ratio_low < 1:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_low: {actor.clip_ratio_low}: must be in (0, 1); 0.2 is usual")
    if actor.clip_ratio_high <= 0:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_high: {actor.clip_ratio_high}: must be > 0; 0.2-0.3 is usual "
                        "(clip-higher: 0.28)")
    elif actor.clip_ratio_high > 1:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_high: {actor.clip_ratio_high}: above 1 lets the policy "
                        "more than double a token's probability per update; keep it <= 0.4")
    if actor.clip_ratio_c <= 1:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_c: {actor.clip_ratio_c}: dual-clip bound must be > 1; 3.0 is usual")
    if not actor.optim.lr > 0:
        problems.append(f"actor_rollout_ref.actor.optim.lr: {actor.optim.lr}: must be > 0; start at 1e-6 for a 7B model")
    elif actor.optim.lr > 1e-2:
        problems.append(f"actor_rollout_ref.actor.optim.lr: {actor.optim.lr}: far too high for fine-tuning (diverges); "
                        "use 1e-6 to 1e-5 for real models, up to 1e-3 for the built-in tiny model")
    if not 0 < rollout.gpu_memory_utilization <= 1:
        problems.append(f"actor_rollout_ref.rollout.gpu_memory_utilization: {rollout.gpu_memory_utilization}: must be in "
                        "(0, 1]; 0.6-0.8 is the safe range, 0.4-0.5 when the actor runs out of memory")
    if gpus % rollout.tensor_model_parallel_size:
        problems.append(f"actor_rollout_ref.rollout.tensor_model_parallel_size: {rollout.tensor_model_parallel_size}: "
                        f"does not divide the {gpus} GPUs; use a divisor of {gpus}")
    if actor.use_kl_loss and actor.kl_loss_coef == 0:
        problems.append("actor_rollout_ref.actor.kl_loss_coef: 0.0: use_kl_loss is on but the coefficient is 0, so "
                        "the reference model is computed for nothing; set kl_loss_coef (e.g. 0.001) or use_kl_loss=false")
    if algo.filter_groups.enable and algo.adv_estimator not in GROUP_ESTIMATORS:
        problems.append(f"algorithm.filter_groups.enable: true: dynamic sampling filters prompt groups, which "
                        f"{algo.adv_estimator} does not have; use adv_estimator=grpo or disable filter_groups")
    # A run has at least total_epochs steps, so only a larger frequency needs the step count.
    # (A batch larger than the task set already failed above: no step count to compare with.)
    needs_count = max(trainer.save_freq, trainer.test_freq) > (trainer.total_training_steps or trainer.total_epochs)
    fits = n_train is None or data.train_batch_size <= n_train
    steps = total_steps(cfg, n_train) if needs_count and fits else None
    for key in ("save_freq", "test_freq"):
        freq = getattr(trainer, key)
        if freq == 0 or freq < -1:
            problems.append(f"trainer.{key}: {freq}: must be a positive step count or -1 (disabled)")
        elif steps is not None and freq > steps:
            what = "no checkpoint is saved before the end" if key == "save_freq" else "validation never runs during training"
            problems.append(f"trainer.{key}: {freq}: larger than the run's {steps} total steps, so {what}; "
                            f"set it <= {steps} (or -1 to disable)")
    context = model_context_length(cfg.actor_rollout_ref.model.path)
    needed = data.max_prompt_length + data.max_response_length
    if context and needed > context:
        problems.append(f"data.max_response_length: {data.max_response_length}: max_prompt_length + max_response_length "
                        f"= {needed} exceeds the model's context of {context} tokens; lower them to fit {context}")
    return problems


def native_ignored_settings(cfg: TrainingConfig) -> list[str]:
    """Settings that only verl uses, set away from their defaults, which the native torch backend ignores."""
    ignored: list[str] = []
    defaults = TrainingConfig().flat()
    verl_only = ("actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.gpu_memory_utilization",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.multi_turn",
                 "actor_rollout_ref.rollout.engine_kwargs", "actor_rollout_ref.ref", "actor_rollout_ref.actor.fsdp_config",
                 "actor_rollout_ref.model.use_remove_padding", "actor_rollout_ref.model.trust_remote_code",
                 "trainer.n_gpus_per_node", "trainer.nnodes", "trainer.default_local_dir", "trainer.resume_mode",
                 "trainer.device",
                 "trainer.critic_warmup", "algorithm.gamma", "algorithm.lam")
    for key, value in cfg.flat().items():
        if key.startswith(VERL_OVERRIDES + "."):
            ignored.append(f"{key[len(VERL_OVERRIDES) + 1:]}={value!r} (verl only)")
        elif any(key == v or key.startswith(v + ".") for v in verl_only) and defaults.get(key) != value:
            ignored.append(f"{key}={value!r}")
    return ignored
