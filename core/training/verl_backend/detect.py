"""Can verl run here? One-line answers for `--backend auto` and clear failures before anything starts.

Checks use package metadata and NVML only (no verl, ray or torch import), so they cost milliseconds.
`cpus_needed` also runs inside Ray (verl's TaskRunner) against the cluster's own CPU count.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from importlib import metadata
from pathlib import Path

from core.errors import UserError

GPU_INSTALL = "pip install 'devops-rl[gpu]' on the GPU machine (verl + vLLM, see docs/gpu.md)"
# What verl 0.9.1's default (v1) trainer imports beyond verl's own required dependencies.
TRAINER_MODULES = {"transfer_queue": "TransferQueue", "cachetools": "cachetools", "fastapi": "fastapi",
                   "uvicorn": "uvicorn"}
ROLLOUT_PACKAGES = {"vllm": "vllm", "sglang": "sglang"}
# What verl 0.9.1 holds in Ray for good (other actors hold no CPU once placed): TransferQueue's controller
# and each SimpleStorage unit are `num_cpus=1` actors; each GPU bundle of a resource pool holds verl's
# ResourcePoolManager.max_colocate_count CPUs.
TQ_CONTROLLER_CPUS = 1
CPUS_PER_GPU = 3
TQ_UNITS_KEY = "transfer_queue.backend.SimpleStorage.num_data_storage_units"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def cuda_gpu_count() -> int:
    """CUDA GPUs this machine can use: NVML's count, limited by CUDA_VISIBLE_DEVICES when it is set."""
    from core.training.sysmon import gpu_count

    count = gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]))
    return count


def attention_implementation() -> tuple[str, str]:
    """(the `attn_implementation` verl's FSDP actor can load here, one line saying why).

    verl loads the actor with flash_attention_2 unless told otherwise, and its padding-free path
    (`use_remove_padding`) needs flash-attn's varlen kernels; without the package both must be off.
    """
    if _installed("flash_attn"):
        return "flash_attention_2", f"attention: flash-attn {_version('flash-attn')}"
    return "sdpa", "attention: sdpa with use_remove_padding=false (flash-attn is not installed)"


def verl_available(ray_address: str | None = None) -> tuple[bool, str]:
    """(True, what was found) when verl can train from here, else (False, why): verl, a CUDA GPU and vLLM
    on this machine, or only verl when `ray_address` names a cluster whose nodes bring the GPUs."""
    if not _installed("verl"):
        return False, f"verl is not installed; {GPU_INSTALL}"
    if ray_address:
        return True, f"verl {_version('verl')} on the Ray cluster at {ray_address}"
    gpus = cuda_gpu_count()
    if gpus == 0:
        return False, "no CUDA GPU visible (NVML finds none); verl needs at least one"
    if not _installed("vllm"):
        return False, f"vLLM is not installed (verl's rollout engine); {GPU_INSTALL}"
    return True, (f"{gpus} CUDA GPU{'s' if gpus != 1 else ''}, verl {_version('verl')}, vLLM {_version('vllm')}, "
                  f"{attention_implementation()[1]}")


def _tq_units(config) -> int:
    """TransferQueue's SimpleStorage units, one Ray actor each (other storage backends are not counted)."""
    tq = config.transfer_queue.backend
    return int(tq.SimpleStorage.num_data_storage_units) if tq.storage_backend == "SimpleStorage" else 0


def cpus_needed(config) -> tuple[int, str]:
    """(CPUs verl holds in Ray for a composed verl config, where they go) for the error line."""
    units = _tq_units(config)
    gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    reward_model = config.reward.reward_model
    if reward_model.enable and reward_model.enable_resource_pool:
        gpus += reward_model.n_gpus_per_node * reward_model.nnodes
    need = TQ_CONTROLLER_CPUS + units + CPUS_PER_GPU * gpus
    return need, (f"TransferQueue {TQ_CONTROLLER_CPUS} + {units} storage units, {CPUS_PER_GPU} per GPU x {gpus} "
                  f"GPU{'s' if gpus != 1 else ''}")


