"""`devops-rl export` and the torch backend's tensorboard/wandb loggers, read back with each tool's own reader:
TensorBoard's `event_accumulator`, and W&B's `wandb leet inspect --json` on the offline run (W&B's own parser of its
transaction log; `wandb sync` would need a server)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env={**os.environ, **(env or {})})


def write_run(folder: Path) -> Path:
    run = folder / "20261130-170000-ci-fast-e001"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished"}))
    (run / "config.yaml").write_text("trainer:\n  project_name: devops-rl-test\n")
    rows = [{"step": s, "data": {"critic/score/mean": s / 10, "actor/pg_loss": None if s == 3 else 0.5 - s / 20}}
            for s in range(1, 6)]
    rows.insert(3, {"step": 3, "data": {"val/score/mean": 0.42}})  # validation on its own line, as the trainer logs it
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = {"step": 5, "samples": [{"task_id": "k8s-001", "group": "9", "prompt": "Add probes", "reward": 0.7,
                                       "advantage": 1.2, "response": "readinessProbe: httpGet /readyz"}]}
    (run / "samples.jsonl").write_text(json.dumps(samples) + "\n")
    alert = {"time": "2026-11-30T17:00:03+00:00", "event": "alert", "check": "nan", "level": "error",
             "series": "actor/pg_loss", "step": 3, "message": "NaN/inf in actor/pg_loss at step 3"}
    (run / "events.jsonl").write_text(json.dumps(alert) + "\n")
    return run


def tensorboard_scalars(folder: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list]]:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0,
                                                                          event_accumulator.TENSORS: 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)] for tag in acc.Tags()["tensors"]}
    return scalars, texts


def wandb_history(run_folder: Path) -> list[dict]:
    """Every history record of an offline W&B run, parsed by wandb's own `leet inspect`."""
    wandb = Path(sys.executable).parent / "wandb"
    result = subprocess.run([str(wandb), "leet", "inspect", "--json", str(run_folder)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


def test_export_writes_tensorboard_and_wandb_offline_that_their_readers_load(tmp_path):
    run = write_run(tmp_path / "runs")
    result = cli("export", str(run), "--tensorboard", str(tmp_path / "tb"), "--wandb-offline", str(tmp_path / "wb"),
                 env={"WANDB_SILENT": "true"})
    assert result.returncode == 0, result.stderr
    assert "6 metric rows, 1 samples, 1 alerts" in result.stdout
    scalars, texts = tensorboard_scalars(tmp_path / "tb" / run.name)
    assert scalars["critic/score/mean"] == [(s, pytest.approx(s / 10)) for s in range(1, 6)]
    assert scalars["val/score/mean"] == [(3, pytest.approx(0.42))]
    assert math.isnan(dict(scalars["actor/pg_loss"])[3])  # the null NaN stays a NaN, it is not dropped or zeroed
    assert texts["samples"][0][0] == 5 and "readinessProbe" in texts["samples"][0][1]
    assert texts["alerts"][0][0] == 3 and "actor/pg_loss" in texts["alerts"][0][1]
    (offline,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    history = wandb_history(offline)
    by_step = {item["_step"]: item for item in history}
    assert [by_step[s]["critic/score/mean"] for s in range(1, 6)] == pytest.approx([s / 10 for s in range(1, 6)])
    assert by_step[3]["actor/pg_loss"] == "NaN" and by_step[3]["val/score/mean"] == pytest.approx(0.42)
    assert by_step[5]["samples._type"] == "table-file"


def test_export_without_a_destination_or_of_a_missing_run_is_a_one_line_error(tmp_path):
    run = write_run(tmp_path / "runs")
    result = cli("export", str(run))
    assert result.returncode == 2 and result.stderr.startswith("error: export: say where to") and "Traceback" not in result.stderr
    missing = cli("export", str(tmp_path / "nope"), "--tensorboard", str(tmp_path / "tb"))
    assert missing.returncode == 2 and "nope" in missing.stderr


@pytest.mark.slow
def test_the_torch_backend_honours_tensorboard_and_wandb_loggers(tmp_path):
    """A real two-step ci-fast run (no warm-start) with `trainer.logger: [console, file, tensorboard, wandb]`, as verl
    would log."""
    env = {"TENSORBOARD_DIR": str(tmp_path / "tb"), "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wb"),
           "WANDB_SILENT": "true"}
    overrides = ["data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
                 "data.max_response_length=16", "trainer.total_training_steps=2", "trainer.save_freq=2",
                 "trainer.test_freq=-1", "trainer.val_before_train=false",
                 "trainer.logger=[console,file,tensorboard,wandb]",
                 "devops.sft_warmstart_steps=0"]  # the loggers are the point: no warm-start to wait for
    args = ["train", "--mode", "ci-fast", "--run-dir", str(tmp_path / "run")]
    for override in overrides:
        args += ["--set", override]
    result = cli(*args, env=env, timeout=1200)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    scalars, texts = tensorboard_scalars(tmp_path / "tb")
    assert [step for step, _ in scalars["actor/pg_loss"]] == [1, 2]
    assert "critic/score/zero_std_ratio" in scalars and scalars["training/total_steps"][-1][1] == 2
    assert [step for step, _ in texts["samples"]] == [1, 2]
    (offline,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    history = wandb_history(offline)
    assert sorted({item["_step"] for item in history if "actor/pg_loss" in item}) == [1, 2]
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    group = samples[0]["samples"]  # whole groups: both answers to each prompt, with their advantages
    assert len(group) == 4 and group[0]["group"] == group[1]["group"] and "advantage" in group[0]
    assert "rubric" in group[0]["breakdown"] and group[0]["prompt"]
