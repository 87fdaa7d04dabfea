"""The training config's schema: one pydantic model shaped like verl 0.9's ppo_trainer.yaml, with each key's help.

A leaf's `Field(description=...)` says what it means and `json_schema_extra={"tune": ...}` how to tune it;
`config show --describe`, the Config screen and docs/config.md (drift-tested) all read them through `key_help`.
Over 450 lines on purpose: it is the table of every key (each leaf with its bounds, help and tuning note), kept in
one file like verl's ppo_trainer.yaml so a reader finds any key in one place.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from core.errors import UserError, did_you_mean
from core.runs.health import Thresholds

VERL_OVERRIDES = "verl_overrides"

ADV_ESTIMATORS = (
    "grpo", "gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
    "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo",
)
# Estimators that compare the n responses of one prompt: a group of one has no baseline.
GROUP_ESTIMATORS = ("grpo", "grpo_passk", "rloo", "rloo_vectorized", "grpo_vectorized", "opo", "gpg",
                    "reinforce_plus_plus_baseline", "gdpo")
# What both backends compute (`core_algos.kl_penalty`, verl's `kl_penalty`); a `+` suffix on any of them is the
# straight-through variant (the estimator's value, k2's gradient). verl lists "full" but raises on it, so it is refused.
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
LossAggMode = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
LOSS_AGG_MODES: tuple[str, ...] = typing.get_args(LossAggMode)

# Upper bounds, so a typo such as 99999999999999999999999 is one line at once instead of minutes of work and
# gigabytes of memory. Each is far above any real setting; `validate` then bounds sizes by the task set,
# the model's context and the machine's memory.
SEED_MAX = 2**32 - 1  # what NumPy's and Python's seeding accept everywhere (torch takes more, NumPy does not)
MAX_COUNT = 2**20  # prompts, responses, sequences, workers, GPUs: a million of anything per step is beyond any machine
MAX_TOKENS = 2**24  # 16.7M tokens: longer than any model's context window
MAX_STEPS = 10**9  # steps, epochs, frequencies: a billion steps of even a tiny model would take decades


def check_kl_type(value: str) -> str:
    """`value` if it is an estimator of KL_TYPES, optionally with verl's `+` suffix; ValueError otherwise."""
    if value.removesuffix("+") not in KL_TYPES:
        choices = KL_TYPES + tuple(f"{k}+" for k in KL_TYPES)
        raise ValueError(f"unknown KL estimator{did_you_mean(value, choices)} (one of: {', '.join(KL_TYPES)}, "
                         "each optionally with a '+' suffix)")
    return value


def _tune(advice: str) -> dict[str, str]:
    return {"tune": advice}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value, info: ValidationInfo):
        """`true` for a number is a mistake (pydantic would read it as 1), so a number field refuses a boolean."""
        if isinstance(value, bool):
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(typing.get_args(annotation)) or {annotation}
            if kinds & {int, float} and bool not in kinds:
                raise ValueError("a number is expected, not true/false")
        return value


# ---- algorithm ------------------------------------------------------------------------------------


class KLCtrlConfig(_Section):
    type: Literal["fixed", "adaptive"] = Field("fixed", description="fixed or adaptive in-reward KL coefficient",
                                               json_schema_extra=_tune("adaptive targets target_kl"))
    kl_coef: float = Field(0.001, ge=0, description="in-reward KL coefficient",
                           json_schema_extra=_tune("raise if actor/ppo_kl grows steadily"))
    horizon: int = Field(10000, gt=0, le=MAX_STEPS, description="adaptive controller horizon (steps)")
    target_kl: float = Field(0.1, gt=0, description="adaptive controller target")


class FilterGroupsConfig(_Section):
    """DAPO dynamic sampling: drop prompt groups whose responses all scored the same."""

    enable: bool = Field(False, description="DAPO dynamic sampling: drop prompt groups whose responses all scored the "
                         "same (they carry no signal) and sample more", json_schema_extra=_tune(
                             "turn on when many groups are all-equal (flat critic/score/std-like signal); costs extra "
                             "generation"))
    # verl 0.9: "reward" is the pre-KL sequence reward; "acc", "score", ... also work
    metric: str = Field("reward", description="the per-response value compared inside a group")
    max_num_gen_batches: int = Field(0, ge=0, le=MAX_COUNT,
                                     description="most generation batches per step while filtering (0 = no limit)")


