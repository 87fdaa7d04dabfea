"""The verl launcher's CPU-side parts: detection and one-line failures, the run-folder lifecycle when verl
cannot start here, and the pump that turns verl's file logger, checkpoints and rollout dumps into the run folder.

The recorded fixture (tests/fixtures/verl/metrics.jsonl) is in verl's file-logger format; it is replayed
through verl's own FileLogger, so the bytes the pump reads are exactly what verl writes.

Over 450 lines on purpose: one regression test per launcher defect of issue 12, sharing one fake verl child
(`CHILD`) and one run-folder builder; split, each half would need both.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from core.training.verl_backend.follow import LATEST_CHECKPOINT

FIXTURE = Path(__file__).with_name("fixtures") / "verl" / "metrics.jsonl"
# verl holds 12 CPUs in Ray for ci-fast on one GPU; this box may have 2: Ray counts logical CPUs.
RAY_CPUS = "verl_overrides.ray_kwargs.ray_init.num_cpus=16"


def _run_dir(tmp_path, preset="ci-fast", overrides=(RAY_CPUS,)):
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
    assert ok and why.startswith("2 CUDA GPUs, verl ") and why.endswith("attention: flash-attn ?")
    monkeypatch.setattr(detect, "_installed", lambda module: module != "flash_attn")
    ok, why = detect.verl_available()
    assert ok and why.endswith("attention: sdpa with use_remove_padding=false (flash-attn is not installed)")


def test_a_ray_cluster_address_needs_no_gpu_or_vllm_on_the_driver(monkeypatch):
    """docs/gpu.md: the GPUs (and vLLM) may all be on the cluster's other nodes."""
    from core.training.config import load_config
    from core.training.train import choose_backend
    from core.training.verl_backend import detect

    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 0)
    monkeypatch.setattr(detect, "_installed", lambda module: module != "vllm")
    with socket.socket() as head:  # something answering where the Ray head would be
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        assert choose_backend("verl", address) == ("verl", f"backend: verl (verl 0.9.1 on the Ray cluster at {address})")
        assert choose_backend("auto", address)[0] == "verl"
        detect.check_launch(load_config("ci-fast"), ray_address=address)
    assert choose_backend("auto")[0] == "torch"  # without the cluster, nothing here can run verl


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

    with socket.socket() as held:  # bound, never listening: refuses connections and no other test can take it
        held.bind(("127.0.0.1", 0))
        with pytest.raises(UserError, match=r"no Ray cluster answers there .*ray start --head"):
            check_ray_address(f"127.0.0.1:{held.getsockname()[1]}")
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


def test_verl_needs_a_cpu_count_it_holds_in_ray():
    from core.training.config import load_config
    from core.training.verl_backend.compose import compose_verl_config
    from core.training.verl_backend.detect import cpus_needed

    assert cpus_needed(compose_verl_config(load_config("ci-fast"))) == (
        12, "TransferQueue 1 + 8 storage units, 3 per GPU x 1 GPU")
    two_nodes = load_config("default", overrides=["trainer.nnodes=2", "trainer.n_gpus_per_node=8", "data.train_batch_size=64",
                                                  "actor_rollout_ref.actor.ppo_mini_batch_size=64",
                                                  "verl_overrides.transfer_queue.backend.SimpleStorage.num_data_storage_units=4"])
    assert cpus_needed(compose_verl_config(two_nodes))[0] == 1 + 4 + 3 * 16


