"""Tests of `devops-rl train`'s options and answers: bad input is one line and exit 2, the backend choice is
said, `--n-runners` really scores in worker processes, and the progress output reads well."""

from __future__ import annotations

import io
import json
import os

import pytest

from core.cli.main import main


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "fast"], "--mode: unknown mode 'fast'"),
        (["--mode", "test", "--backend", "gpu"], "devops.backend"),
        (["--mode", "test", "--set", "data.train_bach_size=2"], "did you mean"),
        (["--mode", "test", "--resume"], "--resume: no run of mode 'test'"),
        (["--mode", "test", "--backend", "torch", "--ray-address", "auto"], "--ray-address is for the verl backend"),
        (["--mode", "train", "--backend", "torch", "--model", "acme/not-downloaded"], "not in the local Hugging Face cache"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(capsys, tmp_path, args, message):
    assert main(["train", *args]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run folder left behind


def test_run_dir_that_holds_a_run_needs_resume(tmp_path, capsys):
    from core.runs import RunDirectory
    from core.training.train import config_for_mode

    run = RunDirectory.create(tmp_path, mode="test", backend="torch", config=config_for_mode("test"))
    assert main(["train", "--mode", "test", "--run-dir", str(run.path)]) == 2
    assert "add --resume" in _error_line(capsys)
    assert main(["train", "--mode", "test", "--run-dir", str(tmp_path / "nothing"), "--resume"]) == 2
    assert "not a run folder" in _error_line(capsys)


def test_mode_presets_and_explicit_options_win_over_the_config(tmp_path):
    from core.training.train import config_for_mode

    cfg = config_for_mode("ci-fast", model="some/model", seed=7, n_runners=3, backend="torch",
                          overrides=["devops.seed=1", "data.train_batch_size=8"])
    assert cfg.actor_rollout_ref.model.path == "some/model"
    assert cfg.devops.seed == 7 and cfg.devops.n_runners == 3 and cfg.devops.backend == "torch"
    assert cfg.data.train_batch_size == 8
    test = config_for_mode("test")
    assert test.actor_rollout_ref.model.path == "builtin:tiny" and test.trainer.total_training_steps == 1
    from core.training.config import validate

    assert validate(test) == []


def test_each_preset_launches_as_the_mode_that_trains_with_it():
    from core.training.config import PRESETS
    from core.training.train import MODE_PRESETS, mode_for_preset

    assert {preset: mode_for_preset(preset) for preset in PRESETS} == {
        "default": "train", "ci-fast": "ci-fast", "single-gpu": "single-gpu"}
    assert all(MODE_PRESETS[mode_for_preset(preset)] == preset for preset in PRESETS)


def test_device_choice_names_the_setting_and_the_fix():
    import torch

    from core.errors import UserError
    from core.training.device import select_device

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert select_device("auto") == torch.device("cpu") and select_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match=r"^devops\.device: cuda: no CUDA GPU visible to torch here; "
                                        r"use --set devops\.device=cpu \(or auto\)$"):
        select_device("cuda")
    with pytest.raises(UserError, match=r"^--device cuda:1: no CUDA GPU visible to torch here; use --device cpu"):
        select_device("cuda:1", option="--device")
    with pytest.raises(UserError, match=r"^--device tpu: unknown device; one of auto, cpu, cuda$"):
        select_device("tpu", option="--device")


def test_auto_backend_is_torch_without_a_gpu_and_says_why():
    import torch

    from core.training.train import choose_backend

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    backend, why = choose_backend("auto")
    assert backend == "torch" and why.startswith("backend: torch (auto: ")
    assert choose_backend("torch") == ("torch", "backend: torch (as configured)")


def test_n_runners_scores_in_worker_processes_with_the_same_results():
    import psutil

    from core.rewards.pool import RewardScorer
    from tasks import load_tasks

    tasks = [t.to_dict() for t in load_tasks()[:6]]
    answers = [f"Use a CI pipeline with tests and a rollback; monitor with Prometheus alerts. ({i})" for i in range(6)]
    local = RewardScorer(1)
    pooled = RewardScorer(2)
    try:
        assert pooled.score(answers, tasks) == local.score(answers, tasks)
        workers = [p for p in psutil.Process().children(recursive=True) if p.pid != os.getpid()]
        assert len(workers) >= 2
    finally:
        pooled.close()
        local.close()


def test_reward_weights_of_the_config_reach_the_reward():
    from core.rewards import score
    from core.rewards.pool import RewardScorer
    from tasks import load_tasks

    task = load_tasks()[0].to_dict()
    answer = task["reference_answer"]
    only_security = {task["type"]: {"security": 1.0, **{d: 0.0 for d in ("automation", "reliability", "observability",
                                                                         "documentation", "expected_outputs")}}}
    plain = RewardScorer(1).score([answer], [task])[0]
    weighted = RewardScorer(1, only_security).score([answer], [task])[0]
    assert plain == score(answer, task).to_dict()
    assert weighted["final_reward"] == score(answer, task, weights=only_security[task["type"]]).final_reward
    assert weighted["final_reward"] != plain["final_reward"]


def test_progress_lines_and_the_closing_summary(tmp_path):
    from core.training.progress import ConsoleProgress, plain_line, run_summary

    update = {"step": 3, "total_steps": 10, "epoch": 0, "elapsed_s": 30.0, "eta_s": 70.0,
              "metrics": {"critic/score/mean": 0.4321, "actor/pg_loss": -0.01, "perf/throughput": 1234.5}}
    line = plain_line(update)
    assert "step 3/10" in line and "reward 0.432" in line and "tok/s 1234" in line and "eta 0:01:10" in line
    out = io.StringIO()
    with ConsoleProgress(out) as progress:  # not a TTY: plain lines
        progress(update)
    assert out.getvalue().count("\n") == 1 and "step 3/10" in out.getvalue()
    panel = io.StringIO()
    update["metrics"].update({"reward/security/mean": 0.25, "reward/length/mean": 0.125})
    with ConsoleProgress(panel, live=True) as progress:  # what a terminal gets: the live panel
        progress(update)
    drawn = panel.getvalue()
    assert "3/10" in drawn and "security 0.25" in drawn and "length 0.12" in drawn and "0:01:10" in drawn

    rows = [{"step": s, "data": {"critic/score/mean": r, "reward/security/mean": r / 2}} for s, r in
            enumerate([0.1, 0.2, 0.3, 0.5, 0.6, 0.4, 0.7, 0.8], start=1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = run_summary(tmp_path)
    assert "best step: 8 (reward 0.800)" in summary
    assert "security" in summary and "0.075" in summary and "0.375" in summary  # first vs last quarter means
    assert f"devops-rl tail {tmp_path}" in summary