class AlgorithmConfig(_Section):
    adv_estimator: str = Field(
        "grpo", description="how advantages are computed: grpo (group-relative, no critic), gae (PPO with a critic), "
        "rloo, reinforce_plus_plus, ... (verl's list)", json_schema_extra=_tune(
            "GRPO is usually the more stable choice for long answers such as DevOps designs; if training is unstable "
            "try gae (PPO) or turn on use_kl_in_reward. The torch backend supports grpo only."))
    gamma: float = Field(1.0, ge=0, le=1, description="discount factor (GAE only)",
                         json_schema_extra=_tune("leave at 1.0 for one-turn answers"))
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda (GAE only)", json_schema_extra=_tune("leave at 1.0"))
    norm_adv_by_std_in_grpo: bool = Field(
        True, description="divide the group-relative advantage by the group's reward std (false = Dr. GRPO)",
        json_schema_extra=_tune("set false if groups with tiny reward spread get huge advantages"))
    use_kl_in_reward: bool = Field(
        False, description="subtract a KL penalty against the reference model from the reward",
        json_schema_extra=_tune("false lets the agent explore; turn on (or use use_kl_loss) if answers drift into "
                                "reward hacking"))
    kl_penalty: str = Field("kl", description="KL estimator for the in-reward penalty: kl (k1), abs, mse (k2), "
                            "low_var_kl (k3); a + suffix takes the k2 gradient (straight-through)",
                            json_schema_extra=_tune("k3/low_var_kl is lower-variance"))
    kl_ctrl: KLCtrlConfig = Field(default_factory=KLCtrlConfig)
    filter_groups: FilterGroupsConfig = Field(default_factory=FilterGroupsConfig)

    @field_validator("adv_estimator")
    @classmethod
    def _known_estimator(cls, value: str) -> str:
        if value not in ADV_ESTIMATORS:
            raise ValueError(f"unknown advantage estimator{did_you_mean(value, ADV_ESTIMATORS)} "
                             f"(one of: {', '.join(ADV_ESTIMATORS)})")
        return value

    @field_validator("kl_penalty")
    @classmethod
    def _known_kl(cls, value: str) -> str:
        return check_kl_type(value)


# ---- data -----------------------------------------------------------------------------------------


class DataConfig(_Section):
    train_batch_size: int = Field(16, gt=0, le=MAX_COUNT, description="prompts per training step (each sampled rollout.n times)",
                                  json_schema_extra=_tune("memory vs speed: out of memory, lower it (16 -> 8); too "
                                                          "slow, raise it (16 -> 32)"))
    val_batch_size: int | None = Field(None, gt=0, le=MAX_COUNT, description="prompts per validation batch (null = all "
                                       "validation tasks at once)", json_schema_extra=_tune(
                                           "deprecated in verl; the torch backend uses it to bound memory"))
    max_prompt_length: int = Field(8192, gt=0, le=MAX_TOKENS, description="longest prompt in tokens (system prompt + task)",
                                   json_schema_extra=_tune("fit it to the system prompt's length"))
    max_response_length: int = Field(4096, gt=0, le=MAX_TOKENS, description="most tokens generated per answer",
                                     json_schema_extra=_tune("DevOps answers are long; if response_length/clip_ratio is "
                                                             "high (answers cut off), raise it"))
    truncation: Literal["error", "left", "right", "middle"] = Field(
        "error", description="what to do with a longer prompt: error, left, right, middle",
        json_schema_extra=_tune("error guarantees nothing is silently lost"))
    shuffle: bool = Field(True, description="shuffle the training prompts each epoch")
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="data-loader seed (null = devops.seed)")


# ---- actor / rollout / ref / model -----------------------------------------------------------------


class OptimConfig(_Section):
    lr: float = Field(1e-6, description="learning rate", json_schema_extra=_tune(
        "the key knob: start at 1e-6; slow learning: 2e-6; unstable: 5e-7. The tiny model needs ~1e-4"))
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    lr_warmup_steps_ratio: float = Field(0.0, ge=0, le=1, description="share of steps for linear warm-up")
    lr_scheduler_type: Literal["constant", "cosine"] = Field("constant", description="constant or cosine after warm-up")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")


