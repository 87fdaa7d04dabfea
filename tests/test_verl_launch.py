"""The verl launcher's CPU-side parts: detection and one-line failures, the run-folder lifecycle when verl
cannot start here, and the pump that turns verl's file logger, checkpoints and rollout dumps into the run folder.

The recorded fixture (tests/fixtures/verl/metrics.jsonl) is in verl's file-logger format; it is replayed
through verl's own FileLogger, so the bytes the pump reads are exactly what verl writes.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

FIXTURE = Path(__file__).with_name("fixtures") / "verl" / "metrics.jsonl"


def _run_dir(tmp_path, preset="ci-fast", overrides=()):
    from core.runs import RunDirectory
    from core.training.config import load_config

    cfg = load_config(preset, overrides=list(overrides))
    return cfg, RunDirectory.create(tmp_path / "runs", mode="ci-fast", backend="verl", config=cfg)


def _events(run) -> list[dict]:
    from core.runs import read_jsonl

    return read_jsonl(run.events_path)


# ---- detection -------------------------------------------------------------------------------------


def test_verl_available_says_in_one_line_what_is_missing(monkeypatch):
    from core.training.verl_backend import detect

    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 0)
    ok, why = detect.verl_available()
    assert not ok and "no CUDA GPU" in why and "\n" not in why
    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 2)
    monkeypatch.setattr(detect, "_installed", lambda module: module != "vllm")
    ok, why = detect.verl_available()
    assert not ok and "vLLM is not installed" in why and "devops-rl[gpu]" in why
    monkeypatch.setattr(detect, "_installed", lambda module: module != "verl")
    ok, why = detect.verl_available()
    assert not ok and why.startswith("verl is not installed")
    monkeypatch.setattr(detect, "_installed", lambda module: True)
    ok, why = detect.verl_available()
    assert ok and why.startswith("2 CUDA GPUs, verl ")


def test_cuda_visible_devices_limits_the_gpu_count(monkeypatch):
    from core.training import sysmon
    from core.training.verl_backend import detect

    monkeypatch.setattr(sysmon, "gpu_count", lambda: 8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert detect.cuda_gpu_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect.cuda_gpu_count() == 0


def test_backend_auto_picks_torch_here_and_says_why(monkeypatch):
    from core.training.train import choose_backend
    from core.training.verl_backend import detect

    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 0)
    backend, line = choose_backend("auto")
    assert backend == "torch" and "no CUDA GPU" in line and "\n" not in line


def test_ray_address_that_nobody_answers_is_one_clear_line():
    from core.errors import UserError
    from core.training.verl_backend.detect import check_ray_address

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UserError, match=r"no Ray cluster answers there .*ray start --head"):
        check_ray_address(f"127.0.0.1:{port}")
    with pytest.raises(UserError, match="expected HOST:PORT"):
        check_ray_address("not-an-address")
    with socket.socket() as server:  # something listening: the address is accepted
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_ray_address(f"127.0.0.1:{server.getsockname()[1]}")
        check_ray_address(f"ray://127.0.0.1:{server.getsockname()[1]}")


def test_missing_model_paths_fail_before_anything_starts(tmp_path):
    from core.errors import UserError
    from core.training.verl_backend.detect import check_model_path

    with pytest.raises(UserError, match="no such folder"):
        check_model_path(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        check_model_path(str(tmp_path / "empty"))
    with pytest.raises(UserError, match="not in the local Hugging Face cache"):
        check_model_path("nobody-has/this-model-7b")  # tests run with HF_HUB_OFFLINE=1
    check_model_path("builtin:tiny")


def test_launch_checks_name_the_fix(monkeypatch):
    from core.errors import UserError
    from core.training.config import load_config
    from core.training.verl_backend import detect

    monkeypatch.setattr(detect, "_installed", lambda module: True)
    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 1)
    with pytest.raises(UserError, match=r"trainer.n_gpus_per_node: 4: only 1 GPU visible here; set trainer.n_gpus_per_node=1"):
        detect.check_launch(load_config("default", overrides=["trainer.n_gpus_per_node=4"]))
    with pytest.raises(UserError, match="--ray-address"):
        detect.check_launch(load_config("default", overrides=["trainer.nnodes=2"]))
    monkeypatch.setattr(detect, "_installed", lambda module: module != "transfer_queue")
    with pytest.raises(UserError, match=r"needs TransferQueue.*devops-rl\[verl\]"):
        detect.check_launch(load_config("default"))


def test_run_on_a_machine_without_gpu_fails_in_one_line_and_marks_the_run(tmp_path, monkeypatch):
    from core.errors import UserError
    from core.training.verl_backend import detect
    from core.training.verl_backend.launch import run_verl_training

    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 0)
    cfg, run = _run_dir(tmp_path)
    with pytest.raises(UserError, match="no CUDA GPU visible") as info:
        run_verl_training(cfg, mode="ci-fast", run_dir=run)
    assert "\n" not in str(info.value)
    meta = run.meta()
    assert meta["status"] == "failed" and "no CUDA GPU" in meta["message"]
    assert _events(run)[-1]["event"] == "failed"


# ---- the pump: verl's file logger -> the run folder ------------------------------------------------


def _verl_writer(path: Path, monkeypatch):
    from verl.utils.tracking import FileLogger

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return FileLogger("devops-rl", "fixture")


def test_fixture_is_verls_file_logger_format():
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    from core.rewards import DIMENSIONS, PENALTIES

    for record in records:
        assert set(record) == {"step", "data"}
        for name in (*DIMENSIONS, *PENALTIES, "final"):
            assert isinstance(record["data"][f"reward/{name}/mean"], float)
        assert "actor/pg_loss" in record["data"] and "critic/score/mean" in record["data"]
    assert any(k.startswith("val-core/") for r in records for k in r["data"])


def test_pump_copies_verl_metrics_adds_host_figures_and_turns_them_into_events(tmp_path, monkeypatch):
    from core.runs import metric_rows, read_jsonl
    from core.training.verl_backend.launch import LATEST_CHECKPOINT, MetricsPump

    pytest.importorskip("verl")
    cfg, run = _run_dir(tmp_path)
    verl_dir = run.path / "verl"
    verl_dir.mkdir()
    writer = _verl_writer(verl_dir / "metrics.jsonl", monkeypatch)
    seen: list[dict] = []
    pump = MetricsPump(run, verl_dir, sample=lambda: {"gpu/0/memory_used_gb": 12.5, "actor/pg_loss": -1.0},
                       progress=seen.append)
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    run.update_meta(total_steps=len(records))
    for record in records:
        writer.log(record["data"], record["step"])
        if record["step"] == 2:
            (run.checkpoints_dir / "global_step_2").mkdir()
            (run.checkpoints_dir / LATEST_CHECKPOINT).write_text("2")
        assert pump.poll() == 1
    writer.finish()

    copied = list(metric_rows(read_jsonl(run.metrics_path)))
    assert [step for step, _ in copied] == [r["step"] for r in records]
    for (step, data), record in zip(copied, records):
        assert data["gpu/0/memory_used_gb"] == 12.5  # the driver's NVML figure...
        assert data["actor/pg_loss"] == record["data"]["actor/pg_loss"]  # ...never overwrites verl's
        assert data["reward/security/mean"] == record["data"]["reward/security/mean"]
    events = _events(run)
    validations = [e for e in events if e["event"] == "validation"]
    val_steps = [r["step"] for r in records if any(k.startswith("val-core/") for k in r["data"])]
    assert [e["step"] for e in validations] == val_steps
    assert all(0.0 <= e["score"] <= 1.0 for e in validations)
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [2]
    assert seen[-1]["step"] == len(records) and seen[-1]["total_steps"] == len(records)
    assert read_jsonl(run.metrics_path)[val_steps[0] - 1]["data"]["val/score/mean"] == validations[0]["score"]


def test_a_fixture_run_reads_in_tail_and_runs_list(tmp_path, monkeypatch, capsys):
    from core.cli.main import main
    from core.runs import list_runs
    from core.training.verl_backend.launch import MetricsPump

    pytest.importorskip("verl")
    cfg, run = _run_dir(tmp_path)
    verl_dir = run.path / "verl"
    verl_dir.mkdir()
    writer = _verl_writer(verl_dir / "metrics.jsonl", monkeypatch)
    pump = MetricsPump(run, verl_dir)
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for record in records:
        writer.log(record["data"], record["step"])
    writer.finish()
    pump.poll()
    run.set_status("finished", f"{len(records)} steps")
    capsys.readouterr()  # verl's FileLogger announces itself on stdout

    assert main(["tail", str(run.path), "--no-log", "-n", "100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["step", "reward", "val"]
    assert [int(line.split()[0]) for line in lines[1:]] == [r["step"] for r in records]
    last_reward = float(lines[-1].split()[1])
    assert last_reward == pytest.approx(records[-1]["data"]["critic/score/mean"], rel=1e-3)

    assert main(["tail", str(FIXTURE), "-n", "2"]) == 0  # verl's own file, read directly
    assert capsys.readouterr().out.splitlines()[-1].split()[0] == str(records[-1]["step"])
    summary = next(s for s in list_runs(tmp_path / "runs") if s.run_id == run.run_id)
    assert summary.status == "finished"


def test_rollout_dumps_become_scored_samples(tmp_path):
    from core.runs import read_jsonl
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.launch import MetricsPump
    from tasks import load_tasks

    cfg, run = _run_dir(tmp_path)
    rollouts = run.path / "verl" / "rollouts"
    rollouts.mkdir(parents=True)
    task = next(t for t in load_tasks() if t.reference_answer)
    truth = task_row(task, 0, "train", "s")["reward_model"]["ground_truth"]
    rows = [{"input": "system\n...user\n" + task.desc, "output": task.reference_answer, "gts": truth, "score": 0.7,
             "step": 3, "uid": f"u_{i}_0"} for i in range(6)]
    dump = rollouts / "3.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import os

    os.utime(dump, (dump.stat().st_mtime - 10, dump.stat().st_mtime - 10))  # verl's writer is done with it
    pump = MetricsPump(run, run.path / "verl", samples_per_step=4)
    pump.poll()
    pump.poll()  # seen once: never logged twice
    logged = read_jsonl(run.samples_path)
    assert len(logged) == 1 and logged[0]["step"] == 3
    samples = logged[0]["samples"]
    assert len(samples) == 4 and samples[0]["task_id"] == task.id
    assert samples[0]["response"] == task.reference_answer
    assert 0.0 <= samples[0]["breakdown"]["final_reward"] <= 1.0


# ---- how a run ends ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "stopped_by", "status"), [(0, None, "finished"), (130, None, "stopped"),
                                                             (-15, "SIGTERM", "stopped")])
def test_exit_codes_map_to_the_run_status(tmp_path, code, stopped_by, status):
    from core.training.verl_backend.launch import _finish

    _, run = _run_dir(tmp_path)
    (run.path / "verl").mkdir()
    assert _finish(run, run.path / "verl", code, stopped_by, 5) is run
    assert run.meta()["status"] == status
    assert _events(run)[-1]["event"] == status


def test_a_failed_verl_run_reports_its_reason_in_one_line(tmp_path):
    from core.errors import UserError
    from core.training.verl_backend.launch import EXIT_RAY, _finish, _write_exit

    _, run = _run_dir(tmp_path)
    verl_dir = run.path / "verl"
    verl_dir.mkdir()
    _write_exit(verl_dir, "failed", "RuntimeError: CUDA out of memory")
    with pytest.raises(UserError, match="verl training failed: RuntimeError: CUDA out of memory"):
        _finish(run, verl_dir, 1, None, 7)
    assert run.meta()["status"] == "failed" and _events(run)[-1]["exit_code"] == 1
    _write_exit(verl_dir, "failed", "ConnectionError: could not connect to GCS")
    with pytest.raises(UserError, match="Ray could not start: ConnectionError"):
        _finish(run, verl_dir, EXIT_RAY, None, None)


def test_resume_keeps_metrics_up_to_verls_last_checkpoint(tmp_path, monkeypatch):
    from core.runs import read_jsonl
    from core.training.verl_backend import detect, launch

    monkeypatch.setattr(detect, "check_launch", lambda cfg, ray_address=None: None)
    cfg, run = _run_dir(tmp_path)
    for step in range(1, 6):
        run.log_metrics(step, {"critic/score/mean": step / 10})
    (run.checkpoints_dir / launch.LATEST_CHECKPOINT).write_text("3")
    (run.path / "verl").mkdir()
    (run.path / "verl" / "metrics.jsonl").write_text('{"step": 1, "data": {}}\n')
    verl_dir = launch.prepare(cfg, run_dir=run, resume=True, ray_address=None)
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2, 3]
    assert [e for e in _events(run) if e["event"] == "resumed"][0]["step"] == 3
    assert not (verl_dir / "metrics.jsonl").exists()  # verl restarts its file; the old one is kept aside
    assert list(verl_dir.glob("metrics.attempt-*.jsonl"))
    from core.training.verl_backend.compose import load

    composed = load(verl_dir / "config.yaml")
    assert composed.trainer.resume_mode == "auto"
    assert composed.trainer.default_local_dir == str(run.checkpoints_dir)
    assert (run.path / "data" / "train.parquet").is_file()


# ---- the parent's lifecycle with a real child process and real signals -------------------------------

# Stands in for verl's trainer (which needs a GPU): writes verl file-logger lines where the launcher told it
# to, checkpoints like verl, then behaves as the test asks. The parent code under test is the real one.
CHILD = r"""
import json, os, signal, sys, time
from pathlib import Path
run, behaviour = Path(sys.argv[1]), sys.argv[2]
assert os.environ["VERL_USE_EXTERNAL_MODULES"].endswith("core.training.verl_backend.extension")
out = open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0)
def stopped(signum, frame):
    (run / "verl" / "exit.json").write_text(json.dumps({"status": "stopped", "signal": signum}))
    sys.exit(130)
