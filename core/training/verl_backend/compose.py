"""The config verl receives: verl's own `ppo_trainer` composed by Hydra from the installed package, with
this project's config, its verl pass-through keys and the run folder's paths on top, checked by verl itself.

verl's defaults stay verl's; only keys this project models (or the user set) are overwritten, so what
`devops-rl config verl` prints is what `verl.trainer.main_ppo` would get from its own command line.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path
from typing import Any

from core.errors import UserError

log = logging.getLogger(__name__)

# verl imports the reward by module name in every reward worker, on whichever node Ray puts it.
REWARD_FN_PATH = "pkg://core.training.verl_backend.reward_fn"
REWARD_FN_NAME = "compute_score"
# Where the run folder is not known yet (printing with `config verl`), paths point here.
RUN_PLACEHOLDER = "<run_dir>"
# The file verl's TaskRunner and trainer note their start-up stages in (read by the launcher's watchdog).
STARTUP_FILE_ENV = "DEVOPS_RL_STARTUP_FILE"
# Our keys that verl 0.9.1 reads under another name (it keeps the old key in its YAML but ignores it).
VERL_READS = {"actor_rollout_ref.actor.grad_clip": "actor_rollout_ref.actor.optim.clip_grad"}
# verl's agent loop always cuts an overlong prompt from the left (`data.truncation` is not read).
VERL_TRUNCATIONS = ("left", "error")


def verl_config_dir() -> Path:
    """verl's Hydra config folder inside the installed package (`verl/trainer/config`)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("verl is not installed; install it with: pip install 'devops-rl[verl]' (CPU) or "
                        "'devops-rl[gpu]' (GPU box, brings vLLM)")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def run_paths(run_path: Path | str | None) -> dict[str, str]:
    """The files inside a run folder that verl reads or writes (placeholders when there is no run yet).

    Absolute: verl's workers run wherever Ray puts them, with their own working directory.
    """
    base = Path(run_path).absolute() if run_path is not None else Path(RUN_PLACEHOLDER)
    return {
        "train_files": str(base / "data" / "train.parquet"),
        "val_files": str(base / "data" / "val.parquet"),
        "checkpoints": str(base / "checkpoints"),
        "rollouts": str(base / "verl" / "rollouts"),
        "metrics": str(base / "verl" / "metrics.jsonl"),
        "startup": str(base / "verl" / "startup.jsonl"),
    }


def _our_settings(cfg) -> dict[str, Any]:
    """Our config as dotted verl keys (every section verl shares with us; `devops` is ours alone), each
    also under the name verl actually reads where that differs."""
    from core.training.config import VERL_OVERRIDES

    flat = cfg.flat()
    settings = {k: v for k, v in flat.items() if not k.startswith(("devops.", VERL_OVERRIDES + "."))}
    settings.update({VERL_READS[k]: v for k, v in settings.items() if k in VERL_READS})
    return settings


def check_for_verl(cfg) -> None:
    """UserError for settings verl 0.9.1 would silently ignore, naming what to set instead."""
    truncation = cfg.data.truncation
    if truncation not in VERL_TRUNCATIONS:
        raise UserError(f"data.truncation: {truncation}: verl {_verl_version()}'s agent loop always cuts long prompts "
                        "from the left; use left, or error (checked before the run starts)")
    groups = cfg.algorithm.filter_groups
    if groups.enable and groups.max_num_gen_batches:
        raise UserError(f"algorithm.filter_groups.max_num_gen_batches: {groups.max_num_gen_batches}: verl "
                        f"{_verl_version()}'s trainer ignores it; set it to 0 and bound generation with "
                        "verl_overrides.algorithm.filter_groups.max_inflight_gen_batches")