class FSDPConfig(_Section):
    param_offload: bool = Field(False, description="keep the weights on the host between uses")
    optimizer_offload: bool = Field(False, description="keep Adam states on the host while not updating")


class ActorFSDPConfig(FSDPConfig):
    param_offload: bool = Field(True, description="keep the actor's weights on the host while vLLM generates",
                                json_schema_extra=_tune("frees GPU for vLLM; costs transfer time"))
    optimizer_offload: bool = Field(True, description="keep Adam states on the host while not updating",
                                    json_schema_extra=_tune("needs host RAM of ~8 bytes per parameter"))


class RefFSDPConfig(FSDPConfig):
    param_offload: bool = Field(True, description="keep the reference weights on the host between uses")
    optimizer_offload: bool = Field(False, description="(the reference has no optimizer; kept for verl's shape)")


class ActorConfig(_Section):
    ppo_mini_batch_size: int = Field(16, gt=0, le=MAX_COUNT, description="prompts per optimizer update (a slice of "
                                     "train_batch_size; verl multiplies it by n)", json_schema_extra=_tune(
                                         "usually equal to train_batch_size (one update per step); must be <= it"))
    ppo_micro_batch_size_per_gpu: int = Field(
        4, gt=0, le=MAX_COUNT, description="sequences per forward/backward pass (gradient accumulation inside a mini-batch)",
        json_schema_extra=_tune("speed and memory: out of memory, lower it (-> 1); slow with headroom, raise it (4 -> 8)"))
    ppo_epochs: int = Field(1, gt=0, le=MAX_COUNT, description="passes over each step's batch",
                            json_schema_extra=_tune(">1 reuses samples; watch actor/pg_clipfrac"))
    optim: OptimConfig = Field(default_factory=OptimConfig)
    use_kl_loss: bool = Field(False, description="add a KL-to-reference term to the loss (GRPO's usual KL)",
                              json_schema_extra=_tune("turn on against reward hacking / drift"))
    kl_loss_coef: float = Field(0.0, ge=0, description="its coefficient", json_schema_extra=_tune("0.001 is typical when on"))
    kl_loss_type: str = Field("low_var_kl", description="estimator: kl, abs, mse, low_var_kl (a + suffix: "
                              "straight-through k2 gradient)")
    entropy_coeff: float = Field(0.0, ge=0, description="entropy bonus", json_schema_extra=_tune(
        "0 = no push to explore; if answers all look alike, 0.01 (up to 0.1)"))
    clip_ratio_low: float = Field(0.2, description="PPO clip below 1 (1 - low)")
    clip_ratio_high: float = Field(0.3, description="PPO clip above 1 (1 + high); higher than low = \"clip-higher\" "
                                   "(DAPO uses 0.28)", json_schema_extra=_tune(
                                       "0.2/0.3 is conservative; flat reward: try 0.1/0.4; watch actor/pg_clipfrac"))
    clip_ratio_c: float = Field(3.0, description="dual-clip bound for negative advantages",
                                json_schema_extra=_tune("must be > 1"))
    loss_agg_mode: LossAggMode = Field(
        "token-mean", description="how token losses are averaged: token-mean, seq-mean-token-sum, seq-mean-token-mean, ...",
        json_schema_extra=_tune("token-mean avoids a bias towards short answers"))
    grad_clip: float = Field(1.0, gt=0, description="gradient-norm clipping",
                             json_schema_extra=_tune("watch actor/grad_norm; spikes mean instability"))
    fsdp_config: ActorFSDPConfig = Field(default_factory=ActorFSDPConfig)

    @field_validator("kl_loss_type")
    @classmethod
    def _known_kl(cls, value: str) -> str:
        return check_kl_type(value)


class MultiTurnConfig(_Section):
    enable: bool = Field(False, description="multi-turn rollouts with tools (verl agent loop)")
    format: str = Field("hermes", description="chat/tool-call format")
    max_assistant_turns: int | None = Field(None, gt=0, le=MAX_COUNT, description="turn limit per conversation")


