"""End-to-end tests of the native GRPO backend on the built-in tiny model: real runs, real signals, real files.

Each run is a real `devops-rl train` subprocess (or `run_training` in-process where a test needs the trainer).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Every name the config/run-directory issue lists (verl's names); reward/* are added per dimension below.
REQUIRED_METRICS = (
    "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/kl_loss", "actor/grad_norm",
    "actor/lr", "critic/score/mean", "critic/score/max", "critic/score/min", "critic/advantages/mean",
    "response_length/mean", "response_length/max", "response_length/clip_ratio", "timing_s/gen",
    "timing_s/update_actor", "timing_s/step", "perf/throughput", "actor/perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb", "training/global_step", "training/epoch",
)


def _train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "core.cli.main", "train", *args]


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(_train_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _rows(run_dir: Path, name: str = "metrics.jsonl") -> list[dict]:
    path = run_dir / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _events(run_dir: Path) -> list[str]:
    return [row["event"] for row in _rows(run_dir, "events.jsonl")]


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended early ({proc.returncode}):\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the run")
        time.sleep(0.05)


def test_mode_test_runs_one_step_and_writes_the_whole_run_folder(tmp_path):
    from core.rewards import DIMENSIONS, PENALTIES

    run_dir = tmp_path / "selfcheck"
    result = _run("--mode", "test", "--backend", "torch", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert "built-in tiny model" in result.stderr
    assert "backend: torch" in result.stderr
    assert f"run folder: {run_dir}" in result.stdout  # the closing summary

    rows = _rows(run_dir)
    assert [r["step"] for r in rows] == [1]
    data = rows[0]["data"]
    expected = set(REQUIRED_METRICS) | {f"reward/{n}/mean" for n in DIMENSIONS + PENALTIES} | {"reward/final/mean"}
    assert expected <= set(data), sorted(expected - set(data))
    assert 0.0 <= data["critic/score/mean"] <= 1.0
    assert data["response_length/max"] <= 16

    samples = _rows(run_dir, "samples.jsonl")[0]["samples"]
    assert samples and {"task_id", "prompt", "response", "reward", "breakdown"} <= set(samples[0])
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["backend"] == "torch" and meta["mode"] == "test"
    assert _events(run_dir) == ["started", "checkpoint", "finished"]

    # The checkpoint is an ordinary model folder transformers loads.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = run_dir / "checkpoints" / "global_step_1"
    assert ({"model.safetensors", "optimizer.pt", "scheduler.pt", "rng.json", "trainer_state.json"}
            <= {p.name for p in ckpt.iterdir()})
    AutoModelForCausalLM.from_pretrained(ckpt)
    AutoTokenizer.from_pretrained(ckpt)


@pytest.mark.slow
def test_kill_9_then_resume_continues_with_no_duplicated_or_missing_steps(tmp_path):
    run_dir = tmp_path / "killed"
    args = ("--mode", "test", "--backend", "torch", "--set", "trainer.total_training_steps=6", "--set", "trainer.save_freq=1",
            "--set", "devops.keep_checkpoints=2")
    proc = subprocess.Popen(_train_cmd(*args, "--run-dir", str(run_dir)), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: (run_dir / "checkpoints" / "global_step_3" / "trainer_state.json").is_file(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "running"  # killed: nobody wrote a final status
    steps_before = [r["step"] for r in _rows(run_dir)]
    assert steps_before[:3] == [1, 2, 3]

    result = _run("--mode", "test", "--backend", "torch", "--run-dir", str(run_dir), "--resume")  # settings from the run
    assert result.returncode == 0, result.stderr
    steps = [r["step"] for r in _rows(run_dir)]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in _rows(run_dir, "samples.jsonl")] == steps
    assert "resumed" in _events(run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["total_steps"] == 6
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("global_step_*"))
    assert kept == ["global_step_5", "global_step_6"]  # keep_checkpoints=2


@pytest.mark.slow
def test_sigint_saves_a_checkpoint_marks_the_run_stopped_and_exits_130(tmp_path):
    run_dir = tmp_path / "interrupted"
    proc = subprocess.Popen(
        _train_cmd("--mode", "test", "--backend", "torch", "--set", "trainer.total_training_steps=200",
                   "--set", "trainer.save_freq=100", "--run-dir", str(run_dir)),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _wait_for(lambda: len(_rows(run_dir)) >= 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "stopped" and "SIGINT" in meta["message"]
    last = _rows(run_dir)[-1]["step"]
    assert last < 200
    state = json.loads((run_dir / "checkpoints" / f"global_step_{last}" / "trainer_state.json").read_text())
    assert state["global_step"] == last  # the checkpoint matches the last logged step: resume repeats nothing
    assert _events(run_dir)[-1] == "stopped"
    assert "--resume" in err


def test_diverging_weights_stop_the_run_as_failed_and_keep_the_last_good_checkpoint(tmp_path, monkeypatch):
    from core.runs import RunDirectory
    from core.training.actor import TrainingFailed
    from core.training.train import config_for_mode, run_training

    # lr=1e6 is far outside what `validate` allows; run_training is called directly to make the weights blow up.
    cfg = config_for_mode("test", overrides=["trainer.total_training_steps=4", "actor_rollout_ref.actor.optim.lr=1e6"],
                          backend="torch")
    run = RunDirectory.create(tmp_path, mode="test", backend="torch", config=cfg)
    with pytest.raises(TrainingFailed, match="NaN|nan|inf"):
        run_training(cfg, mode="test", run_dir=run)
    meta = run.meta()
    assert meta["status"] == "failed" and ("nan" in meta["message"].lower() or "inf" in meta["message"])
    steps = [r["step"] for r in _rows(run.path)]
    assert steps and steps == list(range(1, len(steps) + 1)) and len(steps) < 4
    checkpoints = sorted(int(p.name.split("_")[-1]) for p in run.checkpoints_dir.glob("global_step_*"))
    assert checkpoints and max(checkpoints) <= steps[-1]
    assert _events(run.path)[-1] == "failed"