def _set(config, key: str, value: Any, *, source: str, free_form: bool = False) -> None:
    """Set one dotted key in verl's struct config; keys verl does not have are errors naming the source."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    missing = object()
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(config, parent_key, default=missing) if parent_key else config
    if parent is missing or parent is None or not OmegaConf.is_dict(parent):
        raise UserError(f"{source}: {key}: verl {_verl_version()} has no section '{parent_key}'; remove the key")
    exists = leaf in parent.keys()  # `in parent` is False for verl's mandatory `???` keys
    if not exists and not free_form:
        raise UserError(f"{source}: {key}: verl {_verl_version()} has no such key; remove it or check the name "
                        f"in 'devops-rl config verl'")
    try:
        if free_form or not exists:
            with open_dict(parent):
                parent[leaf] = value
        else:
            OmegaConf.update(config, key, value, merge=False)
    except (ValidationError, ConfigKeyError, ConfigAttributeError, ValueError) as exc:
        raise UserError(f"{source}: {key}: {value!r}: verl refuses this value ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _verl_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return "?"


def compose_verl_config(
    cfg,
    *,
    run_path: Path | str | None = None,
    resume: bool = False,
    ray_address: str | None = None,
    resolve_model: bool = True,
    validate: bool = True,
):
    """verl's composed `ppo_trainer` DictConfig for `cfg`, checked by verl's `validate_config`.

    `run_path` fills the data files, checkpoints, logger and rollout paths (placeholders without it);
    `resolve_model` turns `builtin:tiny` into its local folder (built on first use). Raises UserError
    with verl's own message when verl rejects the result.
    """
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from core.training.config import VERL_OVERRIDES

    check_for_verl(cfg)
    config_dir = verl_config_dir()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None, job_name="devops-rl"):
        config = compose(config_name="ppo_trainer")

    free_form = ("actor_rollout_ref.rollout.engine_kwargs",)
    for key, value in _our_settings(cfg).items():
        if value is None and OmegaConf.select(config, key, default=None) is None:
            continue
        _set(config, key, value, source="devops-rl config", free_form=key.startswith(free_form))

    _fill_project_keys(config, cfg, run_path=run_path, resume=resume, ray_address=ray_address,
                       resolve_model=resolve_model)

    for key, value in cfg.verl_overrides.items():  # the user's verl keys win over our fills
        _set(config, key, value, source=f"{VERL_OVERRIDES}.{key}")

    if validate:
        validate_with_verl(config)
    return config


def _fill_project_keys(config, cfg, *, run_path, resume: bool, ray_address: str | None, resolve_model: bool) -> None:
    """Keys verl needs that follow from our config and the run folder rather than from verl's defaults."""
    from omegaconf import open_dict

    from core.training.verl_backend.detect import attention_implementation

    paths = run_paths(run_path)
    devops = cfg.devops
    model_path = cfg.actor_rollout_ref.model.path
    if resolve_model and model_path.startswith("builtin:"):
        from core.training.tiny_model import resolve_model_path

        model_path = str(resolve_model_path(model_path))

    loggers = list(cfg.trainer.logger)
    if "file" not in loggers:
        loggers.append("file")  # the run folder's metrics come from verl's file logger
    resume_mode = cfg.trainer.resume_mode
    if resume_mode == "auto" and not resume:
        resume_mode = "disable"  # a fresh run never picks up someone else's checkpoints

    fills: dict[str, Any] = {
        "actor_rollout_ref.model.path": model_path,
        "data.train_files": paths["train_files"],
        "data.val_files": paths["val_files"],
        "data.prompt_key": "prompt",
        "data.reward_fn_key": "data_source",
        "data.seed": cfg.data.seed if cfg.data.seed is not None else devops.seed,
        "reward.custom_reward_function.path": REWARD_FN_PATH,
        "reward.custom_reward_function.name": REWARD_FN_NAME,
        "trainer.logger": loggers,
        "trainer.default_local_dir": (str(Path(cfg.trainer.default_local_dir).absolute())
                                      if cfg.trainer.default_local_dir else paths["checkpoints"]),
        "trainer.resume_mode": resume_mode,
        "trainer.max_actor_ckpt_to_keep": devops.keep_checkpoints or None,
        "trainer.rollout_data_dir": paths["rollouts"],
        # hf_model: `devops-rl eval` loads checkpoints/global_step_N/actor/huggingface; FSDP resumes from the rest.
        "actor_rollout_ref.actor.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        "actor_rollout_ref.actor.checkpoint.load_contents": ["model", "optimizer", "extra"],
    }
    if devops.n_runners > 1:  # `--n-runners N`: verl's agent-loop and reward workers (else verl's own default)
        fills["actor_rollout_ref.rollout.agent.num_workers"] = devops.n_runners
        fills["reward.num_workers"] = devops.n_runners
    attention, _ = attention_implementation()
    if attention != "flash_attention_2":  # verl's default would fail to load the actor without flash-attn
        fills["actor_rollout_ref.model.use_remove_padding"] = False
    for key, value in fills.items():
        _set(config, key, value, source="devops-rl")
    if devops.reward.judge.enable:  # reward_fn.compute_score(judge=...): the section names the key's variable, not the key
        _set(config, "reward.custom_reward_function.reward_kwargs", {"judge": devops.reward.judge.model_dump()},
             source="devops-rl", free_form=True)
    _set(config, "actor_rollout_ref.model.override_config.attn_implementation", attention, source="devops-rl",
         free_form=True)

    ray_init = config.ray_kwargs.ray_init
    with open_dict(ray_init):
        env_vars = dict(ray_init.runtime_env.get("env_vars") or {})
        # Set in every Ray worker of the job, on any node: verl's file logger and our start-up notes.
        env_vars["VERL_FILE_LOGGER_PATH"] = paths["metrics"]
        env_vars[STARTUP_FILE_ENV] = paths["startup"]
        ray_init.runtime_env.env_vars = env_vars
        if ray_address:
            ray_init.address = ray_address