def test_too_few_cpus_for_ray_fail_before_the_run_folder_changes(tmp_path, monkeypatch):
    """verl waits silently, forever, for CPUs Ray does not have; say so before starting anything."""
    from core.errors import UserError
    from core.training.verl_backend import detect
    from core.training.verl_backend.launch import run_verl_training

    monkeypatch.setattr(detect, "check_launch", lambda cfg, ray_address=None: None)
    cfg, run = _run_dir(tmp_path, overrides=["verl_overrides.ray_kwargs.ray_init.num_cpus=6"])
    with pytest.raises(UserError) as info:
        run_verl_training(cfg, mode="ci-fast", run_dir=run)
    assert str(info.value) == (
        "this machine has 6 CPUs for Ray but verl needs 12 (TransferQueue 1 + 8 storage units, 3 per GPU x 1 GPU); "
        "set verl_overrides.transfer_queue.backend.SimpleStorage.num_data_storage_units=2 (fewer TransferQueue units), "
        "give Ray more (verl_overrides.ray_kwargs.ray_init.num_cpus=12 counts logical CPUs), or use fewer GPUs")
    assert run.meta()["status"] == "failed"
    assert not (run.path / "data").exists() and not (run.path / "verl").exists()


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
    from core.training.verl_backend.follow import MetricsPump

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
    for (_step, data), record in zip(copied, records):
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
    from core.training.verl_backend.follow import MetricsPump

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
    from core.training.verl_backend.follow import MetricsPump
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
    fresh = rollouts / "4.jsonl"
    fresh.write_text(json.dumps({**rows[0], "step": 4}) + "\n")
    pump.poll()  # verl's writer may still be on it
    assert [entry["step"] for entry in read_jsonl(run.samples_path)] == [3]
    pump.poll(final=True)  # verl has exited: it is complete
    assert [entry["step"] for entry in read_jsonl(run.samples_path)] == [3, 4]
    logged = read_jsonl(run.samples_path)[:1]
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
    from core.training.actor import TrainingFailed
    from core.training.verl_backend.launch import EXIT_RAY, _finish, _write_exit

    _, run = _run_dir(tmp_path)
    verl_dir = run.path / "verl"
    verl_dir.mkdir()
    _write_exit(verl_dir, "failed", "RuntimeError: CUDA out of memory")
    with pytest.raises(TrainingFailed, match="verl training failed: RuntimeError: CUDA out of memory") as info:
        _finish(run, verl_dir, 1, None, 7)
    assert info.value.exit_code == 1  # "the run failed", as on the torch backend
    assert run.meta()["status"] == "failed" and _events(run)[-1]["exit_code"] == 1
    _write_exit(verl_dir, "failed", "ConnectionError: could not connect to GCS")
    with pytest.raises(TrainingFailed, match="Ray could not start: ConnectionError"):
        _finish(run, verl_dir, EXIT_RAY, None, None)


def _ray_task_error(cause: BaseException, function: str, pid: int):
    """A Ray task error as `ray.get` raises it: Ray's own class, header in Ray's colours, cause attached."""
    from ray.exceptions import RayTaskError

    trace = f"Traceback (most recent call last):\n  File \"x.py\", line 1, in {function}\n{type(cause).__name__}: {cause}"
    return RayTaskError(function, trace, cause, proctitle=f"ray::{function}", pid=pid, ip="10.0.0.7").as_instanceof_cause()


def test_the_failure_recorded_is_the_error_inside_rays_wrappers():
    """TaskRunner.run wraps the worker's error, which wraps the real one; Ray's str() starts with a coloured header."""
    from core.errors import UserError
    from core.training.verl_backend.launch import error_line

    real = RuntimeError("Distributed package doesn't have NCCL built in\nmore detail")
    worker = _ray_task_error(real, "WorkerDict.actor_rollout_init_model", 11930)
    runner = _ray_task_error(worker, "TaskRunnerV1.run", 11585)
    assert str(runner).startswith("\x1b[36mray::TaskRunnerV1.run()")
    assert error_line(runner) == "RuntimeError: Distributed package doesn't have NCCL built in"
    assert error_line(_ray_task_error(UserError("the Ray cluster has 8 CPUs"), "run", 1)) == "the Ray cluster has 8 CPUs"
    assert error_line(KeyError("x")) == "KeyError: 'x'"


def test_the_log_fallback_drops_rays_colour_codes(tmp_path):
    from core.training.verl_backend.launch import _last_error_line

    log = tmp_path / "train.log"
    log.write_text("\x1b[36m(TaskRunnerV1 pid=1)\x1b[0m ValueError: bad batch\n\x1b[36m(pid=2)\x1b[0m done\n")
    assert _last_error_line(log) == "(TaskRunnerV1 pid=1) ValueError: bad batch"


def test_the_startup_watchdog_follows_the_stages_verl_notes(tmp_path):
    from core.runs import append_jsonl
    from core.training.verl_backend.follow import STARTUP_NAME, StartupWatchdog

    watchdog = StartupWatchdog(tmp_path, {"launched": 0.0, "runner": 3600.0, "trainer": 0.0, "agent_loop": 0.0})
    assert "after stage 'launched': verl's TaskRunner never started in Ray" in watchdog.poll()
    append_jsonl(tmp_path / STARTUP_NAME, {"stage": "runner"})
    assert watchdog.poll() is None  # a new stage: its own limit, counted from now
    append_jsonl(tmp_path / STARTUP_NAME, {"stage": "trainer"})
    assert "after stage 'trainer': verl's workers never came up" in watchdog.poll()
    append_jsonl(tmp_path / STARTUP_NAME, {"stage": "agent_loop"})  # trainer.init() returned: still watched
    assert "after stage 'agent_loop': verl's agent loop never started" in watchdog.poll()
    append_jsonl(tmp_path / STARTUP_NAME, {"stage": "ready"})
    assert watchdog.poll() is None and watchdog.done  # training has started: nothing more to watch
    assert StartupWatchdog(tmp_path, {"launched": 0.0}).poll(stepped=True) is None


