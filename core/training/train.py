"""One entry point for a training run: resolve the config for a mode, pick the backend, run into a run folder.

`devops-rl train` and the cockpit (through a child `devops-rl train ... --run-dir D`) both end up in
`run_training`, which dispatches to the native torch loop or to verl.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from core.errors import UserError

log = logging.getLogger(__name__)

MODES = ("train", "ci-fast", "single-gpu", "test")
MODE_PRESETS = {"train": "default", "ci-fast": "ci-fast", "single-gpu": "single-gpu", "test": "ci-fast"}
BACKENDS = ("auto", "torch", "verl")

# `--mode test`: the self-check (dataset, reward, config, one tiny GRPO step) in seconds.
TEST_MODE_OVERRIDES = (
    "data.train_batch_size=2",
    "data.max_response_length=16",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "trainer.total_training_steps=1",
    "trainer.total_epochs=1",
    "trainer.save_freq=1",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "devops.sft_warmstart_steps=0",
    "devops.n_runners=1",
)


def mode_for_preset(preset: str) -> str:
    """The mode that trains with `preset` (the cockpit launches a preset as this `--mode`); `train` if none does."""
    return next((mode for mode, name in MODE_PRESETS.items() if name == preset), "train")


def config_for_mode(
    mode: str,
    *,
    config_file: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    model: str | None = None,
    seed: int | None = None,
    backend: str | None = None,
    n_runners: int | None = None,
    resolved: bool = False,
):
    """The resolved config for a mode: its preset < the config file < `--set` < the explicit options.

    `resolved`: the config file is a run's own resolved config (resume), so `--mode test`'s shrinking
    is not applied again over it.
    """
    from core.training.config import load_config

    if mode not in MODES:
        raise UserError(f"--mode: unknown mode {mode!r}; one of {', '.join(MODES)}")
    extra = list(TEST_MODE_OVERRIDES) if mode == "test" and not resolved else []
    if mode == "test" and model is None and not resolved:
        extra.append("actor_rollout_ref.model.path=builtin:tiny")
    extra.extend(overrides)
    if model is not None:
        extra.append(f"actor_rollout_ref.model.path={model}")
    if seed is not None:
        extra.append(f"devops.seed={seed}")
    if backend is not None:
        extra.append(f"devops.backend={backend}")
    if n_runners is not None:
        extra.append(f"devops.n_runners={n_runners}")
    return load_config(MODE_PRESETS[mode], config_file=config_file, overrides=extra)


def choose_backend(requested: str, ray_address: str | None = None) -> tuple[str, str]:
    """('torch' | 'verl', one line saying why). With a Ray cluster's address, verl needs no GPU here."""
    if requested not in BACKENDS:
        raise UserError(f"devops.backend: unknown backend {requested!r}; one of {', '.join(BACKENDS)}")
    if requested == "torch":
        return "torch", "backend: torch (as configured)"
    from core.training.verl_backend.detect import verl_available

    ok, why = verl_available(ray_address)
    if requested == "verl":
        if not ok:
            raise UserError(f"--backend verl: {why}; use --backend torch (or auto)")
        return "verl", f"backend: verl ({why})"
    if ok:
        return "verl", f"backend: verl (auto: {why})"
    return "torch", f"backend: torch (auto: {why})"


def check_ray_address(backend: str, ray_address: str | None) -> None:
    """`--ray-address` only means something to verl; on torch it is refused rather than ignored."""
    if ray_address and backend != "verl":
        raise UserError("--ray-address is for the verl backend; drop it or use --backend verl")


def run_training(
    cfg,
    *,
    mode: str,
    run_dir,
    resume: bool = False,
    progress: Callable[[dict], None] | None = None,
    ray_address: str | None = None,
):
    """Run one training job into `run_dir` with the backend `run_dir.meta()["backend"]` names (or the
    config's choice); returns the run directory. Raises on failure (status failed is already written)."""
    from core.log import use_log_file

    use_log_file(run_dir.path / "train.log")
    backend = run_dir.meta().get("backend") or choose_backend(cfg.devops.backend, ray_address)[0]
    if backend == "verl":
        from core.training.verl_backend.launch import run_verl_training

        return run_verl_training(cfg, mode=mode, run_dir=run_dir, resume=resume, ray_address=ray_address,
                                 progress=progress)
    check_ray_address(backend, ray_address)
    from core.training.native import run_native

    return run_native(cfg, mode=mode, run_dir=run_dir, resume=resume, progress=progress)