class RolloutConfig(_Section):
    name: Literal["vllm", "sglang", "hf"] = Field("vllm", description="inference engine for rollouts: vllm, sglang, hf",
                                                  json_schema_extra=_tune("verl only"))
    n: int = Field(4, gt=0, le=MAX_COUNT, description="responses sampled per prompt (the GRPO group size)",
                   json_schema_extra=_tune("diversity vs cost; 4 is the balance point; too slow: 4 -> 2"))
    temperature: float = Field(1.0, ge=0, description="sampling temperature", json_schema_extra=_tune(
        "must be > 0 for GRPO; higher = more exploration (a remedy for collapse)"))
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    top_k: int = Field(-1, ge=-1, le=MAX_COUNT, description="top-k sampling (-1 = off)")
    gpu_memory_utilization: float = Field(0.6, description="share of each GPU vLLM takes for weights + KV cache",
                                          json_schema_extra=_tune("0.6-0.8 is the safe range; out of memory: 0.4-0.5"))
    tensor_model_parallel_size: int = Field(1, gt=0, le=MAX_COUNT, description="GPUs one vLLM engine spans",
                                            json_schema_extra=_tune("must divide the GPU count"))
    log_prob_micro_batch_size_per_gpu: int = Field(4, gt=0, le=MAX_COUNT,
                                                   description="micro-batch when recomputing old log-probs",
                                                   json_schema_extra=_tune("affects speed; lower it when out of memory"))
    multi_turn: MultiTurnConfig = Field(default_factory=MultiTurnConfig)
    engine_kwargs: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"vllm": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
        description="extra keyword arguments per engine (free-form map)")


class RefConfig(_Section):
    log_prob_micro_batch_size_per_gpu: int = Field(8, gt=0, le=MAX_COUNT, description="micro-batch for reference log-probs")
    fsdp_config: RefFSDPConfig = Field(default_factory=RefFSDPConfig)


class ModelConfig(_Section):
    path: str = Field("Qwen/Qwen2.5-7B-Instruct", description="a Hugging Face id (cached), a model folder, or builtin:tiny",
                      json_schema_extra=_tune("7B is the balance of quality and cost; builtin:tiny trains on a CPU in minutes"))
    use_remove_padding: bool = Field(True, description="pack sequences without padding (verl)",
                                     json_schema_extra=_tune("faster; leave on"))
    enable_gradient_checkpointing: bool = Field(True, description="recompute activations in the backward pass",
                                                json_schema_extra=_tune("out of memory: make sure it is on (time for memory)"))
    trust_remote_code: bool = Field(False, description="allow model code from the model's repository")