signal.signal(signal.SIGINT, stopped)
for step in (1, 2):
    out.write(json.dumps({"step": step, "data": {"critic/score/mean": step / 4, "actor/pg_loss": 0.1}}).encode() + b"\n")
(run / "checkpoints" / "global_step_2").mkdir()
(run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
print("child: two steps done", flush=True)
if behaviour == "crash":
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
if behaviour == "finish":
    sys.exit(0)
time.sleep(120)
"""


def _launch_with_child(tmp_path, monkeypatch, behaviour: str):
    import sys

    from core.training.verl_backend import detect, launch

    monkeypatch.setattr(detect, "check_launch", lambda cfg, ray_address=None: None)
    monkeypatch.setattr(launch, "child_command", lambda run_path: [sys.executable, "-c", CHILD, str(run_path), behaviour])
    cfg, run = _run_dir(tmp_path)
    return cfg, run, launch


def test_ctrl_c_stops_the_child_in_order_and_marks_the_run_stopped(tmp_path, monkeypatch):
    import os
    import signal
    import threading
    import time

    from core.runs import read_jsonl

    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "wait")

    def press_ctrl_c_after_two_steps():
        deadline = time.monotonic() + 120
        while len(read_jsonl(run.metrics_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c_after_two_steps, daemon=True).start()
    progress: list[dict] = []
    assert launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, progress=progress.append,
                                    poll_interval=0.05) is run
    meta = run.meta()
    assert meta["status"] == "stopped" and "SIGINT" in meta["message"]
    assert json.loads((run.path / "verl" / "exit.json").read_text())["signal"] == signal.SIGINT  # the child got it
    events = [e["event"] for e in _events(run)]
    assert events[0] == "started" and "checkpoint" in events and events[-1] == "stopped"
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2]
    assert [p["step"] for p in progress] == [1, 2]
    assert "child: two steps done" in run.log_path.read_text()  # the child's output lands in train.log


def test_a_crashing_child_fails_the_run_with_its_error_line(tmp_path, monkeypatch):
    from core.errors import UserError

    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "crash")
    with pytest.raises(UserError, match="verl training failed: RuntimeError: CUDA error: an illegal memory access"):
        launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, poll_interval=0.05)
    assert run.meta()["status"] == "failed"
    assert [e["event"] for e in _events(run)][-1] == "failed"


def test_a_finished_child_finishes_the_run_with_every_step_copied(tmp_path, monkeypatch):
    from core.runs import read_jsonl

    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "finish")
    launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, poll_interval=0.05)
    assert run.meta()["status"] == "finished"
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2]
    assert all("host/memory_used_gb" in r["data"] for r in read_jsonl(run.metrics_path))  # driver's figures


def test_the_parent_holds_the_run_folders_writer_lock_for_the_childs_whole_life(tmp_path, monkeypatch):
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from core.runs import read_jsonl

    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "wait")
    seen: list[str] = []

    def ask_another_process_then_stop():
        deadline = time.monotonic() + 120
        while len(read_jsonl(run.metrics_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        probe = "import sys; from core.runs import lock_holder; print(lock_holder(sys.argv[1]))"
        seen.append(subprocess.run([sys.executable, "-c", probe, str(run.path)], capture_output=True, text=True).stdout)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ask_another_process_then_stop, daemon=True).start()
    launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, poll_interval=0.05)
    assert f"'pid': {os.getpid()}" in seen[0]  # this (parent) process held it while verl's child ran
    assert run.meta()["status"] == "stopped"