def validate_with_verl(config) -> None:
    """Run verl's own checks exactly as `verl.trainer.main_ppo.main` does; UserError with verl's reason."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    chatter = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(chatter):
            warnings.simplefilter("always")
            validate_config(config=config, use_reference_policy=need_reference_policy(config),
                            use_critic=need_critic(config))
    except Exception as exc:  # verl raises AssertionError, ValueError and Hydra InstantiationException
        raise UserError(f"verl rejected the config: {verl_reason(exc)}; change that key (--set KEY=VALUE or the "
                        "config file) and check with 'devops-rl config verl'") from None
    for warning in caught:
        log.debug("verl validate_config: %s", warning.message)
    for line in chatter.getvalue().splitlines():
        log.debug("verl validate_config: %s", line)


def verl_reason(exc: BaseException) -> str:
    """verl's complaint in one line: the innermost message plus the key Hydra names, if any."""
    full_key = None
    inner: BaseException = exc
    while True:
        text = str(inner)
        for line in text.splitlines():
            if line.strip().startswith("full_key:"):
                full_key = full_key or line.split(":", 1)[1].strip()
        nxt = inner.__cause__ or inner.__context__
        if nxt is None or nxt is inner:
            break
        inner = nxt
    lines = [ln.strip() for ln in str(inner).splitlines()
             if ln.strip() and not ln.strip().startswith(("full_key:", "object_type=", "Error in call to target"))]
    message = " ".join(lines) or type(inner).__name__
    if message.startswith(("AssertionError(", "ValueError(")) and message.endswith(")"):
        message = message[message.index("(") + 1:-1].strip("'\"")
    if full_key and full_key not in message:
        message = f"{full_key}: {message}"
    return message


def to_yaml(config) -> str:
    """The composed config as YAML with interpolations resolved (what verl's TaskRunner resolves too)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(config, resolve=True)


def save(config, path: Path) -> Path:
    """Write the composed config for the launcher's child process (which loads and runs it unchanged)."""
    from omegaconf import OmegaConf

    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, path, resolve=False)
    return path


def load(path: Path):
    from omegaconf import OmegaConf

    return OmegaConf.load(path)