class ActorRolloutRefConfig(_Section):
    actor: ActorConfig = Field(default_factory=ActorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    ref: RefConfig = Field(default_factory=RefConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)


# ---- trainer --------------------------------------------------------------------------------------


class TrainerConfig(_Section):
    n_gpus_per_node: int = Field(1, gt=0, le=MAX_COUNT, description="GPUs per machine",
                                 json_schema_extra=_tune("train_batch_size x n must divide by the GPU count"))
    nnodes: int = Field(1, gt=0, le=MAX_COUNT, description="machines")
    total_epochs: int = Field(100, gt=0, le=MAX_STEPS, description="passes over the training tasks",
                              json_schema_extra=_tune("fit it to the dataset's size"))
    total_training_steps: int | None = Field(None, gt=0, le=MAX_STEPS, description="stop after this many steps instead (null = "
                                             "epochs x steps per epoch)")
    save_freq: int = Field(50, le=MAX_STEPS, description="checkpoint every N steps (-1 = only at the end)",
                           json_schema_extra=_tune("keep it below the total steps so an interruption loses little"))
    test_freq: int = Field(10, le=MAX_STEPS, description="validate every N steps (-1 = never during training)",
                           json_schema_extra=_tune("more often (e.g. 5) to catch problems early"))
    val_before_train: bool = Field(True, description="validate once before the first step",
                                   json_schema_extra=_tune("records the baseline"))
    critic_warmup: int = Field(0, ge=0, le=MAX_STEPS, description="steps that train only the critic (GAE)")
    logger: list[str] = Field(default_factory=lambda: ["console", "file"], description="verl loggers: console, file, "
                              "wandb, tensorboard, ...", json_schema_extra=_tune(
                                  "the run folder's metrics.jsonl is always written; the torch backend also writes "
                                  "tensorboard and wandb (devops-rl export copies a finished run)"))
    project_name: str = Field("devops-rl", description="project name for loggers")
    experiment_name: str = Field("devops_architect", description="experiment name for loggers")
    default_local_dir: str | None = Field(None, description="verl's checkpoint folder (null = the run folder's checkpoints/)")
    resume_mode: Literal["auto", "disable", "resume_path"] = Field(
        "auto", description="verl's resume mode: auto, disable, resume_path",
        json_schema_extra=_tune("train --resume sets what it needs"))
    device: Literal["cuda", "npu", "cpu"] = Field("cuda", description="verl's device type: cuda, npu, cpu")

    @field_validator("logger", mode="before")
    @classmethod
    def _one_logger(cls, value):
        return [value] if isinstance(value, str) else value


# ---- devops (this project's own section) -----------------------------------------------------------


class RewardJudgeConfig(_Section):
    """The optional LLM judge: an OpenAI-compatible endpoint grades each rubric criterion (see docs/reward.md)."""

    enable: bool = Field(False, description="an LLM judge grades each rubric criterion too (docs/reward.md)",
                         json_schema_extra=_tune("GPU boxes: a local vLLM"))
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    model: str | None = Field(None, description="model name the endpoint serves")
    weight: float = Field(0.5, ge=0, le=1, description="share of each criterion's score that comes from the judge",
                          json_schema_extra=_tune("0 = rules only"))
    timeout: float = Field(30.0, gt=0, description="seconds per request; on timeout, error or a garbage reply the "
                           "rule score is used")
    concurrency: int = Field(8, gt=0, le=MAX_COUNT, description="judge requests in flight at once")
    api_key_env: str = Field("DEVOPS_RL_API_KEY", description="environment variable with the API key (never in the "
                             "config)")

    @model_validator(mode="after")
    def _needs_endpoint(self) -> RewardJudgeConfig:
        if self.enable and not (self.base_url and self.model):
            raise ValueError("enable needs base_url and model "
                             "(e.g. --set devops.reward.judge.base_url=http://127.0.0.1:8000/v1)")
        return self


class RewardConfig(_Section):
    """How the reward grades answers, beyond the rubric rules."""

    judge: RewardJudgeConfig = Field(default_factory=RewardJudgeConfig)


_ALERTS = Thresholds()  # the defaults live with the checks (core.runs.health), the help here


class AlertsConfig(_Section):
    """When the GRPO health alerts fire (core.runs.health): the trainer writes them as `alert` events, the cockpit
    and `tail` show them."""

    window: int = Field(_ALERTS.window, gt=1, description="steps the trend alerts look back over (flat or collapsing "
                        "reward, zero-variance groups, hacking)", json_schema_extra=_tune(
                            "longer for noisy rewards (small batches), shorter to hear sooner"))
    baseline_steps: int = Field(_ALERTS.baseline_steps, gt=0, description="first steps whose mean entropy is the "
                                "run's own start for the entropy-collapse alert")
    entropy_collapse_ratio: float = Field(_ALERTS.entropy_collapse_ratio, gt=0, lt=1, description="warn when "
                                          "actor/entropy falls below this share of its start", json_schema_extra=_tune(
                                              "an entropy that keeps falling fast means the answers converge to one"))
    entropy_uniform_share: float = Field(_ALERTS.entropy_uniform_share, gt=0, le=1, description="warn when "
                                         "actor/entropy exceeds this share of ln(vocabulary size): near-uniform noise")
    reward_flat_tolerance: float = Field(_ALERTS.reward_flat_tolerance, ge=0, description="warn when the training "
                                         "reward moves less than this over a window")
    reward_collapse_ratio: float = Field(_ALERTS.reward_collapse_ratio, gt=0, lt=1, description="warn when the "
                                         "reward's recent mean falls below this share of its best mean")
    learning_min_rise: float = Field(_ALERTS.learning_min_rise, ge=0, description="warn 'not learning' when, after "
                                     "a window, the reward has risen less than this (or than its noise) over the run's "
                                     "own start")
    zero_std_ratio_max: float = Field(_ALERTS.zero_std_ratio_max, gt=0, le=1, description="warn when more than this "
                                      "share of prompt groups have zero reward variance (critic/score/zero_std_ratio)",
                                      json_schema_extra=_tune("such groups teach nothing: raise rollout.n or the "
                                                              "temperature, or turn on algorithm.filter_groups"))
    clip_ratio_max: float = Field(_ALERTS.clip_ratio_max, ge=0, le=1, description="warn when more than this share of "
                                  "answers is cut at max_response_length (response_length/clip_ratio)")
    hacking_rise: float = Field(_ALERTS.hacking_rise, gt=0, description="warn when one reward dimension or penalty "
                                "rises this much over a window while the rubric score stays flat (reward hacking)")
    hacking_rubric_flat: float = Field(_ALERTS.hacking_rubric_flat, ge=0, description="the rubric score counts as "
                                       "flat while it moves less than this over a window")
    stall_after_s: float = Field(_ALERTS.stall_after_s, gt=0, description="warn when a running run logs no step for "
                                 "this many seconds (or five steps' time, when longer)")


class TaskSourceConfig(_Section):
    path: str = Field(..., min_length=1, description="a task file (YAML list of tasks, or JSONL: one task per line) "
                      "or a folder of them")
    weight: int = Field(1, ge=1, le=100, description="copies of each of this source's training tasks per epoch "
                        "(mixing sources; validation is not weighted)")


CURRICULUM_SOURCES = "builtin, drills, families, families:ID[,ID...], or a task file or folder"


class CurriculumSourceConfig(_Section):
    source: str = Field(..., min_length=1, description=f"what the stage trains on: {CURRICULUM_SOURCES} (docs/training.md)")
    weight: int = Field(1, ge=1, le=100, description="copies of each of this source's tasks per pass over the stage")
    instances: int = Field(8, ge=1, le=10_000, description="instances of each family (drills and families sources)")

    @field_validator("source")
    @classmethod
    def _known_source(cls, value: str) -> str:
        from tasks.families import get_family

        kind, sep, names = value.partition(":")
        if kind == "families" and sep:
            for name in names.split(","):
                try:
                    get_family(name.strip())
                except UserError as exc:  # pydantic reports a ValueError on this key, in the one-line error
                    raise ValueError(exc.message) from None
        return value


class CurriculumStageConfig(_Section):
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="steps this stage lasts (null: until the run ends; "
                              "only the last stage)")
    mix: list[CurriculumSourceConfig] = Field(..., min_length=1, description="the sources this stage draws "
                                              "prompts from, with their weights")


