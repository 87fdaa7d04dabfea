"""The GPU smoke kit on a CPU box: scripts/gpu_smoke.sh stops at its probe naming what is missing, its plan is
offline with a locally built model and a real model's learning rate, the model suits vLLM, and the run-folder
checks it ends with name what a run lacks. The GPU run itself: docs/gpu.md.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"


def _script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_on_a_machine_without_a_usable_gpu_the_smoke_test_stops_at_its_probe(tmp_path):
    from core.training.verl_backend.smoke import missing, probe

    gaps = missing(probe())
    if not gaps:
        pytest.skip("this machine has everything: the smoke test would really train")
    result = _script(env={"RUNS_DIR": str(tmp_path / "runs")})
    assert result.returncode == 2
    assert result.stdout.startswith("gpu-smoke: probe\n")
    assert f"gpu-smoke: missing: {'; '.join(gaps)}. Install on a GPU machine: EXTRAS=gpu,test scripts/bootstrap.sh" \
        in result.stderr
    assert "nothing was run" in result.stderr and not (tmp_path / "runs").exists()


FAKE_SMI = """#!/bin/sh
echo "NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15"
"""


def test_a_driver_too_old_for_torchs_cuda_is_named_with_its_version(tmp_path, monkeypatch):
    """The gpu extra's torch is built for CUDA 13: under an R550 driver torch sees no GPU, and the probe says why."""
    import torch

    from core.training.verl_backend.smoke import driver_gap, missing, probe

    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rows = {name: (ok, detail) for name, ok, detail in probe()}
    assert rows["nvidia-smi"] == (True, "NVIDIA H100 80GB HBM3, 81559 MiB (driver 550.54.15)")
    assert rows["CUDA"] == (False, "0 GPUs visible to torch (CUDA 13.0): torch's CUDA 13.0 needs NVIDIA driver R580 or "
                                   "newer, this machine has 550.54.15: update the driver, or install a torch built for "
                                   "an older CUDA")
    assert any("R580" in line for line in missing(list(probe())))
    assert driver_gap("580.65.06", "13.0") is None and driver_gap("535.1", "12.4") is None
    assert driver_gap(None, "13.0") is None and driver_gap("550", None) is None  # nothing to compare: say nothing


def test_the_smoke_plan_is_offline_with_a_local_model_and_a_real_models_learning_rate():
    result = _script("--plan", env={"RUNS_DIR": "/tmp/smoke-plan"})
    assert result.returncode == 0, result.stderr
    env, first, resume = result.stdout.splitlines()
    assert env == "HF_HUB_OFFLINE=1"
    run = "--run-dir /tmp/smoke-plan/gpu-smoke"
    for command in (first, resume):
        assert command.startswith("devops-rl train --backend verl --mode ci-fast " + run)
        for setting in ("actor_rollout_ref.actor.optim.lr=1e-6", "verl_overrides.actor_rollout_ref.rollout.enforce_eager=true",
                        "data.truncation=error", "trainer.save_freq=2", "trainer.test_freq=2"):
            assert f"--set {setting}" in command
    assert "--model <.venv/bin/python -m core.training.verl_backend.smoke model>" in first  # built here, not a hub id
    assert first.endswith("--set trainer.total_training_steps=2")
    assert resume.endswith("--resume --set trainer.total_training_steps=3")
    assert "--model /models/qwen " in _script("--plan", "--model", "/models/qwen").stdout
    assert _script("--nope").returncode == 2


def test_the_smoke_model_is_qwen2_shaped_with_heads_vllm_accepts():
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from core.training.verl_backend.smoke import build_model

    folder = build_model()
    config = AutoConfig.from_pretrained(folder)
    assert config.model_type == "qwen2" and config.hidden_size // config.num_attention_heads == 64
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Deploy nginx"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == prompt["input_ids"].shape[1] + 3


def _smoke_run(tmp_path, steps: int, *, drop: str | None = None):
    """A run folder shaped like a finished smoke run: what verl and the launcher write for `steps` steps."""
    from core.rewards import DIMENSIONS, PENALTIES
    from core.runs import RunDirectory
    from core.training.config import load_config

    run = RunDirectory.create(tmp_path / "runs", mode="ci-fast", backend="verl", config=load_config("ci-fast"))
    keys = ("actor/pg_loss", "actor/perf/max_memory_allocated_gb", "critic/score/mean", "response_length/mean",
            "timing_s/step", "gpu/0/memory_used_gb", *(f"reward/{n}/mean" for n in (*DIMENSIONS, *PENALTIES, "final", "rubric",
                                                                     "rubric/criteria_passed")))
    for step in range(1, steps + 1):
        run.log_metrics(step, {key: 0.5 for key in keys if not (key == drop and step == steps)})
        run.log_samples(step, [{"task_id": "t", "response": "r", "reward": 0.5}])
    for kind in ("checkpoint", "validation", "finished"):
        run.event(kind, step=steps)
    (run.path / "verl").mkdir()
    (run.path / "verl" / "config.yaml").write_text("trainer:\n  v1:\n    trainer_mode: sync\n")
    (run.path / "data").mkdir()
    for name in ("train.parquet", "val.parquet"):
        (run.path / "data" / name).write_bytes(b"PAR1")
    (run.checkpoints_dir / f"global_step_{steps}" / "actor" / "huggingface").mkdir(parents=True)
    (run.checkpoints_dir / f"global_step_{steps}" / "actor" / "huggingface" / "config.json").write_text("{}")
    (run.checkpoints_dir / "latest_checkpointed_iteration.txt").write_text(str(steps))
    run.set_status("finished", f"{steps} steps")
    return run


def test_the_smoke_checks_pass_a_complete_run_and_name_what_another_lacks(tmp_path):
    from core.training.verl_backend.smoke import check_run, main

    complete = _smoke_run(tmp_path / "a", 2)
    assert check_run(complete.path, 2) == []
    assert main(["check", str(complete.path), "2"]) == 0
    assert check_run(complete.path, 3, 2) == [
        "metrics steps [1, 2], expected 1..3", "no 'resumed' event at step 2 (events: "
        "['started', 'checkpoint', 'validation', 'finished'])", "missing checkpoints/global_step_3",
        "missing checkpoints/global_step_3/actor/huggingface/config.json"]
    assert check_run(_smoke_run(tmp_path / "c", 1, drop="reward/rubric/mean").path, 1) == ["step 1: no reward/rubric/mean"]
    lacking = _smoke_run(tmp_path / "b", 2, drop="reward/security/mean")
    (lacking.path / "verl" / "config.yaml").write_text("trainer:\n  v1:\n    trainer_mode: devops_sync\n")
    assert check_run(lacking.path, 2) == [
        "step 2: no reward/security/mean",
        "verl/config.yaml: trainer.v1.trainer_mode is devops_sync, expected verl's own 'sync'"]
    assert main(["check", str(lacking.path), "2"]) == 1