def test_the_startup_limit_comes_from_the_environment_or_is_refused_in_one_line(monkeypatch):
    from core.errors import UserError
    from core.training.verl_backend.follow import STARTUP_STAGES, startup_limits

    monkeypatch.delenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", raising=False)
    assert startup_limits() == {stage: limit for stage, (limit, _) in STARTUP_STAGES.items()}
    monkeypatch.setenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", "90")
    assert set(startup_limits().values()) == {90.0}
    monkeypatch.setenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", "300, trainer=15")  # one stage short, the others patient
    assert startup_limits() == {**dict.fromkeys(STARTUP_STAGES, 300.0), "trainer": 15.0}
    monkeypatch.setenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", "agent_loop=5")
    assert startup_limits() == {**{stage: limit for stage, (limit, _) in STARTUP_STAGES.items()}, "agent_loop": 5.0}
    for bad in ("soon", "0", "-5", "trainer=", "300,trainer=-1"):
        monkeypatch.setenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", bad)
        with pytest.raises(UserError, match=f"DEVOPS_RL_VERL_STARTUP_TIMEOUT_S: '{bad}': must be a number of seconds"):
            startup_limits()
    monkeypatch.setenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", "trianer=15")
    with pytest.raises(UserError, match="no start-up stage 'trianer'; the stages are launched, runner, trainer, agent_loop"):
        startup_limits()


def test_resume_with_resume_mode_disable_is_refused_before_anything_changes(tmp_path, monkeypatch):
    """verl would start over from step 1 while the run folder kept the metrics up to its checkpoint."""
    from core.errors import UserError
    from core.runs import read_jsonl
    from core.training.verl_backend import detect, launch

    monkeypatch.setattr(detect, "check_launch", lambda cfg, ray_address=None: None)
    cfg, run = _run_dir(tmp_path, overrides=[RAY_CPUS, "trainer.resume_mode=disable"])
    for step in range(1, 6):
        run.log_metrics(step, {"critic/score/mean": step / 10})
    (run.checkpoints_dir / LATEST_CHECKPOINT).write_text("3")
    with pytest.raises(UserError, match=r"--resume: trainer.resume_mode is 'disable' .* --set trainer.resume_mode=auto"):
        launch.prepare(cfg, run_dir=run, resume=True, ray_address=None)
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2, 3, 4, 5]
    assert not (run.path / "verl").exists()


def test_resume_from_a_named_checkpoint_keeps_metrics_up_to_its_step(tmp_path, monkeypatch):
    from core.runs import read_jsonl
    from core.training.verl_backend import detect, launch

    monkeypatch.setattr(detect, "check_launch", lambda cfg, ray_address=None: None)
    chosen = tmp_path / "elsewhere" / "global_step_2"
    cfg, run = _run_dir(tmp_path, overrides=[RAY_CPUS, "trainer.resume_mode=resume_path",
                                             f"verl_overrides.trainer.resume_from_path={chosen}"])
    for step in range(1, 6):
        run.log_metrics(step, {"critic/score/mean": step / 10})
    (run.checkpoints_dir / LATEST_CHECKPOINT).write_text("4")
    launch.prepare(cfg, run_dir=run, resume=True, ray_address=None)
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2]


def test_resume_keeps_metrics_up_to_verls_last_checkpoint(tmp_path, monkeypatch):
    from core.runs import read_jsonl
    from core.training.verl_backend import detect, launch

    monkeypatch.setattr(detect, "check_launch", lambda cfg, ray_address=None: None)
    cfg, run = _run_dir(tmp_path)
    for step in range(1, 6):
        run.log_metrics(step, {"critic/score/mean": step / 10})
    (run.checkpoints_dir / LATEST_CHECKPOINT).write_text("3")
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
assert "VERL_USE_EXTERNAL_MODULES" not in os.environ
if behaviour == "hang":  # stuck before verl's TaskRunner starts, as when Ray has no CPU left for it
    time.sleep(600)