def check_cpus(config, available: float, *, cluster: bool) -> None:
    """UserError when Ray has fewer CPUs than verl holds (on this machine, or in the whole `cluster`):
    verl would wait for them silently, forever."""
    need, how = cpus_needed(config)
    if available >= need:
        return
    units = _tq_units(config)
    spare = int(available) - (need - units)
    fewer = f"set verl_overrides.{TQ_UNITS_KEY}={spare} (fewer TransferQueue units), " if 1 <= spare < units else ""
    more = ("start its nodes with more (ray start --num-cpus=N counts logical CPUs)" if cluster else
            f"give Ray more (verl_overrides.ray_kwargs.ray_init.num_cpus={need} counts logical CPUs)")
    raise UserError(f"{'the Ray cluster' if cluster else 'this machine'} has {available:g} CPUs for Ray but verl needs "
                    f"{need} ({how}); {fewer}{more}, or use fewer GPUs")


def local_ray_cpus(config) -> float:
    """CPUs the Ray that verl starts on this machine will have: `ray_init.num_cpus`, else the CPU count Ray
    starts from (it only lowers it for a container's CPU quota)."""
    configured = config.ray_kwargs.ray_init.get("num_cpus")
    return float(configured or os.cpu_count() or 1)


def check_ray_address(address: str, timeout: float = 3.0) -> None:
    """UserError unless a Ray head answers at `address` (`auto`, `host:port` or `ray://host:port`)."""
    if address == "auto":
        return
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserError(f"--ray-address {address}: expected HOST:PORT (e.g. 10.0.0.1:6379), ray://HOST:10001 or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"--ray-address {address}: no Ray cluster answers there ({reason}); start one with "
                        f"'ray start --head --port={port}' on the head node, or check the address") from None


def check_model_path(model_path: str) -> None:
    """UserError when the model cannot be found: a missing folder, or an id not cached while offline."""
    text = model_path.strip()
    if text.startswith("builtin:"):
        from core.training.tiny_model import BUILTIN_TINY

        if text != BUILTIN_TINY:
            raise UserError(f"actor_rollout_ref.model.path: unknown built-in model '{text}'; use '{BUILTIN_TINY}'")
        return
    local = Path(text).expanduser()
    looks_local = text.startswith((".", "/", "~")) or text.count("/") != 1
    if local.exists():
        if not (local / "config.json").is_file():
            raise UserError(f"actor_rollout_ref.model.path: {local} has no config.json; pass a save_pretrained folder")
        return
    if looks_local:
        raise UserError(f"actor_rollout_ref.model.path: no such folder '{text}'; pass a model folder or a "
                        "Hugging Face id such as Qwen/Qwen2.5-7B-Instruct")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        from core.training.tiny_model import resolve_model_path

        resolve_model_path(text)  # raises "not in the local Hugging Face cache; download it first"


def check_launch(cfg, *, ray_address: str | None = None) -> None:
    """Everything verl needs before a run starts, each failure one line saying what to install or change."""
    if not _installed("verl"):
        raise UserError(f"--backend verl: verl is not installed; {GPU_INSTALL}, or use --backend torch")
    missing = [dist for module, dist in TRAINER_MODULES.items() if not _installed(module)]
    if missing:
        raise UserError(f"--backend verl: verl's trainer needs {', '.join(missing)}; "
                        f"pip install 'devops-rl[verl]' (or {GPU_INSTALL})")
    if ray_address:
        check_ray_address(ray_address)  # GPUs and vLLM may all be on other nodes: the cluster checks them
    else:
        gpus = cuda_gpu_count()
        if gpus == 0:
            raise UserError("--backend verl: no CUDA GPU visible (NVML finds none); run on a GPU machine, join a "
                            "cluster with --ray-address, or use --backend torch")
        wanted = cfg.trainer.n_gpus_per_node
        if cfg.trainer.nnodes > 1:
            raise UserError(f"trainer.nnodes: {cfg.trainer.nnodes}: a multi-node run needs a Ray cluster; start one "
                            "('ray start --head' / 'ray start --address=HEAD:6379') and pass --ray-address HEAD:6379")
        if wanted > gpus:
            raise UserError(f"trainer.n_gpus_per_node: {wanted}: only {gpus} GPU{'s' if gpus != 1 else ''} visible "
                            f"here; set trainer.n_gpus_per_node={gpus}")
        rollout = cfg.actor_rollout_ref.rollout.name
        package = ROLLOUT_PACKAGES.get(rollout)
        if package and not _installed(package):
            hint = GPU_INSTALL if package == "vllm" else "pip install sglang, or set actor_rollout_ref.rollout.name=vllm"
            raise UserError(f"actor_rollout_ref.rollout.name: {rollout}: {package} is not installed; {hint}")
    check_model_path(cfg.actor_rollout_ref.model.path)
