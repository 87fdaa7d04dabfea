"""The Python side of the GPU smoke kit (scripts/gpu_smoke.sh): a probe of what a verl run needs, a small
Qwen2-shaped model built locally, and the checks of the run folder a smoke run leaves.

`python -m core.training.verl_backend.smoke probe | model | check RUN_DIR STEPS [RESUMED_FROM]`
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# The built-in tiny model's recipe with 4 heads of 64: vLLM's attention kernels accept head_dim 64 (not
# the tiny model's 24). Same tokenizer and chat template, so the same prompts and prompt lengths.
SMOKE_RECIPE_CHANGES = {"hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 4,
                        "num_key_value_heads": 2}
PROBE_S = 5.0  # nvidia-smi's own limit inside the probe
INSTALL = "on a GPU machine: EXTRAS=gpu,test scripts/bootstrap.sh (see docs/gpu.md)"
# (module, distribution, required): found by metadata, since importing vLLM or verl alone can take 10 s.
PACKAGES = (("verl", "verl", True), ("vllm", "vllm", True), ("transfer_queue", "TransferQueue", True))


def smoke_recipe() -> dict:
    from core.training.tiny_model import TINY_RECIPE

    return {**TINY_RECIPE, **SMOKE_RECIPE_CHANGES}


def build_model() -> Path:
    """The smoke model's folder (built on first use, cached like the tiny model)."""
    from core.training.tiny_model import ensure_tiny_model

    return ensure_tiny_model(recipe=smoke_recipe())


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


# The oldest NVIDIA driver each CUDA major version runs on (NVIDIA's CUDA toolkit release notes, "minor version
# compatibility"): the gpu extra's torch 2.11.0 is built for CUDA 13.
CUDA_MIN_DRIVER = {13: 580, 12: 525, 11: 450}


def driver_gap(driver: str | None, cuda: str | None) -> str | None:
    """Why torch built for `cuda` cannot use a GPU under `driver` (too old), or None when it can or we cannot tell."""
    try:
        need = CUDA_MIN_DRIVER[int(str(cuda).split(".")[0])]
        have = int(str(driver).split(".")[0])
    except (KeyError, ValueError):
        return None
    if have >= need:
        return None
    return (f"torch's CUDA {cuda} needs NVIDIA driver R{need} or newer, this machine has {driver}: update the driver, "
            f"or install a torch built for an older CUDA")


def probe() -> list[tuple[str, bool, str]]:
    """(piece, present, what was found) for the driver, CUDA, torch, flash-attn, vLLM, verl, TransferQueue.

    flash-attn is optional (without it verl trains with sdpa attention, see detect.attention_implementation).
    """
    rows: list[tuple[str, bool, str]] = []
    smi = shutil.which("nvidia-smi")
    driver = None
    if smi is None:
        rows.append(("nvidia-smi", False, "not on PATH (no NVIDIA driver)"))
    else:
        try:
            out = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=PROBE_S)
            gpus = [line.strip().rsplit(",", 1) for line in out.stdout.splitlines() if line.count(",") >= 2]
            driver = gpus[0][1].strip() if gpus else None
            listed = "; ".join(gpu[0].strip() for gpu in gpus) + (f" (driver {driver})" if driver else "")
            rows.append(("nvidia-smi", out.returncode == 0 and bool(gpus),
                         listed or (out.stderr.strip().splitlines() or ["no GPU listed"])[0]))
        except subprocess.TimeoutExpired:
            rows.append(("nvidia-smi", False, f"no answer in {PROBE_S:g} s (driver hung?)"))
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        gap = driver_gap(driver, torch.version.cuda) if count == 0 else None
        rows.append(("torch", True, torch.__version__))
        rows.append(("CUDA", count > 0, f"{count} GPU{'s' if count != 1 else ''} visible to torch "
                                        f"(CUDA {torch.version.cuda or 'none: a CPU build of torch'})"
                                        + (f": {gap}" if gap else "")))
    except Exception as exc:  # a broken install says more than "missing"
        rows.append(("torch", False, f"import failed: {type(exc).__name__}: {exc}"))
    try:
        import flash_attn

        rows.append(("flash-attn", True, f"{flash_attn.__version__} (optional)"))
    except ImportError as exc:
        rows.append(("flash-attn", True, f"absent, verl uses sdpa attention (optional): {exc}"))
    for module, dist, _ in PACKAGES:
        found = importlib.util.find_spec(module) is not None
        rows.append((dist, found, _version(dist) if found else "not installed"))
    return rows