if behaviour == "nostart":  # verl fails in its start-up, before any step (vLLM, NCCL, a model that will not load)
    (run / "verl" / "exit.json").write_text(json.dumps({"status": "failed", "message": "RuntimeError: NCCL error"}))
    sys.exit(1)
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
if behaviour == "finish":  # verl's last rollout dump lands just before it exits
    (run / "verl" / "rollouts").mkdir(parents=True, exist_ok=True)
    (run / "verl" / "rollouts" / "2.jsonl").write_text(json.dumps({"input": "p", "output": "o", "score": 0.5}) + "\n")
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
    assert meta["status"] == "stopped" and meta["message"] == (
        "stopped by SIGINT at step 2; verl saves no checkpoint on stop: --resume continues from step 2, its last "
        "checkpoint (trainer.save_freq)")
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


def test_a_resume_whose_verl_start_fails_keeps_the_runs_status(tmp_path, monkeypatch):
    """As on the torch backend: a resume attempt that never reached a step puts back the status it found."""
    from core.training.actor import TrainingFailed

    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "nostart")
    for step in (1, 2):
        run.log_metrics(step, {"critic/score/mean": 0.5})
    (run.checkpoints_dir / LATEST_CHECKPOINT).write_text("2")
    run.set_status("stopped", "stopped by SIGINT at step 2")
    run.mark_resumed()
    with pytest.raises(TrainingFailed, match="verl training failed: RuntimeError: NCCL error"):
        launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, resume=True, poll_interval=0.05)
    meta = run.meta()
    assert (meta["status"], meta["message"]) == ("stopped", "stopped by SIGINT at step 2")
    events = _events(run)
    assert events[-1]["event"] == "warning" and "resume failed before training: RuntimeError: NCCL error" in \
        events[-1]["message"] and "failed" not in [e["event"] for e in events]
    # a new run that fails the same way is failed
    cfg, fresh, launch = _launch_with_child(tmp_path / "new", monkeypatch, "nostart")
    with pytest.raises(TrainingFailed):
        launch.run_verl_training(cfg, mode="ci-fast", run_dir=fresh, poll_interval=0.05)
    assert fresh.meta()["status"] == "failed"


def test_a_failed_verl_run_exits_1_like_a_failed_torch_run(tmp_path, monkeypatch, capsys):
    """One exit code for "the run failed" (2 is bad input: nothing was trained)."""
    from core.cli.main import main
    from core.training.actor import TrainingFailed
    from core.training.verl_backend import detect

    _, _, launch = _launch_with_child(tmp_path, monkeypatch, "crash")
    monkeypatch.setattr(detect, "cuda_gpu_count", lambda: 1)
    monkeypatch.setattr(detect, "_installed", lambda module: True)
    code = main(["train", "--backend", "verl", "--mode", "ci-fast", "--run-dir", str(tmp_path / "runs" / "cli"),
                 "--set", RAY_CPUS])
    assert code == 1 == TrainingFailed.exit_code
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: verl training failed: RuntimeError: CUDA error: an illegal memory access was encountered "
                      f"(full log: {tmp_path / 'runs' / 'cli' / 'train.log'})"]


def test_a_start_that_stalls_fails_the_run_and_stops_verl(tmp_path, monkeypatch):
    from core.errors import UserError
    from core.runs import pid_alive

    monkeypatch.setenv("DEVOPS_RL_VERL_STARTUP_TIMEOUT_S", "3")
    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "hang")
    with pytest.raises(UserError, match=r"verl training failed: verl made no start-up progress for \d+ s after stage "
                                        r"'launched': verl's TaskRunner never started in Ray") as info:
        launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, poll_interval=0.05)
    assert info.value.exit_code == 1
    meta = run.meta()
    assert meta["status"] == "failed" and meta["message"].startswith("verl made no start-up progress")
    assert not pid_alive(meta["child_pid"])


def test_a_finished_child_finishes_the_run_with_every_step_copied(tmp_path, monkeypatch):
    from core.runs import read_jsonl

    cfg, run, launch = _launch_with_child(tmp_path, monkeypatch, "finish")
    launch.run_verl_training(cfg, mode="ci-fast", run_dir=run, poll_interval=0.05)
    assert run.meta()["status"] == "finished"
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2]
    assert [entry["step"] for entry in read_jsonl(run.samples_path)] == [2]  # the dump written as verl exited
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