class DevopsConfig(_Section):
    backend: Literal["auto", "torch", "verl"] = Field(
        "auto", description="auto (verl when it and a GPU are usable, else torch), torch, verl")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="seed for the task split, sampling and initialisation")
    n_runners: int = Field(1, gt=0, le=MAX_COUNT,
                           description="parallel workers: reward scorers (torch), agent-loop workers (verl)")
    val_fraction: float = Field(0.2, ge=0, lt=1, description="share of tasks held out for validation (stratified by type)")
    tasks: list[TaskSourceConfig] = Field(
        default_factory=list, description="task sources to train and validate on: [{path: my-tasks/, weight: 1}] "
        "(empty = the built-in tasks/data; train --tasks PATH sets it)")
    curriculum: list[CurriculumStageConfig] = Field(
        default_factory=list, description="training stages, each a weighted mix of families, drills, the "
        "hand-written tasks and task files: [{steps: 20, mix: [{source: drills}]}, {mix: [{source: builtin}]}] "
        "(empty = train on devops.tasks)", json_schema_extra=_tune("easy drills first, the hand-written tasks last; "
                                                                  "validation stays the devops.tasks split"))
    dedup_threshold: float = Field(0.3, ge=0, le=1, description="word-set similarity from which two tasks are "
                                   "near-duplicates, kept on one side of the split (0 = off; docs/tasks.md)")
    holdout: list[str] = Field(default_factory=list, description="groups held out whole for validation: type:NAME "
                               "or file:PATH (with their near-duplicates)")
    reward_weights: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="per task type, weight overrides for reward dimensions: "
        "{kubernetes: {security: 2.0}}")
    samples_per_step: int = Field(4, ge=0, le=MAX_COUNT, description="prompts/responses written to samples.jsonl each step")
    keep_checkpoints: int = Field(3, ge=0, le=MAX_STEPS, description="newest checkpoints kept (0 = keep all)")
    sft_warmstart_steps: int = Field(0, ge=0, le=MAX_STEPS,
                                     description="SFT steps on the reference answers before RL (builtin:tiny only)",
                                     json_schema_extra=_tune("gives the tiny model something to improve from"))
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch backend device: auto, cpu, cuda")
    runs_dir: str | None = Field(None, description="where runs go (null = $DEVOPS_RL_RUNS_DIR or ./runs)")
    reward: RewardConfig = Field(default_factory=RewardConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)

    @field_validator("curriculum")
    @classmethod
    def _open_stage_last(cls, stages: list[CurriculumStageConfig]) -> list[CurriculumStageConfig]:
        open_ = [i for i, stage in enumerate(stages) if stage.steps is None]
        if open_ and open_[0] != len(stages) - 1:
            raise ValueError(f"stage {open_[0]} has no steps; only the last stage may run until the end (give it steps: N)")
        return stages


