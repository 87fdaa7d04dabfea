"""`config doctor`: estimate a config's GPU memory (weights, gradients, Adam, activations, vLLM) against the GPU.

Then print the original design's tuning advice (section 4.4: out of memory, too slow, flat reward) that applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024**3
ACT_BYTES_PER_TOKEN_HIDDEN = 34  # bf16 activations kept per layer per token per hidden unit (Korthikanti et al. 2022)
VLLM_SLEEP_RESERVE_GIB = 1.5  # what a sleeping vLLM engine and the CUDA context keep during the update phase
FIT_MARGIN = 0.9  # peaks above 90% of the GPU are reported as out of memory (fragmentation, kernels' workspace)


@dataclass
class ModelShape:
    """The figures of a transformer that decide its size."""

    name: str
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool  # Qwen2 has biases on q, k and v
    source: str  # where the figures came from: a config.json path, the tiny recipe, or the table of known models

    @property
    def params(self) -> int:
        attention = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        if self.qkv_bias:
            attention += (self.heads + 2 * self.kv_heads) * self.head_dim
        mlp = 3 * self.hidden * self.intermediate  # gated MLP: gate, up, down
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * (attention + mlp + 2 * self.hidden) + embeddings + self.hidden


@dataclass
class MemoryEstimate:
    """Peak GPU memory per GPU for one config, by component (GiB), and whether it fits."""

    shape: ModelShape
    layout: str  # "verl" (FSDP actor + vLLM rollout, colocated) or "torch" (native backend, one device)
    n_gpus: int
    rows: list[tuple[str, float, str]] = field(default_factory=list)  # (component, GiB, note)
    phases: dict[str, float] = field(default_factory=dict)  # phase -> GiB
    gpu_total_gib: float | None = None
    gpu_source: str = ""
    host_offload_gib: float = 0.0

    @property
    def peak_gib(self) -> float:
        return max(self.phases.values()) if self.phases else 0.0

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_total_gib is None else self.peak_gib <= FIT_MARGIN * self.gpu_total_gib


def model_shape(model_path: str, *, build_builtin: bool = True) -> ModelShape | None:
    """The model's shape from its config.json (builtin:tiny is built if needed), or the known-model table."""
    from core.training.config import KNOWN_MODELS, model_config_json

    info = model_config_json(model_path, build_builtin=build_builtin)
    if not info:
        return None
    info = {**(info.get("text_config") or {}), **info}
    try:
        hidden = int(info["hidden_size"])
        heads = int(info["num_attention_heads"])
        shape = ModelShape(
            name=model_path,
            hidden=hidden,
            layers=int(info["num_hidden_layers"]),
            vocab=int(info["vocab_size"]),
            intermediate=int(info.get("intermediate_size") or 4 * hidden),
            heads=heads,
            kv_heads=int(info.get("num_key_value_heads") or heads),
            head_dim=int(info.get("head_dim") or hidden // heads),
            tied=bool(info.get("tie_word_embeddings", False)),
            qkv_bias=bool(info.get("attention_bias", info.get("model_type") == "qwen2" or model_path.startswith("Qwen/Qwen2"))),
            source="table of well-known models" if model_path in KNOWN_MODELS and "model_type" not in info else "config.json",
        )
    except (KeyError, TypeError, ValueError):
        return None
    return shape


def gpu_memory_gib() -> tuple[float | None, str]:
    """Memory of the smallest visible GPU (NVML), or (None, why)."""
    from core.training import sysmon

    totals = sysmon.gpu_memory_total_gb()
    if not totals:
        return None, "no GPU found through NVML; pass --gpu-mem GIB to check against a GPU size"
    return min(totals), f"NVML: {len(totals)} GPU(s), {min(totals):.1f} GiB each"


def _layout(cfg) -> str:
    from core.training.tiny_model import BUILTIN_TINY

    backend = cfg.devops.backend
    if backend == "auto":
        return "torch" if cfg.actor_rollout_ref.model.path == BUILTIN_TINY else "verl"
    return backend


def estimate_memory(cfg, *, gpu_mem_gib: float | None = None, shape: ModelShape | None = None,
                    layout: str | None = None) -> MemoryEstimate | None:
    """Peak memory per GPU for the config, or None when the model's size cannot be found."""
    shape = shape or model_shape(cfg.actor_rollout_ref.model.path)
    if shape is None:
        return None
    layout = layout or _layout(cfg)
    if gpu_mem_gib is not None:
        gpu_source = "--gpu-mem"
    else:
        gpu_mem_gib, gpu_source = gpu_memory_gib()
    arr = cfg.actor_rollout_ref
    actor, rollout, model = arr.actor, arr.rollout, arr.model
    n_gpus = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes if layout == "verl" else 1
    p = shape.params
    seq = cfg.data.max_prompt_length + cfg.data.max_response_length
    micro = actor.ppo_micro_batch_size_per_gpu if layout == "verl" else min(actor.ppo_micro_batch_size_per_gpu,
                                                                            cfg.data.train_batch_size * rollout.n)
    tokens = micro * seq
    layer_act = tokens * shape.hidden * ACT_BYTES_PER_TOKEN_HIDDEN
    if model.enable_gradient_checkpointing:
        activations = tokens * shape.hidden * 2 * shape.layers + layer_act  # layer inputs + one layer recomputed
        act_note = f"{micro} x {seq} tokens, checkpointing on"
    else:
        activations = layer_act * shape.layers
        act_note = f"{micro} x {seq} tokens, checkpointing off"
    logits = tokens * shape.vocab * 4  # fp32 logits for the log-probabilities
    rows: list[tuple[str, float, str]] = []
    phases: dict[str, float] = {}
    est = MemoryEstimate(shape=shape, layout=layout, n_gpus=n_gpus, rows=rows, phases=phases,
                         gpu_total_gib=gpu_mem_gib, gpu_source=gpu_source)
    kl = actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    if layout == "verl":
        # verl keeps an fp32 master copy of the actor, sharded by FSDP; offloaded parts live on the host
        # while vLLM generates and are brought back for the update.
        weights, grads, adam = 4 * p / n_gpus, 4 * p / n_gpus, 8 * p / n_gpus
        ref = 2 * p / n_gpus if kl else 0.0
        vllm = rollout.gpu_memory_utilization * (gpu_mem_gib or 0) * GIB
        rows += [
            ("actor weights (fp32, FSDP)", weights / GIB,
             "on the host during rollout" if actor.fsdp_config.param_offload else "resident"),
            ("actor gradients (fp32)", grads / GIB, "update phase only"),
            ("Adam states (2 x fp32)", adam / GIB,
             "on the host during rollout" if actor.fsdp_config.optimizer_offload else "resident"),
            ("activations", activations / GIB, act_note),
            ("logits (fp32)", logits / GIB, f"vocab {shape.vocab}"),
            ("reference model (bf16)", ref / GIB,
             ("param_offload" if arr.ref.fsdp_config.param_offload else "resident") if kl else "not used (no KL)"),
            ("vLLM (weights + KV cache)", vllm / GIB, f"gpu_memory_utilization {rollout.gpu_memory_utilization}"
             + ("" if gpu_mem_gib else " x GPU size (unknown)")),
        ]
        resident = (0 if actor.fsdp_config.param_offload else weights) + (0 if actor.fsdp_config.optimizer_offload else adam)
        ref_resident = 0 if arr.ref.fsdp_config.param_offload else ref
        phases["rollout"] = (vllm + resident + ref_resident) / GIB
        phases["update"] = (weights + grads + adam + activations + logits + ref_resident) / GIB + VLLM_SLEEP_RESERVE_GIB
        est.host_offload_gib = ((weights if actor.fsdp_config.param_offload else 0)
                                + (adam if actor.fsdp_config.optimizer_offload else 0)) * n_gpus / GIB
    else:
        # The native backend: one device, bf16 on a GPU, torch AdamW states in the parameters' dtype, HF generate.
        width = 2
        weights, grads, adam = width * p, width * p, 2 * width * p
        ref = width * p if kl else 0.0
        sequences = cfg.data.train_batch_size * rollout.n
        kv = sequences * seq * shape.layers * 2 * shape.kv_heads * shape.head_dim * width
        rows += [
            ("policy weights (bf16)", weights / GIB, "resident"),
            ("gradients (bf16)", grads / GIB, "update phase"),
            ("AdamW states (2 x bf16)", adam / GIB, "resident"),
            ("activations", activations / GIB, act_note),
            ("logits (fp32)", logits / GIB, f"vocab {shape.vocab}"),
            ("reference model (bf16)", ref / GIB, "resident" if kl else "not used (no KL)"),
            ("generation KV cache", kv / GIB, f"{sequences} sequences x {seq} tokens"),
        ]
        phases["rollout"] = (weights + adam + ref + kv) / GIB
        phases["update"] = (weights + grads + adam + ref + activations + logits) / GIB
    return est


def advice(cfg, est: MemoryEstimate | None) -> list[str]:
    """The design's tuning advice (section 4.4) that applies to this config, most urgent first."""
    arr = cfg.actor_rollout_ref
    actor, rollout = arr.actor, arr.rollout
    out: list[str] = []
    if est is not None and est.fits is False:
        out.append(f"out of memory: the estimated peak ({est.peak_gib:.1f} GiB, {max(est.phases, key=est.phases.get)} phase) "
                   f"exceeds {FIT_MARGIN:.0%} of the GPU ({est.gpu_total_gib:.1f} GiB). In this order:")
        if cfg.data.train_batch_size > 1:
            out.append(f"  - lower data.train_batch_size {cfg.data.train_batch_size} -> {max(1, cfg.data.train_batch_size // 2)}"
                       " (and ppo_mini_batch_size with it)")
        if est.layout == "verl" and rollout.gpu_memory_utilization > 0.4:
            out.append(f"  - lower actor_rollout_ref.rollout.gpu_memory_utilization {rollout.gpu_memory_utilization} -> 0.4")
        if not arr.model.enable_gradient_checkpointing:
            out.append("  - set actor_rollout_ref.model.enable_gradient_checkpointing=true (time for memory)")
        if est.layout == "verl" and not actor.fsdp_config.param_offload:
            out.append("  - set actor_rollout_ref.actor.fsdp_config.param_offload=true (and optimizer_offload)")
        if actor.ppo_micro_batch_size_per_gpu > 1:
            out.append("  - lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu "
                       f"{actor.ppo_micro_batch_size_per_gpu} -> 1")
        out.append(f"  - or shorten data.max_response_length ({cfg.data.max_response_length}) / max_prompt_length "
                   f"({cfg.data.max_prompt_length}), or use more GPUs (trainer.n_gpus_per_node)")
    elif est is not None and est.fits:
        headroom = FIT_MARGIN * est.gpu_total_gib - est.peak_gib
        out.append(f"fits: estimated peak {est.peak_gib:.1f} GiB of {est.gpu_total_gib:.1f} GiB ({headroom:.1f} GiB headroom)")
    if est is not None and est.layout == "verl" and est.host_offload_gib > 0:
        import psutil

        host = psutil.virtual_memory().total / GIB
        if est.host_offload_gib > 0.8 * host:
            out.append(f"host memory: offloading needs about {est.host_offload_gib:.0f} GiB of RAM but this machine has "
                       f"{host:.0f} GiB; turn optimizer_offload off or use more GPUs")
    slow = []
    if est is None or est.fits:
        slow.append(f"raise data.train_batch_size {cfg.data.train_batch_size} -> {cfg.data.train_batch_size * 2}")
        slow.append(f"raise actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu {actor.ppo_micro_batch_size_per_gpu} -> "
                    f"{actor.ppo_micro_batch_size_per_gpu * 2}")
    if rollout.n > 2:
        slow.append(f"lower actor_rollout_ref.rollout.n {rollout.n} -> 2 (fewer generations per prompt)")
    if slow:
        out.append("if training is too slow: " + "; ".join(slow))
    flat = [f"raise actor_rollout_ref.actor.optim.lr {actor.optim.lr:g} -> {actor.optim.lr * 2:g}"]
    if (actor.clip_ratio_low, actor.clip_ratio_high) != (0.1, 0.4):
        flat.append(f"widen the clip range {actor.clip_ratio_low}/{actor.clip_ratio_high} -> 0.1/0.4")
    if actor.entropy_coeff == 0:
        flat.append("set actor_rollout_ref.actor.entropy_coeff=0.01 if the answers all look alike")
    out.append("if the reward stays flat: " + "; ".join(flat))
    if est is not None and est.shape.params > 1e9 and actor.optim.lr > 1e-5:
        out.append(f"learning rate {actor.optim.lr:g} is high for a {est.shape.params / 1e9:.1f}B model: start at 1e-6, "
                   "drop to 5e-7 if training is unstable")
    return out


def report(cfg, *, gpu_mem_gib: float | None = None) -> str:
    """The full doctor text: model size, memory table, the verdict and the advice."""
    shape = model_shape(cfg.actor_rollout_ref.model.path)
    lines: list[str] = []
    if shape is None:
        lines.append(f"model: {cfg.actor_rollout_ref.model.path}: cannot estimate its size (no local config.json and not "
                     "a well-known model); download it or point model.path at a model folder")
        est = None
    else:
        est = estimate_memory(cfg, gpu_mem_gib=gpu_mem_gib, shape=shape)
        lines.append(f"model: {shape.name}: {shape.params / 1e9:.3f}B parameters ({shape.layers} layers, hidden "
                     f"{shape.hidden}, vocab {shape.vocab}; from {shape.source})")
        layout_name = ("verl (FSDP actor + vLLM rollout on the same GPUs)" if est.layout == "verl"
                       else "native torch backend (one device)")
        lines.append(f"layout: {layout_name}, {est.n_gpus} GPU(s)")
        lines.append(f"GPU: {est.gpu_total_gib:.1f} GiB ({est.gpu_source})" if est.gpu_total_gib is not None
                     else f"GPU: {est.gpu_source}")
        lines.append("")
        width = max(len(r[0]) for r in est.rows)
        lines.append(f"{'component':<{width}}  {'GiB/GPU':>9}  note")
        for name, gib, note in est.rows:
            lines.append(f"{name:<{width}}  {gib:>9.2f}  {note}")
        for phase, gib in est.phases.items():
            lines.append(f"{('peak, ' + phase + ' phase'):<{width}}  {gib:>9.2f}")
        lines.append("")
    lines.extend(advice(cfg, est))
    return "\n".join(lines)
