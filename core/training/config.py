"""The training config: one pydantic model shaped like verl's ppo_trainer.yaml, presets, YAML and --set overrides.

Precedence is preset < config file < `--set a.b.c=VALUE`; unknown keys are errors with a "did you mean",
except keys verl itself knows, which are passed through to verl in `verl_overrides`.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import UserError, did_you_mean

log = logging.getLogger(__name__)

PRESETS = ("default", "ci-fast", "single-gpu")
PRESETS_DIR = Path(__file__).with_name("presets")
VERL_OVERRIDES = "verl_overrides"

ADV_ESTIMATORS = (
    "grpo", "gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
    "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo",
)
# Estimators that compare the n responses of one prompt: a group of one has no baseline.
GROUP_ESTIMATORS = ("grpo", "grpo_passk", "rloo", "rloo_vectorized", "grpo_vectorized", "opo", "gpg",
                    "reinforce_plus_plus_baseline", "gdpo")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# verl's top-level sections; unknown keys under them pass through to verl when verl is not installed to check.
VERL_SECTIONS = ("algorithm", "data", "actor_rollout_ref", "trainer", "critic", "reward_model", "reward",
                 "custom_reward_function", "ray_kwargs", "global_profiler", "transfer_queue", "distillation")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)


# ---- algorithm ------------------------------------------------------------------------------------


class KLCtrlConfig(_Section):
    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = Field(0.001, ge=0)
    horizon: int = Field(10000, gt=0)
    target_kl: float = Field(0.1, gt=0)


class FilterGroupsConfig(_Section):
    """DAPO dynamic sampling: drop prompt groups whose responses all scored the same."""

    enable: bool = False
    metric: str = "reward"  # verl 0.9: "reward" is the pre-KL sequence reward; "acc", "score", ... also work
    max_num_gen_batches: int = Field(0, ge=0)


class AlgorithmConfig(_Section):
    adv_estimator: str = "grpo"
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(1.0, ge=0, le=1)
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLCtrlConfig = Field(default_factory=KLCtrlConfig)
    filter_groups: FilterGroupsConfig = Field(default_factory=FilterGroupsConfig)

    @field_validator("adv_estimator")
    @classmethod
    def _known_estimator(cls, value: str) -> str:
        if value not in ADV_ESTIMATORS:
            raise ValueError(f"unknown advantage estimator{did_you_mean(value, ADV_ESTIMATORS)} (one of: {', '.join(ADV_ESTIMATORS)})")
        return value

    @field_validator("kl_penalty")
    @classmethod
    def _known_kl(cls, value: str) -> str:
        return _check_kl_type(value)


def _check_kl_type(value: str) -> str:
    base = value[:-1] if value.endswith("+") else value  # verl: "k3+" = straight-through k2 gradient
    if base not in KL_TYPES:
        raise ValueError(f"unknown KL estimator{did_you_mean(value, KL_TYPES)} (one of: {', '.join(KL_TYPES)})")
    return value


# ---- data -----------------------------------------------------------------------------------------


class DataConfig(_Section):
    train_batch_size: int = Field(16, gt=0)
    val_batch_size: int | None = Field(None, gt=0)
    max_prompt_length: int = Field(8192, gt=0)
    max_response_length: int = Field(4096, gt=0)
    truncation: Literal["error", "left", "right", "middle"] = "error"
    shuffle: bool = True
    seed: int | None = None


# ---- actor / rollout / ref / model -----------------------------------------------------------------


class OptimConfig(_Section):
    lr: float = 1e-6
    weight_decay: float = Field(0.01, ge=0)
    lr_warmup_steps_ratio: float = Field(0.0, ge=0, le=1)
    lr_scheduler_type: Literal["constant", "cosine"] = "constant"
    betas: tuple[float, float] = (0.9, 0.999)


class FSDPConfig(_Section):
    param_offload: bool = False
    optimizer_offload: bool = False


class ActorConfig(_Section):
    ppo_mini_batch_size: int = Field(16, gt=0)
    ppo_micro_batch_size_per_gpu: int = Field(4, gt=0)
    ppo_epochs: int = Field(1, gt=0)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    use_kl_loss: bool = False
    kl_loss_coef: float = Field(0.0, ge=0)
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = Field(0.0, ge=0)
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.3
    clip_ratio_c: float = 3.0
    loss_agg_mode: Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"] = "token-mean"
    grad_clip: float = Field(1.0, gt=0)
    fsdp_config: FSDPConfig = Field(default_factory=lambda: FSDPConfig(param_offload=True, optimizer_offload=True))

    @field_validator("kl_loss_type")
    @classmethod
    def _known_kl(cls, value: str) -> str:
        return _check_kl_type(value)


class MultiTurnConfig(_Section):
    enable: bool = False
    format: str = "hermes"
    max_assistant_turns: int | None = Field(None, gt=0)


class RolloutConfig(_Section):
    name: Literal["vllm", "sglang", "hf"] = "vllm"
    n: int = Field(4, gt=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    gpu_memory_utilization: float = 0.6
    tensor_model_parallel_size: int = Field(1, gt=0)
    log_prob_micro_batch_size_per_gpu: int = Field(4, gt=0)
    multi_turn: MultiTurnConfig = Field(default_factory=MultiTurnConfig)
    engine_kwargs: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"vllm": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}}
    )


class RefConfig(_Section):
    log_prob_micro_batch_size_per_gpu: int = Field(8, gt=0)
    fsdp_config: FSDPConfig = Field(default_factory=lambda: FSDPConfig(param_offload=True))


class ModelConfig(_Section):
    path: str = "Qwen/Qwen2.5-7B-Instruct"
    use_remove_padding: bool = True
    enable_gradient_checkpointing: bool = True
    trust_remote_code: bool = False


class ActorRolloutRefConfig(_Section):
    actor: ActorConfig = Field(default_factory=ActorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    ref: RefConfig = Field(default_factory=RefConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)


# ---- trainer --------------------------------------------------------------------------------------


class TrainerConfig(_Section):
    n_gpus_per_node: int = Field(1, gt=0)
    nnodes: int = Field(1, gt=0)
    total_epochs: int = Field(100, gt=0)
    total_training_steps: int | None = Field(None, gt=0)
    save_freq: int = 50
    test_freq: int = 10
    val_before_train: bool = True
    critic_warmup: int = Field(0, ge=0)
    logger: list[str] = Field(default_factory=lambda: ["console", "file"])
    project_name: str = "devops-rl"
    experiment_name: str = "devops_architect"
    default_local_dir: str | None = None
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    device: Literal["cuda", "npu", "cpu"] = "cuda"

    @field_validator("logger", mode="before")
    @classmethod
    def _one_logger(cls, value):
        return [value] if isinstance(value, str) else value


# ---- devops (this project's own section) -----------------------------------------------------------


class RewardJudgeConfig(_Section):
    """The optional LLM judge: an OpenAI-compatible endpoint grades each rubric criterion (see docs/reward.md)."""

    enable: bool = Field(False, description="Ask an LLM judge to grade each rubric criterion (off: rules only).")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM).")
    model: str | None = Field(None, description="Model name the endpoint serves.")
    weight: float = Field(0.5, ge=0, le=1, description="Share of each criterion's score that comes from the judge.")
    timeout: float = Field(30.0, gt=0, description="Seconds per request; on timeout the rule score is used.")
    concurrency: int = Field(8, gt=0, description="Requests in flight at once.")
    api_key_env: str = Field("DEVOPS_RL_API_KEY", description="Environment variable holding the API key, if any.")

    @model_validator(mode="after")
    def _needs_endpoint(self) -> RewardJudgeConfig:
        if self.enable and not (self.base_url and self.model):
            raise ValueError("enable needs base_url and model "
                             "(e.g. --set devops.reward.judge.base_url=http://127.0.0.1:8000/v1)")
        return self


class RewardConfig(_Section):
    """How the reward grades answers, beyond the rubric rules."""

    judge: RewardJudgeConfig = Field(default_factory=RewardJudgeConfig, description="Optional LLM judge (off by default).")


class DevopsConfig(_Section):
    backend: Literal["auto", "torch", "verl"] = "auto"
    seed: int = 0
    n_runners: int = Field(1, gt=0)
    val_fraction: float = Field(0.2, ge=0, lt=1)
    reward_weights: dict[str, dict[str, float]] = Field(default_factory=dict)
    samples_per_step: int = Field(4, ge=0)
    keep_checkpoints: int = Field(3, ge=0)
    sft_warmstart_steps: int = Field(0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    runs_dir: str | None = None
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward options: the optional LLM judge.")


class TrainingConfig(_Section):
    """The whole training config; field names, nesting and meaning follow verl 0.9's ppo_trainer.yaml."""

    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = Field(default_factory=ActorRolloutRefConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    devops: DevopsConfig = Field(default_factory=DevopsConfig)
    verl_overrides: dict[str, Any] = Field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain nested data (lists, not tuples) as written to YAML."""
        return _plain(self.model_dump(mode="python"))

    def to_yaml(self) -> str:
        """YAML that `config_from_yaml` and `train --config` read back to an equal config."""
        return yaml.dump(self.to_dict(), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)

    def flat(self) -> dict[str, Any]:
        """Every leaf as `dotted.key: value` (verl_overrides keys kept as written)."""
        data = self.to_dict()
        overrides = data.pop(VERL_OVERRIDES)
        out = _flatten(data)
        out.update({f"{VERL_OVERRIDES}.{k}": v for k, v in overrides.items()})
        return out


class _Dumper(yaml.SafeDumper):
    """SafeDumper that double-quotes strings holding YAML line breaks (NEL, LS, PS), which it would emit raw."""


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = '"' if any(c in value for c in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not _is_free_form(path):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _is_free_form(path: str) -> bool:
    node = _model_node(path.split("."))
    return node is not None and not _is_model(node)


# ---- the model's key tree --------------------------------------------------------------------------


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _model_node(parts: list[str]):
    """The annotation at a dotted path of TrainingConfig, or None when the path is not a model field."""
    node: Any = TrainingConfig
    for part in parts:
        if not _is_model(node) or part not in node.model_fields:
            return None
        node = node.model_fields[part].annotation
    return node


# ---- verl's own keys ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def verl_key_tree() -> dict | None:
    """verl's full ppo_trainer config as nested dicts (without `_target_`), or None if verl is absent.

    Read from the installed package's generated YAML without importing verl (which pulls in ray and torch).
    """
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "trainer" / "config" / "_generated_ppo_trainer.yaml"
        if path.is_file():
            return _strip_targets(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return None


def _strip_targets(node):
    if isinstance(node, dict):
        return {k: _strip_targets(v) for k, v in node.items() if k != "_target_"}
    return node


def _verl_node(parts: list[str]):
    """(found, node) for a dotted path in verl's config tree; found is None when verl is not installed."""
    tree = verl_key_tree()
    if tree is None:
        return None, None
    node: Any = tree
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


# ---- loading -------------------------------------------------------------------------------------


class _Layer:
    """Where a value came from, for error messages: a file (with line numbers) or a --set option."""

    def __init__(self, name: str, lines: dict[str, int] | None = None) -> None:
        self.name, self.lines = name, lines or {}

    def where(self, dotted: str) -> str:
        line = self.lines.get(dotted)
        return f"{self.name}:{line}" if line else self.name


def yaml_key_lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line of that key in a YAML mapping document."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = f"{prefix}{key_node.value}"
                lines[path] = key_node.start_mark.line + 1
                walk(value_node, path + ".")

    if root is not None:
        walk(root, "")
    return lines


def _parse_yaml(text: str, source: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: not valid YAML ({problem}); fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{source}: a config must be a YAML mapping of sections (algorithm, data, ...), got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b.c=VALUE` -> ("a.b.c", typed VALUE), VALUE typed as YAML (Hydra-style): 16, 1e-6, true, null, [a, b]."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"--set {text}: expected KEY=VALUE with a dotted key, e.g. --set data.train_batch_size=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(number) and any(c in value for c in ".eE"):
                value = number  # YAML 1.1 reads 1e-6 as a string; Hydra reads it as a float
    return key, value


def _merge(base: dict, update: dict, layer: _Layer, origins: dict[str, _Layer], prefix: str = "") -> None:
    for key, value in update.items():
        key = str(key)
        path = f"{prefix}{key}"
        if key == VERL_OVERRIDES and not prefix:
            if not isinstance(value, dict):
                raise UserError(f"{layer.where(path)}: {VERL_OVERRIDES}: must be a mapping of dotted verl keys to values")
            for sub_key, sub_value in value.items():
                base.setdefault(VERL_OVERRIDES, {})[str(sub_key)] = sub_value
                origins[f"{VERL_OVERRIDES}.{sub_key}"] = layer
            continue
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, layer, origins, path + ".")
        else:
            base[key] = value
            origins[path] = layer


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    if dotted.startswith(VERL_OVERRIDES + "."):
        data.setdefault(VERL_OVERRIDES, {})[dotted[len(VERL_OVERRIDES) + 1:]] = value
        return
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def _separate_verl_keys(data: dict, origins: dict[str, _Layer]) -> None:
    """Move keys our model does not know into verl_overrides if verl knows them; otherwise raise with a suggestion."""
    overrides = data.setdefault(VERL_OVERRIDES, {})

    def origin(path: str) -> _Layer:
        probe = path
        while probe:
            if probe in origins:
                return origins[probe]
            probe = probe.rpartition(".")[0]
        return _Layer("config")

    def unknown(path: str, value: Any) -> None:
        parts = path.split(".")
        found, verl_node = _verl_node(parts)
        layer = origin(path)
        if found is None and parts[0] in VERL_SECTIONS:
            log.warning("%s: %s is not a devops-rl key and verl is not installed to check it; passing it to verl",
                        layer.where(path), path)
            overrides[path] = value
            return
        if found:
            if isinstance(value, dict) and isinstance(verl_node, dict) and verl_node:
                for key, sub in value.items():
                    unknown(f"{path}.{key}", sub)
            else:
                overrides[path] = value
            return
        parent = ".".join(parts[:-1])
        siblings: set[str] = set()
        model_parent = _model_node(parts[:-1]) if parts[:-1] else TrainingConfig
        if _is_model(model_parent):
            siblings |= set(model_parent.model_fields)
        found_parent, verl_parent = _verl_node(parts[:-1]) if parts[:-1] else (True, verl_key_tree())
        if found_parent and isinstance(verl_parent, dict):
            siblings |= set(verl_parent)
        where = f" under {parent}" if parent else ""
        raise UserError(
            f"{layer.where(path)}: {path}: unknown key{where}{did_you_mean(parts[-1], siblings) or '; see devops-rl config show for the keys'}"
        )

    def walk(node: dict, prefix: str, model) -> None:
        for key in list(node):
            path = f"{prefix}{key}"
            if prefix == "" and key == VERL_OVERRIDES:
                continue
            if not _is_model(model) or key not in model.model_fields:
                unknown(path, node.pop(key))
                continue
            child_model = model.model_fields[key].annotation
            if _is_model(child_model):
                if isinstance(node[key], dict):
                    walk(node[key], path + ".", child_model)
                elif node[key] is None:
                    node.pop(key)

    walk(data, "", TrainingConfig)
    for key in list(overrides):
        parts = key.split(".")
        found, _ = _verl_node(parts)
        if found is False:
            raise UserError(f"{origin(f'{VERL_OVERRIDES}.{key}').where(f'{VERL_OVERRIDES}.{key}')}: {VERL_OVERRIDES}.{key}: "
                            f"verl has no key '{key}'{did_you_mean(key, _flatten(verl_key_tree() or {}))}")
        if _model_node(parts) is not None:
            raise UserError(f"{origin(f'{VERL_OVERRIDES}.{key}').where(f'{VERL_OVERRIDES}.{key}')}: {VERL_OVERRIDES}.{key}: "
                            f"devops-rl models this key; set {key} directly instead")


def _build(data: dict, origins: dict[str, _Layer]) -> TrainingConfig:
    _separate_verl_keys(data, origins)
    try:
        return TrainingConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        path = ".".join(str(p) for p in first["loc"])
        probe, layer = path, None
        while probe and layer is None:
            layer = origins.get(probe)
            probe = probe.rpartition(".")[0]
        where = layer.where(path) if layer else "config"
        value = first.get("input")
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        message = first["msg"].removeprefix("Value error, ")
        raise UserError(f"{where}: {path}: {value!r}: {message}{more}") from None


def preset_data(preset: str) -> dict:
    """The raw mapping of a preset file (values that differ from the model's defaults)."""
    if preset not in PRESETS:
        raise UserError(f"unknown preset '{preset}'{did_you_mean(preset, PRESETS)} (presets: {', '.join(PRESETS)})")
    path = PRESETS_DIR / f"{preset}.yaml"
    return _parse_yaml(path.read_text(encoding="utf-8"), str(path))


def load_config(preset: str = "default", config_file: Path | None = None, overrides=()) -> TrainingConfig:
    """Resolve preset < config file < `--set` overrides into one validated config (UserError on any bad key/value)."""
    data: dict = {}
    origins: dict[str, _Layer] = {}
    preset_path = PRESETS_DIR / f"{preset}.yaml"
    _merge(data, preset_data(preset), _Layer(str(preset_path), yaml_key_lines(preset_path.read_text(encoding="utf-8"))), origins)
    if config_file is not None:
        path = Path(config_file)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"{path}: no such config file; create one with 'devops-rl config export > {path.name}'") from None
        except OSError as exc:
            raise UserError(f"{path}: cannot read the config file ({exc.strerror})") from None
        _merge(data, _parse_yaml(text, str(path)), _Layer(str(path), yaml_key_lines(text)), origins)
    for text in overrides:
        key, value = parse_override(text)
        layer = _Layer(f"--set {text}")
        update: dict = {}
        _set_dotted(update, key, value)
        _merge(data, update, layer, origins)
        origins[key] = layer
    return _build(data, origins)


def config_from_yaml(text: str, source: str = "<config>") -> TrainingConfig:
    """A config from YAML text over the model's defaults (no preset), e.g. what `to_yaml` wrote."""
    data: dict = {}
    origins: dict[str, _Layer] = {}
    _merge(data, _parse_yaml(text, source), _Layer(source, yaml_key_lines(text)), origins)
    return _build(data, origins)


# ---- validation ---------------------------------------------------------------------------------

# The config.json figures of well-known models, for when their files are not on this machine
# (the doctor's parameter count and the context-length check use them).
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    name: dict(zip(("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings", "head_dim"), row))
    for name, row in {
        "Qwen/Qwen2.5-0.5B-Instruct": (896, 24, 14, 2, 4864, 151936, True, 32768, None),
        "Qwen/Qwen2.5-1.5B-Instruct": (1536, 28, 12, 2, 8960, 151936, True, 32768, None),
        "Qwen/Qwen2.5-3B-Instruct": (2048, 36, 16, 2, 11008, 151936, True, 32768, None),
        "Qwen/Qwen2.5-7B-Instruct": (3584, 28, 28, 4, 18944, 152064, False, 32768, None),
        "Qwen/Qwen2.5-14B-Instruct": (5120, 48, 40, 8, 13824, 152064, False, 32768, None),
        "Qwen/Qwen2.5-32B-Instruct": (5120, 64, 40, 8, 27648, 152064, False, 32768, None),
        "Qwen/Qwen3-0.6B": (1024, 28, 16, 8, 3072, 151936, True, 40960, 128),
        "Qwen/Qwen3-1.7B": (2048, 28, 16, 8, 6144, 151936, True, 40960, 128),
        "Qwen/Qwen3-4B": (2560, 36, 32, 8, 9728, 151936, True, 40960, 128),
        "Qwen/Qwen3-8B": (4096, 36, 32, 8, 12288, 151936, False, 40960, 128),
        "meta-llama/Llama-3.1-8B-Instruct": (4096, 32, 32, 8, 14336, 128256, False, 131072, None),
        "meta-llama/Llama-3.2-1B-Instruct": (2048, 16, 32, 8, 8192, 128256, True, 131072, 64),
        "meta-llama/Llama-3.2-3B-Instruct": (3072, 28, 24, 8, 8192, 128256, True, 131072, 128),
    }.items()
}


def model_config_json(model_path: str, *, build_builtin: bool = False) -> dict | None:
    """The model's config.json when it is local (builtin:tiny: its recipe unless built), else KNOWN_MODELS, else None."""
    import json

    from core.training import tiny_model

    if model_path == tiny_model.BUILTIN_TINY:
        if build_builtin:
            folder = tiny_model.ensure_tiny_model()
        else:
            return {"model_type": "qwen2", "tie_word_embeddings": True, **tiny_model.TINY_RECIPE}
    else:
        folder = Path(model_path).expanduser()
        if not folder.is_dir() and model_path.count("/") == 1:
            folder = _hf_cached_folder(model_path) or folder
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = KNOWN_MODELS.get(model_path)
        return {k: v for k, v in known.items() if v is not None} if known else None


def _hf_cached_folder(repo_id: str) -> Path | None:
    """The newest snapshot of a Hugging Face model in the local hub cache that has a config.json.

    Looked up on disk (`$HF_HUB_CACHE`, `$HF_HOME/hub`, ~/.cache/huggingface/hub) rather than through
    huggingface_hub, whose import alone costs a quarter of a second on every `config` command.
    """
    import os

    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    snapshots = Path(hub) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1].parent if found else None


def model_context_length(model_path: str) -> int | None:
    """max_position_embeddings of the model, from its config.json or the table of well-known models."""
    info = model_config_json(model_path) or {}
    return info.get("max_position_embeddings") or (info.get("text_config") or {}).get("max_position_embeddings")


def steps_per_epoch(cfg: TrainingConfig) -> int | None:
    """Optimizer steps per epoch over the built-in task set (train split), or None if the tasks cannot be read."""
    try:
        from tasks import load_tasks, split_tasks

        train, _ = split_tasks(load_tasks(), cfg.devops.val_fraction, cfg.devops.seed)
    except Exception as exc:  # the tasks have their own command and errors; validation should not fail on them
        log.debug("steps_per_epoch: tasks unavailable: %s", exc)
        return None
    return max(1, len(train) // cfg.data.train_batch_size)


def total_steps(cfg: TrainingConfig) -> int | None:
    if cfg.trainer.total_training_steps:
        return cfg.trainer.total_training_steps
    per_epoch = steps_per_epoch(cfg)
    return None if per_epoch is None else per_epoch * cfg.trainer.total_epochs


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
    # A run has at least total_epochs steps, so only a larger frequency needs the task count (a YAML parse).
    needs_count = max(trainer.save_freq, trainer.test_freq) > (trainer.total_training_steps or trainer.total_epochs)
    steps = total_steps(cfg) if needs_count else None
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
                 "trainer.n_gpus_per_node", "trainer.nnodes", "trainer.logger", "trainer.project_name",
                 "trainer.experiment_name", "trainer.default_local_dir", "trainer.resume_mode", "trainer.device",
                 "trainer.critic_warmup", "algorithm.gamma", "algorithm.lam")
    for key, value in cfg.flat().items():
        if key.startswith(VERL_OVERRIDES + "."):
            ignored.append(f"{key[len(VERL_OVERRIDES) + 1:]}={value!r} (verl only)")
        elif any(key == v or key.startswith(v + ".") for v in verl_only) and defaults.get(key) != value:
            ignored.append(f"{key}={value!r}")
    return ignored
