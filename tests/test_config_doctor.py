"""`config doctor`: parameter counts match real models, and the verdict and advice follow the memory estimate.

The tiny model is the real built-in one (built in the session cache); big models use the known-size table.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.training.config import load_config
from core.training.doctor import advice, estimate_memory, model_shape

REPO = Path(__file__).resolve().parents[1]


def test_parameter_count_matches_the_real_tiny_model():
    from transformers import AutoModelForCausalLM

    from core.training.tiny_model import ensure_tiny_model

    model = AutoModelForCausalLM.from_pretrained(ensure_tiny_model())
    assert model_shape("builtin:tiny").params == sum(p.numel() for p in model.parameters())


def test_parameter_count_of_a_local_model_folder_matches_transformers(tmp_path):
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(tmp_path / "m")
    shape = model_shape(str(tmp_path / "m"))
    assert shape.source == "config.json"
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_known_model_sizes_without_files():
    shape = model_shape("Qwen/Qwen2.5-7B-Instruct")
    assert shape.params / 1e9 == pytest.approx(7.62, abs=0.01)  # Qwen2.5-7B: 7.61B parameters per its model card
    assert model_shape("someone/unknown-model") is None


def test_oom_verdict_and_advice_follow_the_gpu_size():
    cfg = load_config("default")
    small = estimate_memory(cfg, gpu_mem_gib=24)
    assert small.layout == "verl" and small.fits is False
    tips = advice(cfg, small)
    assert tips[0].startswith("out of memory")
    assert "  - lower actor_rollout_ref.rollout.gpu_memory_utilization 0.6 -> 0.4" in tips
    assert any("ppo_micro_batch_size_per_gpu 4 -> 1" in tip for tip in tips)

    big = estimate_memory(load_config("default", overrides=["trainer.n_gpus_per_node=8"]), gpu_mem_gib=141)
    assert big.fits is True
    assert advice(cfg, big)[0].startswith("fits:")
    # sharding over 8 GPUs divides the actor's states by 8
    assert dict((r[0], r[1]) for r in big.rows)["Adam states (2 x fp32)"] == pytest.approx(
        dict((r[0], r[1]) for r in small.rows)["Adam states (2 x fp32)"] / 8)


def test_gradient_checkpointing_lowers_the_activation_estimate():
    cfg_off = load_config("single-gpu", overrides=["actor_rollout_ref.model.enable_gradient_checkpointing=false"])
    on, off = estimate_memory(load_config("single-gpu"), gpu_mem_gib=80), estimate_memory(cfg_off, gpu_mem_gib=80)

    def activations(est):
        return dict((row[0], row[1]) for row in est.rows)["activations"]

    assert activations(off) > 5 * activations(on)
    assert "  - set actor_rollout_ref.model.enable_gradient_checkpointing=true (time for memory)" in advice(cfg_off, off)


def test_doctor_cli_prints_table_and_advice():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "core.cli.main", "config", "doctor", "--preset", "single-gpu",
                             "--gpu-mem", "24"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Qwen/Qwen2.5-7B-Instruct: 7.6" in out and "GPU: 24.0 GiB (--gpu-mem)" in out
    assert "peak, update phase" in out and "out of memory" in out
    assert "if the reward stays flat: raise actor_rollout_ref.actor.optim.lr 1e-06 -> 2e-06" in out
