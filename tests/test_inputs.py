"""Issue 13's regressions outside the agent commands: one writer per run folder, logging without a log folder,
resume that never appends twice nor flips a finished run, bounded configs, model files that name themselves,
the cockpit's launch from a folder with its own `tasks/`, duplicate keys and alias bombs, and `tail` of a stranger.

Real parts throughout: real training runs on the built-in tiny model, real lock-holding processes, real
read-only folders (a read-only bind mount when the tests run as root, which ignores permission bits).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_files_unchanged, assert_user_error, cli_in_process, run_cli, snapshot_files

SHORT_RUN = ("--mode", "test", "--backend", "torch", "--set", "trainer.total_training_steps=3", "--set",
             "trainer.save_freq=1", "--set", "devops.keep_checkpoints=3")

# A process that holds a run folder's writer lock until it is killed, as a training process would.
HOLDER = r"""
import sys, time
from core.runs import RunDirectory
RunDirectory(sys.argv[1]).hold_lock()
print("holding", flush=True)
time.sleep(600)
"""


def _steps(run: Path, name: str = "metrics.jsonl") -> list[int]:
    return [json.loads(line)["step"] for line in (run / name).read_text().splitlines() if line.strip()]


def _meta(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def _run_files(run: Path) -> dict:
    """The run's files as bytes, except its writer lock (whose text names the last process that took it)."""
    return {p: b for p, b in snapshot_files(run).items() if p.name != "writer.lock"}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A real 3-step run with a checkpoint at every step, finished."""
    home = tmp_path_factory.mktemp("finished")
    run = home / "run"
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(home / "logs"), "DEVOPS_RL_RUNS_DIR": str(home / "runs")}
    result = run_cli("train", *SHORT_RUN, "--run-dir", str(run), env=env)
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(finished_run, target)
    return target


@pytest.fixture
def holder():
    """Start a process holding the writer lock of a folder; all are killed after the test."""
    started: list[subprocess.Popen] = []

    def hold(folder: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "holding"
        started.append(proc)
        return proc

    yield hold
    for proc in started:
        proc.kill()
        proc.wait()


def _read_only(folder: Path) -> list[str]:
    """Make `folder` read-only for the command that follows; returns the prefix to run that command with.

    Not root: permission bits. Root ignores them, so the command runs in its own mount namespace where the
    folder is a read-only bind mount (skipped where the container does not allow one).
    """
    folder.mkdir(parents=True, exist_ok=True)
    if os.getuid() != 0:
        folder.chmod(0o555)
        return []
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    prefix = ["unshare", "-m", "sh", "-c", script, "sh", str(folder)]
    probe = subprocess.run([*prefix, "touch", str(folder / "probe")], capture_output=True, text=True)
    if shutil.which("unshare") is None or "Read-only file system" not in probe.stderr:
        pytest.skip(f"no read-only bind mount here ({probe.stderr.strip()[:80]})")
    return prefix


def _cli_as(prefix: list[str], *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)


# ---- 1. one writer per run folder -------------------------------------------------------------------------


def test_a_second_writer_of_a_training_run_gets_one_line_naming_it_and_the_run_is_untouched(tmp_path, capsys):
    run = tmp_path / "live"
    proc = subprocess.Popen([sys.executable, "-m", "core.cli.main", "train", "--mode", "test", "--backend", "torch",
                             "--set", "trainer.total_training_steps=400", "--set", "trainer.save_freq=1",
                             "--run-dir", str(run)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not (run / "checkpoints" / "global_step_1" / "trainer_state.json").is_file():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
            time.sleep(0.1)
        error = assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--resume", "--run-dir", str(run)),
                                  f"process {proc.pid} on host", "is writing this run")
        assert "since 20" in error
        assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--run-dir", str(run)), "already holds a run")
        assert _meta(run)["pid"] == proc.pid  # the refused writer replaced nothing
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=300)
    steps = _steps(run)
    assert steps == list(range(1, len(steps) + 1))  # one writer: no step interleaved or repeated
    assert _meta(run)["status"] == "stopped"


def test_a_killed_holders_lock_is_free_again_and_the_launcher_checks_it(tmp_path, holder):
    from core.errors import UserError
    from core.runs import lock_holder
    from devops_tui.launcher import launch

    (tmp_path / "runs").mkdir()
    folder = tmp_path / "runs" / "held"
    folder.mkdir()
    proc = holder(folder)
    assert lock_holder(folder)["pid"] == proc.pid
    with pytest.raises(UserError, match=f"process {proc.pid} on host .* is writing this run"):
        launch("test", tmp_path / "runs", run_id="held")
    proc.kill()  # SIGKILL: no chance to clean up, yet the kernel drops the lock
    proc.wait()
    assert lock_holder(folder) is None


def test_the_lock_is_taken_before_a_new_run_folder_is_filled(tmp_path, holder, capsys):
    folder = tmp_path / "new"
    folder.mkdir()
    holder(folder)
    assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--run-dir", str(folder)), "is writing this run")
    assert sorted(p.name for p in folder.iterdir()) == ["writer.lock"]  # no meta, config or metrics written


# ---- 2. logging without a log folder ----------------------------------------------------------------------


def test_a_log_folder_that_is_a_file_leaves_every_command_working_with_one_warning(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(blocker)}
    for args in (("tasks", "--help"), ("tasks", "stats"), ("config", "validate", "--preset", "ci-fast")):
        result = run_cli(*args, env=env)
        assert result.returncode == 0, result.stderr
        warnings = [line for line in result.stderr.splitlines() if "cannot write the log file" in line]
        assert len(warnings) == 1 and str(blocker) in warnings[0] and "Traceback" not in result.stderr


def test_a_read_only_home_leaves_every_command_working_with_one_warning(tmp_path):
    home = tmp_path / "home"
    prefix = _read_only(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_") and k != "DEVOPS_RL_LOG_DIR"}
    env["HOME"] = str(home)
    result = _cli_as(prefix, "tasks", "stats", env=env)
    assert result.returncode == 0, result.stderr
    assert "total: 143" in result.stdout and "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if "cannot write the log file" in line]
    assert len(warnings) == 1 and "Read-only file system" in warnings[0]


@pytest.mark.parametrize("which", ["DEVOPS_RL_RUNS_DIR", "DEVOPS_RL_CACHE_DIR", "--run-dir"])
def test_read_only_runs_cache_and_run_folders_are_one_line(tmp_path, which):
    readonly = tmp_path / "ro"
    prefix = _read_only(readonly)
    env = {**os.environ, "DEVOPS_RL_RUNS_DIR": str(tmp_path / "runs"), "DEVOPS_RL_LOG_DIR": str(tmp_path / "logs")}
    args = ["train", "--mode", "test", "--backend", "torch"]
    if which == "--run-dir":
        args += ["--run-dir", str(readonly / "run")]
    else:
        env[which] = str(readonly)
    result = _cli_as(prefix, *args, env=env)
    error = assert_user_error(result, str(readonly), "not writable", "Read-only file system")
    assert ("the cache folder" in error) == (which == "DEVOPS_RL_CACHE_DIR")


# ---- 3. resume ------------------------------------------------------------------------------------------


def test_resume_with_every_checkpoint_deleted_is_refused_and_appends_nothing(run_copy, capsys):
    for folder in (run_copy / "checkpoints").glob("global_step_*"):
        shutil.rmtree(folder)
    before = _run_files(run_copy)
    assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--resume", "--run-dir", str(run_copy)),
                      "wrote checkpoints (the newest of step 3) but none is left")
    assert_files_unchanged(before)
    assert _steps(run_copy) == [1, 2, 3]


def test_a_corrupted_newest_checkpoint_falls_back_to_the_one_before_with_a_warning(run_copy):
    weights = run_copy / "checkpoints" / "global_step_3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated, as by a full disk
    result = run_cli("train", "--mode", "test", "--resume", "--run-dir", str(run_copy), "--set",
                     "trainer.total_training_steps=4")
    assert result.returncode == 0, result.stderr
    assert "checkpoint of step 3 cannot be loaded" in result.stderr and "model.safetensors" in result.stderr
    assert _steps(run_copy) == [1, 2, 3, 4] and _steps(run_copy, "samples.jsonl") == [1, 2, 3, 4]
    assert (run_copy / "checkpoints" / "global_step_3.unreadable" / "model.safetensors").stat().st_size == 1000
    assert (run_copy / "checkpoints" / "global_step_4" / "trainer_state.json").is_file()
    events = [json.loads(line) for line in (run_copy / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "resumed"] == [2]
    assert _meta(run_copy)["status"] == "finished"


def test_a_finished_run_stays_finished_when_a_resume_attempt_fails(run_copy, capsys):
    assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--resume", "--run-dir", str(run_copy)),
                      "already finished all 3 steps")
    for weights in (run_copy / "checkpoints").glob("global_step_*/model.safetensors"):
        weights.write_bytes(b"\0" * 16)  # every checkpoint broken: the attempt fails inside the trainer
    before = _run_files(run_copy)
    assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--resume", "--run-dir", str(run_copy), "--set",
                                     "trainer.total_training_steps=5"), "none of the 3 checkpoints", "loads")
    meta = _meta(run_copy)
    assert meta["status"] == "finished" and meta["message"] == "3 steps"
    logs = ("meta.json", "events.jsonl", "train.log")  # the attempt is recorded; everything else stays as it was
    assert {k: v for k, v in before.items() if k.name not in logs} == \
        {k: v for k, v in _run_files(run_copy).items() if k.name not in logs}
    last = json.loads((run_copy / "events.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "warning" and "resume failed before training" in last["message"]


@pytest.mark.parametrize(("damage", "message"), [
    ("meta-not-json", "meta.json is not a JSON object"),
    ("meta-list", "meta.json is not a JSON object"),
    ("config-empty", "config.yaml is empty"),
    ("config-missing", "config.yaml is missing"),
])
def test_a_damaged_run_is_never_resumed_nor_rewritten(run_copy, capsys, damage, message):
    {"meta-not-json": lambda: (run_copy / "meta.json").write_text('{"run_id": "x", '),
     "meta-list": lambda: (run_copy / "meta.json").write_text("[1, 2]"),
     "config-empty": lambda: (run_copy / "config.yaml").write_text("\n"),
     "config-missing": lambda: (run_copy / "config.yaml").unlink()}[damage]()
    before = _run_files(run_copy)
    assert_user_error(cli_in_process(capsys, "train", "--mode", "test", "--resume", "--run-dir", str(run_copy)), message)
    assert_files_unchanged(before)


def test_meta_json_damaged_during_a_run_is_rewritten_with_its_identity(tmp_path):
    from core.errors import UserError
    from core.runs import RunDirectory
    from core.training.config import load_config

    run = RunDirectory.create(tmp_path, mode="ci-fast", backend="torch", config=load_config("ci-fast"), run_id="r1")
    (run.path / "meta.json").write_text("{broken")
    run.set_status("finished", "3 steps")
    meta = _meta(run.path)
    assert meta["run_id"] == "r1" and meta["mode"] == "ci-fast" and meta["backend"] == "torch"
    assert meta["started_at"] and meta["status"] == "finished"
    run.release_lock()
    (run.path / "meta.json").write_text("[]")
    with pytest.raises(UserError, match="not a JSON object"):
        RunDirectory(run.path).update_meta(status="failed")  # never read by this object: refused, not replaced
    assert (run.path / "meta.json").read_text() == "[]"


def test_an_empty_config_file_is_an_error_not_the_preset(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    for args in (("config", "show", "--config", str(empty)), ("train", "--mode", "ci-fast", "--config", str(empty))):
        assert_user_error(cli_in_process(capsys, *args), "empty.yaml: the config file is empty")


# ---- 4. bounds -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "message"), [
    ("data.train_batch_size=99999999999999999999999", "less than or equal to 1048576"),
    ("data.train_batch_size=" + "9" * 5000, "a value cannot be read"),
    ("data.train_batch_size=500", "larger than the 111 training tasks"),
    ("devops.seed=-1", "greater than or equal to 0"),
    ("devops.seed=4294967296", "less than or equal to 4294967295"),
    ("data.seed=-5", "greater than or equal to 0"),
    ("actor_rollout_ref.rollout.n=1000000", "needs about"),  # petabytes: more than any machine running this
    ("data.max_response_length=100000000", "less than or equal to 16777216"),
    ("data.max_response_length=5000", "exceeds the model's context of 4096 tokens"),
    ("trainer.total_training_steps=10000000000", "less than or equal to 1000000000"),
    ("actor_rollout_ref.actor.optim.lr=.nan", "finite number"),
])
def test_sizes_are_bounded_by_the_task_set_memory_and_sanity_at_once(capsys, override, message):
    result = cli_in_process(capsys, "config", "validate", "--preset", "ci-fast", "--set", override)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    train = cli_in_process(capsys, "train", "--mode", "ci-fast", "--set", override)
    assert_user_error(train, message)


def test_a_boolean_for_a_number_is_an_error_not_one(capsys):
    for override in ("data.train_batch_size=true", "actor_rollout_ref.actor.optim.lr=false", "data.seed=true"):
        assert_user_error(cli_in_process(capsys, "config", "show", "--set", override), "a number is expected")
    assert cli_in_process(capsys, "config", "show", "--set", "trainer.val_before_train=true").returncode == 0


# ---- 5. model files ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    from core.training.tiny_model import ensure_tiny_model

    return ensure_tiny_model()


@pytest.mark.parametrize(("damage", "fragment"), [
    ("truncated-weights", "model.safetensors: not a complete safetensors file"),
    ("broken-config", "config.json: not a readable JSON file"),
    ("broken-tokenizer", "tokenizer.json: not a readable JSON file"),
])
def test_a_broken_model_folder_is_one_line_naming_the_file_before_anything_runs(tiny_model, tmp_path, capsys, damage,
                                                                                fragment):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    if damage == "truncated-weights":
        weights = model / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        name = "config.json" if damage == "broken-config" else "tokenizer.json"
        (model / name).write_text('{"hidden_size": ')
    result = cli_in_process(capsys, "train", "--mode", "test", "--backend", "torch", "--model", str(model), "--run-dir",
                            str(tmp_path / "run"))
    error = assert_user_error(result, fragment)
    assert "global_step" not in error and "AttributeError" not in error
    assert result.stderr.splitlines() == [error]  # no INFO line before the error
    assert not (tmp_path / "run").exists()


def test_a_bad_seed_is_one_line_before_anything_runs(tmp_path, capsys):
    result = cli_in_process(capsys, "train", "--mode", "test", "--seed", "-1", "--run-dir", str(tmp_path / "run"))
    assert_user_error(result, "devops.seed", "greater than or equal to 0")
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "run").exists()


# ---- 6. the cockpit's launch from a folder with its own tasks/ -----------------------------------------------


def test_the_cockpit_launches_from_a_folder_that_has_its_own_tasks_and_core_packages(tmp_path, monkeypatch):
    from devops_tui.launcher import launch

    checkout = tmp_path / "ansible-repo"
    for shadow in ("tasks", "core"):
        (checkout / shadow).mkdir(parents=True)
        (checkout / shadow / "__init__.py").write_text("raise ImportError('the user folder was imported')\n")
    (checkout / "tasks" / "main.yml").write_text("- name: install nginx\n")
    monkeypatch.chdir(checkout)
    run = launch("test", tmp_path / "runs")
    code = run.process.wait(timeout=600)
    assert code == 0, "\n".join(run.console_tail(20))
    assert _meta(run.path)["status"] == "finished"


# ---- 9-11. files, YAML and tail -----------------------------------------------------------------------------


def test_duplicate_sections_and_keys_name_both_lines(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  train_batch_size: 4\ntrainer:\n  total_epochs: 1\ndata:\n  shuffle: false\n")
    assert_user_error(cli_in_process(capsys, "config", "validate", str(config)), "c.yaml:5: data: written twice",
                      "lines 1 and 5")
    config.write_text("trainer:\n  save_freq: 4\n  test_freq: 4\n  save_freq: 8\n")
    assert_user_error(cli_in_process(capsys, "config", "show", "--config", str(config)), "trainer.save_freq",
                      "lines 2 and 4")


BOMB = "".join(f"    {c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh"))


@pytest.mark.parametrize("where", ["engine_kwargs", "verl_overrides", "top"])
def test_an_anchor_bomb_is_refused_before_it_expands_anywhere_in_the_file(tmp_path, capsys, where):
    bomb = "    a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB
    text = {
        "engine_kwargs": "actor_rollout_ref:\n  rollout:\n    engine_kwargs:\n      vllm:\n" + bomb.replace("    ", "        "),
        "verl_overrides": "verl_overrides:\n  trainer.rollout_data_dir:\n" + bomb,
        "top": "x-anchors:\n" + bomb + "data:\n  train_batch_size: 4\n",
    }[where]
    config = tmp_path / "bomb.yaml"
    config.write_text(text)
    for command in (("config", "validate", str(config)), ("config", "show", "--config", str(config))):
        assert_user_error(cli_in_process(capsys, *command), "bomb.yaml", "anchor bomb")
    assert_user_error(cli_in_process(capsys, "config", "show", "--set", "data.seed=&a [*a]"), "refers to the block")


def test_config_export_never_overwrites_without_force_nor_writes_into_a_folder(tmp_path, capsys):
    target = tmp_path / "mine.yaml"
    target.write_text("# my notes\n")
    assert_user_error(cli_in_process(capsys, "config", "export", "-o", str(target)), "exists; add --force")
    assert target.read_text() == "# my notes\n"
    assert_user_error(cli_in_process(capsys, "config", "export", "-o", str(tmp_path)), "is a folder")
    assert cli_in_process(capsys, "config", "export", "--preset", "ci-fast", "-o", str(target), "--force").returncode == 0
    assert "train_batch_size: 4" in target.read_text()


def test_kl_estimators_take_the_plus_variants_and_refuse_full(capsys):
    for kl in ("k3+", "low_var_kl+", "kl"):
        assert cli_in_process(capsys, "config", "validate", "--set", f"actor_rollout_ref.actor.kl_loss_type={kl}",
                              "--set", f"algorithm.kl_penalty={kl}").returncode == 0
    assert_user_error(cli_in_process(capsys, "config", "validate", "--set", "algorithm.kl_penalty=full"),
                      "unknown KL estimator")


def test_tail_of_a_file_that_is_not_metrics_is_one_line_and_follow_ends(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes\nnot metrics\n")
    assert_user_error(run_cli("tail", str(notes)), "not a metrics file")
    result = run_cli("tail", "--follow", str(notes), timeout=120)
    assert_user_error(result, "not a metrics file")
    empty = tmp_path / "verl.jsonl"
    empty.write_text("")
    assert run_cli("tail", str(empty)).returncode == 0  # a verl logger that has not written yet


def test_train_errors_come_before_any_info_line(tmp_path, capsys):
    for args in (("--model", str(tmp_path / "no-model")), ("--set", "data.train_batch_size=500"),
                 ("--ray-address", "auto")):
        result = cli_in_process(capsys, "train", "--mode", "test", "--backend", "torch", *args)
        error = assert_user_error(result)
        assert result.stderr.splitlines() == [error], result.stderr
