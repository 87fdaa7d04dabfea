"""`devops-rl tail` and `devops-rl runs` as a user runs them: real CLI subprocesses beside a real writer process.

The follow test is a handshake: the writer appends step k only after tail has printed step k-1, so it proves
tail streams steps as they arrive (not at exit), survives a truncated metrics file and ends with the run.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# A run that writes one step per line read from stdin; "truncate" rewrites metrics like --resume does;
# "finish" marks the run finished.
RUN_WRITER = r"""
import sys
from core.training.config import load_config
from core.runs import RunDirectory
run = RunDirectory.create(sys.argv[1], mode="ci-fast", backend="torch", config=load_config("ci-fast"), run_id="live")
print("ready", flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "finish":
        run.event("finished", step=99)
        run.set_status("finished", "all steps")
        break
    if command.startswith("truncate"):
        run.truncate_metrics_after(int(command.split()[1]))
    else:
        step = int(command)
        run.log_metrics(step, {"critic/score/mean": step / 100, "actor/pg_loss": -step / 1000})
        with open(run.log_path, "a") as fp:
            fp.write(f"INFO step {step} logged\n")
    print("ok", flush=True)
"""


def cli_env(runs: Path) -> dict:
    return {**os.environ, "DEVOPS_RL_RUNS_DIR": str(runs), "HF_HUB_OFFLINE": "1"}


def cli(runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], cwd=REPO, env=cli_env(runs),
                          capture_output=True, text=True, timeout=120)


class Lines:
    """Lines of a child's stdout through a queue, so a hung child fails the test instead of hanging it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def until(self, predicate, timeout: float = 60) -> list[str]:
        seen = []
        while True:
            line = self.queue.get(timeout=timeout)
            if line is None:
                raise AssertionError(f"stream ended before the expected line; got {seen}")
            seen.append(line)
            if predicate(line):
                return seen


def cells(line: str) -> list[str]:
    return line.split()


def test_tail_follow_streams_steps_survives_truncation_and_exits_with_the_run(tmp_path):
    runs = tmp_path / "runs"
    writer = subprocess.Popen([sys.executable, "-c", RUN_WRITER, str(runs)], cwd=REPO, env=cli_env(runs),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = Lines(writer)
    tail = None
    try:
        out.until(lambda line: line == "ready")
        tail = subprocess.Popen([sys.executable, "-m", "core.cli.main", "tail", "live", "--follow", "--interval", "0.05"],
                                cwd=REPO, env=cli_env(runs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        shown = Lines(tail)

        def send(command: str) -> None:
            writer.stdin.write(command + "\n")
            writer.stdin.flush()
            out.until(lambda line: line == "ok")

        printed: list[str] = []
        for step in (1, 2, 3):
            send(str(step))
            printed += shown.until(lambda line, s=step: cells(line)[:1] == [str(s)])
            assert cells(printed[-1])[1] == f"{step / 100:.4g}"  # the reward column
        assert cells(printed[0]) == ["step", "reward", "pg_loss"]
        shown.until(lambda line: line == "log | INFO step 3 logged")

        send("truncate 1")  # the file is replaced with step 1 only; new steps still show
        send("4")
        shown.until(lambda line: cells(line)[:1] == ["4"])

        writer.stdin.write("finish\n")
        writer.stdin.flush()
        rest = shown.until(lambda line: line.startswith("run finished"))
        assert "run finished: all steps" in rest[-1]
        assert any(line.startswith("event | finished") for line in rest)
        assert tail.wait(timeout=60) == 0
    finally:
        for proc in (writer, tail):
            if proc is None:
                continue
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def test_tail_reads_a_verl_file_logger_jsonl_directly(tmp_path):
    path = tmp_path / "verl_run.jsonl"
    path.write_bytes(b"".join(json.dumps({"step": s, "data": {"critic/score/mean": s / 4, "actor/entropy": 1.5,
                                                                "timing_s/step": 2.0}}).encode() + b"\n" for s in range(1, 6))
                     + b'{"step": 6, "da')  # a writer caught mid-line
    result = cli(tmp_path, "tail", str(path), "-n", "3")
    assert result.returncode == 0, result.stderr
    rows = [cells(line) for line in result.stdout.splitlines()]
    assert rows[0] == ["step", "reward", "entropy", "step_s"]
    assert rows[1:] == [["3", "0.75", "1.5", "2"], ["4", "1", "1.5", "2"], ["5", "1.25", "1.5", "2"]]


def test_tail_follow_ends_when_the_run_process_is_gone(tmp_path):
    runs = tmp_path / "runs"
    code = ("import sys; from core.training.config import load_config; from core.runs import RunDirectory; "
            "r = RunDirectory.create(sys.argv[1], mode='train', backend='torch', config=load_config(), run_id='crashed'); "
            "r.log_metrics(1, {'critic/score/mean': 0.3})")
    subprocess.run([sys.executable, "-c", code, str(runs)], cwd=REPO, env=cli_env(runs), check=True, timeout=120)
    result = cli(runs, "tail", "crashed", "--follow")
    assert result.returncode == 0, result.stderr
    assert "is gone" in result.stdout.splitlines()[-1]
    assert any(cells(line)[:2] == ["1", "0.3"] for line in result.stdout.splitlines())


def test_tail_and_runs_show_unknown_run_give_one_line(tmp_path):
    for args in (("tail", "nope"), ("runs", "show", "nope")):
        result = cli(tmp_path, *args)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            f"error: no run 'nope' (no meta.json in nope or under {tmp_path}); see 'devops-rl runs list'"]


def test_runs_list_and_show(tmp_path):
    code = ("import sys; from core.training.config import load_config; from core.runs import RunDirectory; "
            "r = RunDirectory.create(sys.argv[1], mode='ci-fast', backend='torch', config=load_config('ci-fast'), "
            "run_id='20260101-000000-ci-fast-abcd'); "
            "[r.log_metrics(s, {'critic/score/mean': v}) for s, v in ((1, 0.1), (2, 0.5), (3, 0.3))]; "
            "(r.checkpoints_dir / 'global_step_2').mkdir(); r.event('checkpoint', step=2); r.set_status('finished', '3 steps')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=cli_env(tmp_path), check=True, timeout=120)
    result = cli(tmp_path, "runs", "list")
    assert result.returncode == 0, result.stderr
    header, row = (cells(line) for line in result.stdout.splitlines())
    assert header == ["run", "status", "mode", "backend", "steps", "best", "last", "age"]
    assert row[:7] == ["20260101-000000-ci-fast-abcd", "finished", "ci-fast", "torch", "3", "0.5", "0.3"]
    listed = json.loads(cli(tmp_path, "runs", "list", "--json").stdout)
    assert listed[0]["best_reward"] == 0.5 and listed[0]["status"] == "finished"
    shown = cli(tmp_path, "runs", "show", "20260101").stdout
    assert "status:   finished (3 steps)" in shown
    assert "checkpoints: global_step_2" in shown
    assert "checkpoint" in shown and "critic/score/mean" in shown
    empty = cli(tmp_path / "none", "runs", "list")
    assert empty.returncode == 0 and "no runs under" in empty.stdout


def test_tail_follow_on_a_terminal_draws_a_live_table(tmp_path):
    """On a TTY the table is drawn by rich Live; a finished run is drawn once and tail exits."""
    import pty

    code = ("import sys; from core.training.config import load_config; from core.runs import RunDirectory; "
            "r = RunDirectory.create(sys.argv[1], mode='ci-fast', backend='torch', config=load_config('ci-fast'), "
            "run_id='done'); "
            "[r.log_metrics(s, {'critic/score/mean': s / 8, 'actor/entropy': 1.25}) for s in (1, 2, 3)]; "
            "r.set_status('finished', 'ok')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=cli_env(tmp_path), check=True, timeout=120)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "core.cli.main", "tail", "done", "--follow"], cwd=REPO,
                            env={**cli_env(tmp_path), "COLUMNS": "100", "TERM": "xterm-256color"},
                            stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in screen  # drawn with terminal control sequences, not plain lines
    for text in ("step", "reward", "entropy", "0.375", "1.25", "run finished: ok"):
        assert text in screen
