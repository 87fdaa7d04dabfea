"""The fault suite for `train`: SIGKILL and SIGTERM at seeded random moments of real runs (start-up, generation,
update, checkpoint saving), each followed by `--resume`, until the run finishes; no step may be lost or logged
twice, and every run ends `finished` with all its steps, samples and a last checkpoint.

Every attempt is a real `devops-rl train` process that gets real signals. They are forked from one "zygote"
interpreter that imported torch, transformers and the CLI once (but ran nothing, so no thread is forked), which
spares each attempt the seconds of imports: forty points fit in a few minutes on two loaded cores.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

# Reads {"argv", "log"} lines: forks a child that runs the CLI as a fresh process would (default signal
# dispositions, its own stdout/stderr), answering {"pid"}; {"wait": pid} reaps one, answering its exit code.
ZYGOTE = r"""
import json, os, signal, sys
import torch, transformers  # the imports every training process pays for, paid once here
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
import core.training.native, core.training.sft, core.rewards.pool, core.training.checkpoint  # noqa: F401
from core.cli.main import main
from core.training.config import load_config
from tasks import load_tasks
load_tasks()
load_config("ci-fast")
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if "wait" in request:
        _, status = os.waitpid(request["wait"], 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.argv = ["devops-rl", *request["argv"]]
        code = 1
        try:
            code = main(request["argv"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
"""

STEPS = 40  # more than twenty points advance a run, so nearly every attempt is hit before the run ends
TRAIN = ("train", "--mode", "test", "--backend", "torch", "--set", "trainer.save_freq=1", "--set",
         "devops.keep_checkpoints=2")


class Zygote:
    """The forking interpreter; `start(argv)` -> pid of a real CLI process, `wait(pid)` -> its exit code."""

    def __init__(self, log: Path, env: dict) -> None:
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def start(self, argv: list[str]) -> int:
        return self._ask({"argv": argv, "log": str(self.log)})["pid"]

    def wait(self, pid: int) -> int:
        return self._ask({"wait": pid})["code"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    home = tmp_path_factory.mktemp("zygote")
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(home / "logs"), "DEVOPS_RL_RUNS_DIR": str(home / "runs")}
    warm = run_cli("train", "--mode", "test", "--backend", "torch", "--run-dir", str(home / "warm"), env=env)
    assert warm.returncode == 0, warm.stderr  # the built-in model is built (and cached) before anything is forked
    forker = Zygote(home / "children.log", env)
    yield forker
    forker.close()


def _records(path: Path) -> list[dict]:
    from core.runs import read_jsonl

    return read_jsonl(path)


def _ended(pid: int) -> bool:
    """Whether a child of the zygote has exited (it stays a zombie until the zygote reaps it)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _saving(run: Path, pid: int) -> bool:
    return any((run / "checkpoints").glob(f".global_step_*.tmp-{pid}"))


def _checkpoints_since(run: Path, events_before: int) -> int:
    return sum(1 for e in _records(run / "events.jsonl")[events_before:] if e.get("event") == "checkpoint")


def _hit_at_a_random_point(rng: random.Random, pid: int, run: Path, events_before: int, startup_s: float) -> str:
    """Wait for a seeded random point of the attempt and say which phase it is in: a random moment of start-up
    (a third of the points), or a random moment after its k-th new checkpoint (k = 0, 1, 2: in a step or a save)."""
    if rng.random() < 1 / 3:
        time.sleep(rng.uniform(0, startup_s))
        return "checkpoint save" if _saving(run, pid) else "start-up"
    wanted = rng.randint(1, 3)
    deadline = time.monotonic() + 600
    while _checkpoints_since(run, events_before) < wanted and not _ended(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 0.5))
    return "checkpoint save" if _saving(run, pid) else "training"


def _check_consistent(run: Path, code: int) -> None:
    """What must hold after any crash: meta.json whole, metrics steps 1..k each once (samples a prefix of them),
    and a run stopped by SIGTERM says so."""
    from core.runs import read_meta

    if not (run / "meta.json").exists():
        return
    meta = read_meta(run)
    assert meta is not None, (run / "meta.json").read_text()
    steps = [r["step"] for r in _records(run / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1)), steps
    samples = [r["step"] for r in _records(run / "samples.jsonl")]
    assert samples == steps[: len(samples)], (samples, steps)
    if code == 130:
        assert meta["status"] == "stopped" and "SIGTERM" in meta["message"], meta


def _check_finished(run: Path) -> None:
    from core.runs import read_meta

    assert [r["step"] for r in _records(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert [r["step"] for r in _records(run / "samples.jsonl")] == list(range(1, STEPS + 1))
    meta = read_meta(run)
    assert meta["status"] == "finished" and meta["total_steps"] == STEPS
    assert (run / "checkpoints" / f"global_step_{STEPS}" / "trainer_state.json").is_file()
    assert not list((run / "checkpoints").glob(".global_step_*.tmp-*"))  # saves cut short were cleared, not left
    assert _records(run / "events.jsonl")[-1]["event"] == "finished"


def _attempt(zygote: Zygote, run: Path, steps: int = STEPS) -> int:
    resume = ["--resume"] if (run / "meta.json").exists() else []
    return zygote.start([*TRAIN, "--set", f"trainer.total_training_steps={steps}", "--run-dir", str(run), *resume])


def _signal_at_random_points(zygote: Zygote, tmp_path: Path, sig: signal.Signals, points: int, seed: int) -> None:
    rng = random.Random(seed)
    started = time.monotonic()
    calibration = tmp_path / "calibration"
    pid = _attempt(zygote, calibration, steps=3)
    while not _checkpoints_since(calibration, 0) and not _ended(pid):
        time.sleep(0.01)
    startup_s = time.monotonic() - started  # start-up and one step, at this machine's pace now
    assert zygote.wait(pid) == 0, zygote.log.read_text()[-3000:]
    runs, hit, phases = [tmp_path / "run-1"], 0, set()
    while hit < points:
        run = runs[-1]
        events_before = len(_records(run / "events.jsonl"))
        pid = _attempt(zygote, run)
        phase = _hit_at_a_random_point(rng, pid, run, events_before, startup_s)
        os.kill(pid, sig)
        code = zygote.wait(pid)
        if code == 0:  # it finished before the signal arrived: not a point; the next run starts fresh
            _check_finished(run)
            runs.append(tmp_path / f"run-{len(runs) + 1}")
            continue
        hit += 1
        phases.add(phase)
        expected = {-signal.SIGKILL} if sig == signal.SIGKILL else {-signal.SIGTERM, 130}
        assert code in expected, (code, zygote.log.read_text()[-3000:])
        _check_consistent(run, code)
    from core.runs import read_meta

    for run in runs:  # resume each run to its end, without signals
        if (read_meta(run) or {}).get("status") == "finished":
            continue
        assert zygote.wait(_attempt(zygote, run)) == 0, zygote.log.read_text()[-3000:]
        _check_finished(run)
    assert {"start-up", "training"} <= phases, phases


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "seed"), [(signal.SIGKILL, 13), (signal.SIGTERM, 31)], ids=["SIGKILL", "SIGTERM"])
def test_twenty_signals_at_random_points_then_resume_lose_and_repeat_no_step(zygote, tmp_path, sig, seed):
    _signal_at_random_points(zygote, tmp_path, sig, points=20, seed=seed)


def _cold_train(run: Path, env: dict) -> subprocess.Popen:
    """A real `devops-rl train` started cold, so that its heavy imports are still under way when it is signalled."""
    return subprocess.Popen([sys.executable, "-m", "core.cli.main", *TRAIN, "--set", "trainer.total_training_steps=2",
                             "--run-dir", str(run)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_a_signal_during_start_up_stops_the_run_with_130(tmp_path, sig):
    """Ctrl-C (or an SSH session closing) as soon as the run folder exists, while transformers is being imported
    and the model built: exit 130 and status `stopped`, never `failed` with an ImportError nor left `running`."""
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(tmp_path / "logs")}
    run = tmp_path / "run"
    proc = _cold_train(run, env)
    try:
        deadline = time.monotonic() + 120
        while not (run / "meta.json").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    meta = json.loads((run / "meta.json").read_text())
    assert proc.returncode == 130, err[-2000:]
    assert meta["status"] == "stopped" and meta["message"].startswith(f"stopped by {sig.name}"), meta
    assert "Traceback" not in err and "error:" not in err, err[-2000:]


def test_a_full_disk_during_a_checkpoint_is_one_line_naming_the_folder(tmp_path):
    """The run folder on a real 3 MiB tmpfs (its own mount namespace; root only): the step's checkpoint does not fit."""
    folder = tmp_path / "small"
    folder.mkdir()
    script = ('mount -t tmpfs -o size=3m tmpfs "$1" || exit 77; shift; "$@"; code=$?; '
              'cat "$RUN/meta.json" >&2; exit $code')
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(tmp_path / "logs"), "RUN": str(folder / "run")}
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), sys.executable, "-m",
                             "core.cli.main", *TRAIN, "--set", "trainer.total_training_steps=1", "--run-dir",
                             str(folder / "run")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode == 77 or "unshare" in result.stderr[:200]:
        pytest.skip(f"no tmpfs mount here ({result.stderr.strip()[:80]})")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert errors[0].startswith(f"error: {folder / 'run' / 'checkpoints'}: cannot write the checkpoint of step 1")
    assert "Traceback" not in result.stderr
    meta = json.loads(result.stderr[result.stderr.index("{"):])
    assert meta["status"] == "failed" and "cannot write the checkpoint" in meta["message"]