class TrainingConfig(_Section):
    """The whole training config; field names, nesting and meaning follow verl 0.9's ppo_trainer.yaml."""

    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = Field(default_factory=ActorRolloutRefConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    devops: DevopsConfig = Field(default_factory=DevopsConfig)
    verl_overrides: dict[str, Any] = Field(default_factory=dict, description="verl keys this model does not list, "
                                           "passed through to verl as dotted overrides")

    def to_dict(self) -> dict:
        """Plain nested data (lists, not tuples) as written to YAML."""
        return _plain(self.model_dump(mode="python"))

    def to_yaml(self, *, describe: bool = False) -> str:
        """YAML that `config_from_yaml` and `train --config` read back to an equal config; `describe` puts each
        key's meaning in a comment above it."""
        if describe:
            return "".join(_described_yaml(self.to_dict(), ""))
        return _dump(self.to_dict())

    def flat(self) -> dict[str, Any]:
        """Every leaf as `dotted.key: value`; free-form maps (engine_kwargs, reward_weights) are one leaf each and
        verl_overrides keys are kept as written (`verl_overrides.<key>`)."""
        data = self.to_dict()
        overrides = data.pop(VERL_OVERRIDES)
        out = flatten(data)
        out.update({f"{VERL_OVERRIDES}.{k}": v for k, v in overrides.items()})
        return out


class _Dumper(yaml.SafeDumper):
    """SafeDumper that double-quotes strings holding YAML line breaks (NEL, LS, PS), which it would emit raw."""


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = '"' if any(c in value for c in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def _dump(data: dict) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _described_yaml(data: dict, path: str, indent: str = ""):
    """The lines of `to_yaml(describe=True)`: a section recurses, a leaf is dumped under its `# meaning` comment."""
    for key, value in data.items():
        dotted = f"{path}{key}"
        help_ = key_help(dotted)
        if help_ is not None and help_.meaning:
            yield f"{indent}# {help_.meaning}\n"
        if isinstance(value, dict) and value and is_model(model_node(dotted.split("."))):
            yield f"{indent}{key}:\n"
            yield from _described_yaml(value, dotted + ".", indent + "  ")
        else:
            yield "".join(f"{indent}{line}\n" for line in _dump({key: value}).splitlines())


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> `dotted.key: value`; a mapping the model does not describe key by key stays one leaf."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not _is_free_form(path):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _is_free_form(path: str) -> bool:
    node = model_node(path.split("."))
    return node is not None and not is_model(node)


# ---- the model's key tree --------------------------------------------------------------------------


def is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def model_node(parts: list[str]):
    """The annotation at a dotted path of TrainingConfig, or None when the path is not a model field."""
    node: Any = TrainingConfig
    for part in parts:
        if not is_model(node) or part not in node.model_fields:
            return None
        node = node.model_fields[part].annotation
    return node


@dataclass(frozen=True)
class KeyHelp:
    """What the model says about one key: its meaning, tuning advice ("" when none) and type with bounds."""

    meaning: str
    tune: str
    kind: str


def key_help(dotted: str) -> KeyHelp | None:
    """The help of a dotted key (a key under a free-form map gets the map's), or None when the model has no such key."""
    model: Any = TrainingConfig
    info = None
    for part in dotted.split("."):
        if info is not None and typing.get_origin(info.annotation) is dict:
            break  # inside a free-form map: its own help applies
        if not is_model(model) or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = info.annotation
    if info is None:
        return None
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
    bounds = [f"{sign} {getattr(item, attr)}" for item in info.metadata
              for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
              if getattr(item, attr, None) is not None]
    return KeyHelp(info.description or "", str(extra.get("tune", "")),
                   f"type {kind}" + (f", {', '.join(bounds)}" if bounds else ""))