def missing(rows: list[tuple[str, bool, str]]) -> list[str]:
    return [f"{name}: {detail}" for name, ok, detail in rows if not ok]


def check_run(run_path: Path | str, steps: int, resumed_from: int | None = None) -> list[str]:
    """What a finished smoke run folder lacks, one line each (empty when it is complete): every training
    step with verl's keys, the per-dimension and rubric rewards and NVML figures, validation, a checkpoint with the
    Hugging Face model, and (after `--resume`) the resumed step."""
    from omegaconf import OmegaConf

    from core.rewards import DIMENSIONS, PENALTIES
    from core.runs import RunDirectory, read_jsonl

    run = RunDirectory.open(Path(run_path))
    problems = []
    meta = run.meta()
    if meta.get("status") != "finished":
        problems.append(f"status is {meta.get('status')}: {meta.get('message')}")
    metrics = [r for r in read_jsonl(run.metrics_path) if r.get("step", 0) > 0]  # step 0: validation before training
    if [r["step"] for r in metrics] != list(range(1, steps + 1)):
        problems.append(f"metrics steps {[r['step'] for r in metrics]}, expected 1..{steps}")
    wanted = ("actor/pg_loss", "actor/perf/max_memory_allocated_gb", "critic/score/mean", "response_length/mean",
              "timing_s/step",
              *(f"reward/{name}/mean" for name in (*DIMENSIONS, *PENALTIES, "final", "rubric", "rubric/criteria_passed")))
    for record in metrics:
        data = record["data"]
        problems += [f"step {record['step']}: no {key}" for key in wanted if key not in data]
        if not any(k.startswith("gpu/0/") for k in data):
            problems.append(f"step {record['step']}: no NVML figures (gpu/0/...)")
    events = read_jsonl(run.events_path)
    kinds = [e["event"] for e in events]
    problems += [f"no '{kind}' event (events: {kinds})" for kind in ("started", "checkpoint", "validation", "finished")
                 if kind not in kinds]
    if resumed_from is not None and not any(e["event"] == "resumed" and e.get("step") == resumed_from for e in events):
        problems.append(f"no 'resumed' event at step {resumed_from} (events: {kinds})")
    checkpoint = f"checkpoints/global_step_{steps}"
    for path in ("verl/config.yaml", "data/train.parquet", "data/val.parquet", checkpoint,
                 f"{checkpoint}/actor/huggingface/config.json", "checkpoints/latest_checkpointed_iteration.txt"):
        if not (run.path / path).exists():
            problems.append(f"missing {path}")
    if not read_jsonl(run.samples_path):
        problems.append("no samples")
    if (run.path / "verl" / "config.yaml").exists():
        mode = OmegaConf.load(run.path / "verl" / "config.yaml").trainer.v1.trainer_mode
        if mode != "sync":
            problems.append(f"verl/config.yaml: trainer.v1.trainer_mode is {mode}, expected verl's own 'sync'")
    return problems


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "probe":
        rows = probe()
        for name, ok, detail in rows:
            print(f"gpu-smoke:   {'ok ' if ok else 'NO '} {name:<14} {detail}")
        gaps = missing(rows)
        if gaps:
            print(f"gpu-smoke: missing: {'; '.join(gaps)}. Install {INSTALL}", file=sys.stderr)
            return 2
        return 0
    if command == "model":
        print(build_model())
        return 0
    if command == "check" and len(argv) in (3, 4):
        problems = check_run(argv[1], int(argv[2]), int(argv[3]) if len(argv) == 4 else None)
        print("\n".join(f"gpu-smoke: FAIL {p}" for p in problems) or f"gpu-smoke: OK {argv[1]}")
        return 1 if problems else 0
    print(__doc__.strip().splitlines()[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
