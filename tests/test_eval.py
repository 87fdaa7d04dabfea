"""`devops-rl eval` end to end: the tiny model served in-process, real 127.0.0.1 servers that fail and recover
or die, an eval process killed mid-way (SIGKILL/SIGTERM) whose partial results `--resume` completes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ANSWER = """## Plan
1. CI builds the image, runs the tests and a Trivy scan; secrets come from Vault, never the repo.
2. Deploy with a Kubernetes Deployment: readiness/liveness probes, resource limits, RBAC, rollback with `kubectl rollout undo`.
3. Prometheus alerts and a Grafana dashboard; a runbook documents the on-call steps.
"""


@pytest.fixture
def endpoint(chat_endpoint):
    """A ChatEndpoint answering ANSWER."""
    return lambda **kwargs: chat_endpoint(ANSWER, **kwargs)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _eval(*args: str) -> int:
    from core.cli.main import main

    return main(["eval", *args])


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _only_results(folder: Path) -> Path:
    [path] = list(folder.glob("eval_results_*.json"))
    return path


def test_eval_of_the_tiny_model_end_to_end(tmp_path, capsys):
    import tasks
    from core.rewards import score

    assert _eval("--local", "builtin:tiny", "--split", "all", "--limit", "3", "--max-tokens", "8", "-j", "2") == 0
    data = _load(_only_results(tmp_path))
    summary = data["summary"]
    assert data["status"] == "complete" and summary["count"] == 3 and summary["failures"] == 0
    first_three = [t.id for t in tasks.load_tasks()[:3]]
    assert [r["task_id"] for r in data["results"]] == first_three == data["task_ids"]
    for entry in data["results"]:
        assert entry["reward"] == round(score(entry["answer"], tasks.get_task(entry["task_id"])).final_reward, 6)
        assert entry["breakdown"]["final_reward"] == pytest.approx(entry["reward"])
        assert entry["elapsed_seconds"] > 0 and 1 <= entry["usage"]["completion_tokens"] <= 8
    rewards = [r["reward"] for r in data["results"]]
    assert summary["mean_reward"] == pytest.approx(sum(rewards) / 3, abs=1e-6)
    assert set(summary["by_dimension"]) == set(data["results"][0]["breakdown"]["dimensions"])
    assert sum(summary["count_by_type"].values()) == 3 and summary["wall_time_s"] > 0
    assert summary["tokens"]["completion"] == sum(r["usage"]["completion_tokens"] for r in data["results"])
    assert data["settings"]["local"] == "builtin:tiny" and data["settings"]["base_url"] is None
    out = capsys.readouterr().out
    assert "[3/3]" in out and f"mean reward {summary['mean_reward']:.3f} over 3 tasks" in out


@pytest.mark.slow
def test_eval_of_a_trained_run_goes_to_its_eval_folder_and_no_file_holds_the_key(tmp_path, monkeypatch, capsys):
    """A real (seconds-long) training run and an eval of its checkpoint, both with API keys in the
    environment; then every file the run, the eval and the logs wrote is searched for the keys."""
    keys = {"DEVOPS_RL_API_KEY": "sk-devops-secret-4f9a8b7c6d5e", "OPENAI_API_KEY": "sk-openai-secret-1a2b3c4d5e6f"}
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    train = subprocess.run([sys.executable, "-m", "core.cli.main", "train", "--mode", "test"], capture_output=True,
                           text=True, timeout=300, cwd=REPO)
    assert train.returncode == 0, train.stderr[-2000:]
    [run] = list(Path(os.environ["DEVOPS_RL_RUNS_DIR"]).iterdir())
    assert _eval("--run", run.name, "--limit", "2", "--max-tokens", "4", "--temperature", "0") == 0
    data = _load(_only_results(run / "eval"))
    step = max(int(p.name.split("_")[-1]) for p in (run / "checkpoints").glob("global_step_*"))
    assert data["settings"]["model"] == f"{run.name}@step{step}" and data["summary"]["count"] == 2

    # a resumed eval serves the checkpoint it started with, though the run has saved a newer one since
    path = _only_results(run / "eval")
    data["results"], data["status"] = data["results"][:1], "interrupted"
    path.write_text(json.dumps(data))
    newer = run / "checkpoints" / "global_step_99"
    shutil.copytree(run / "checkpoints" / f"global_step_{step}", newer)
    capsys.readouterr()
    assert _eval("--run", run.name, "--resume") == 0
    assert f"evaluating 2 tasks (1 already done) with {run.name}@step{step} at http://127.0.0.1:" in capsys.readouterr().out
    data = _load(path)
    assert data["status"] == "complete" and data["summary"]["count"] == 2
    assert data["settings"]["model"] == f"{run.name}@step{step}" and data["settings"]["model_path"] != str(newer)

    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"train.log", "metrics.jsonl", "config.yaml", "meta.json"} <= {p.name for p in written}
    assert any(p.parent.name == "logs" for p in written)
    for path in written:
        content = path.read_bytes()
        for value in keys.values():
            assert value.encode() not in content, path
    for value in keys.values():
        assert value not in train.stdout + train.stderr


def test_a_task_the_server_keeps_failing_is_counted_and_resume_retries_it(endpoint, tmp_path):
    import tasks

    chosen = tasks.load_tasks()[:4]
    bad = chosen[1].desc
    server = endpoint(fail=lambda desc, n: desc == bad or n == 1 and desc == chosen[2].desc)
    ids = [arg for t in chosen for arg in ("--task", t.id)]
    assert _eval("--base-url", server.base_url, "--model", "m", *ids, "--retries", "1", "-j", "2") == 0
    path = _only_results(tmp_path)
    data = _load(path)
    assert data["summary"]["count"] == 3 and data["summary"]["failures"] == 1
    failed = next(r for r in data["results"] if r["reward"] is None)
    assert failed["task_id"] == chosen[1].id and "HTTP 500: model crashed (after 2 tries)" in failed["error"]
    assert server.calls[chosen[2].desc] == 2  # a 500 then a recovery
    assert data["summary"]["mean_reward"] is not None and data["status"] == "complete"

    server.fail = lambda desc, n: False
    assert _eval("--resume", "--out", str(path)) == 0
    data = _load(path)
    assert data["summary"]["count"] == 4 and data["summary"]["failures"] == 0
    assert server.calls[chosen[0].desc] == 1 and server.calls[bad] == 3  # only the failed task was asked again


def test_server_dying_mid_eval_keeps_partial_results_and_resume_finishes(endpoint, tmp_path, capsys):
    count = {"n": 0}
    server = endpoint(delay=0.05)

    def die_after_two(desc, n):
        count["n"] += 1
        if count["n"] == 2:
            threading.Thread(target=server.close).start()
        return False

    server.fail = die_after_two
    code = _eval("--base-url", server.base_url, "--model", "m", "--split", "all", "--limit", "5", "-j", "1", "--retries", "1")
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {server.base_url}: cannot connect after 2 tries")
    path = _only_results(tmp_path)
    data = _load(path)
    assert data["status"] == "interrupted" and 1 <= data["summary"]["count"] <= 2 and data["summary"]["total"] == 5

    again = endpoint()
    assert _eval("--resume", "--base-url", again.base_url, "--model", "m") == 0
    data = _load(path)
    assert data["status"] == "complete" and data["summary"]["count"] == 5
    assert data["settings"]["base_url"] == server.base_url  # the file keeps what it was started with


def _start_eval(base_url: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "core.cli.main", "eval", "--base-url", base_url, "--model", "m",
                             "--split", "all", "--limit", "6", "-j", "1", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _wait_for_results(path: Path, at_least: int, proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.exists():
            data = _load(path)
            if len(data["results"]) >= at_least:
                return data
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {at_least} results in {path} within 60 s")


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 130)])
def test_eval_process_killed_mid_way_keeps_what_finished_and_resume_completes(endpoint, tmp_path, sig, code):
    server = endpoint(delay=0.3)
    path = tmp_path / "eval_results_killed.json"
    proc = _start_eval(server.base_url, path)
    _wait_for_results(path, 2, proc)
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode == code
    data = _load(path)  # always whole JSON: written atomically after each task
    kept = {r["task_id"]: r["answer"] for r in data["results"]}
    assert 2 <= len(kept) < 6 and data["status"] == ("running" if sig == signal.SIGKILL else "interrupted")
    assert not list(tmp_path.glob(".eval_results_*tmp*"))

    server.delay = 0.0
    assert _eval("--resume") == 0  # finds the unfinished file in the current folder
    data = _load(path)
    assert data["status"] == "complete" and [r["task_id"] for r in data["results"]] == data["task_ids"]
    assert len(data["task_ids"]) == 6 and all(r["reward"] is not None for r in data["results"])
    assert sum(server.calls.values()) <= 6 + 1  # finished tasks were not asked again (one may have been in flight)
    assert all(data["results"][i]["answer"] == kept[r["task_id"]] for i, r in enumerate(data["results"]) if r["task_id"] in kept)


def test_unreachable_port_is_one_error_line(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert _eval("--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--retries", "0", "--limit", "1") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"error: http://127.0.0.1:{port}/v1: cannot connect after 1 try")


@pytest.mark.parametrize("args, fragment", [
    (["--model", "m"], "no endpoint: pass --base-url URL --model NAME, or --local MODEL_OR_RUN"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--model: required with --base-url"),
    (["--local", "builtin:tiny", "--base-url", "http://127.0.0.1:9/v1"], "--base-url and --local both given"),
    (["--local", "builtin:tiny", "--split", "test"], "--split: 'test' is not one of val, train, all"),
    (["--local", "builtin:tiny", "--type", "k8s"], "--type: 'k8s' is not a task type"),
    (["--resume", "--model", "m"], "--resume: no unfinished eval_results_*.json in"),
    (["--run", "no-such-run", "--limit", "1"], "no run 'no-such-run'"),
])
def test_bad_eval_options_are_one_line_errors(args, fragment, capsys):
    assert _eval(*args) == 2
    assert fragment in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_request_past_the_timeout_is_retried_then_fails_its_task(endpoint, capsys):
    server = endpoint(delay=2.0)  # a live server, only slow: the task fails, not the eval (docs/eval.md)
    assert _eval("--base-url", server.base_url, "--model", "m", "--limit", "1", "--timeout", "0.3", "--retries", "1") == 0
    assert "no complete answer within --timeout 0.3s (after 2 tries)" in capsys.readouterr().out
    assert sum(server.calls.values()) == 2


@pytest.mark.slow
def test_progress_is_a_bar_on_a_terminal(endpoint, tmp_path):
    import pty

    server = endpoint()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the eval with a terminal as stdout
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "core.cli.main", "eval", "--base-url", server.base_url, "--model", "m",
                                  "--limit", "3", "--out", str(tmp_path / "tty.json")])
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    text = output.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "3/3" in text and "━" in text and "[1/3]" not in text  # rich's bar, not the plain lines
    assert _load(tmp_path / "tty.json")["summary"]["count"] == 3


@pytest.mark.parametrize("raw, fragment", [
    (("text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"), "the answer is not JSON (text/html)"),
    (("application/json", b'{"id": "x", "choices": [{"index": 0'), "the answer is not JSON (application/json)"),
    (("application/json", b'{"id": "x", "object": "chat.completion"}'), "not a chat completion: choices: field required"),
])
def test_an_endpoint_that_does_not_answer_chat_completions_fails_each_task_never_scores_it(
        endpoint, tmp_path, capsys, raw, fragment):
    server = endpoint(raw=raw)
    assert _eval("--base-url", server.base_url, "--model", "m", "--limit", "3", "-j", "2") == 0
    data = _load(_only_results(tmp_path))
    assert data["summary"]["count"] == 0 and data["summary"]["failures"] == 3 and data["summary"]["mean_reward"] is None
    assert all(r["reward"] is None and fragment in r["error"] for r in data["results"])
    captured = capsys.readouterr()
    assert "over 0 tasks, 3 failed" in captured.out
    warning = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and warning[0].startswith("warning: 3 of 3 tasks failed") and fragment in warning[0]


def test_json_output_is_only_json_on_stdout(endpoint, tmp_path):
    server = endpoint(fail=lambda desc, n: n == 1 and "Terraform" in desc)
    result = subprocess.run([sys.executable, "-m", "core.cli.main", "eval", "--base-url", server.base_url, "--model", "m",
                             "--limit", "4", "--retries", "0", "--json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # what `| jq` reads: nothing else on stdout
    assert report["summary"]["count"] + report["summary"]["failures"] == 4
    assert Path(report["results"]).is_file()
    assert "[4/4]" in result.stderr and "evaluating 4 tasks" in result.stderr


def _read_only_folder(tmp: Path) -> Path:
    if os.geteuid() == 0:
        return Path("/sys")  # sysfs refuses new files even to root
    folder = tmp / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def test_an_unwritable_out_is_refused_before_any_request(endpoint, tmp_path, capsys):
    server = endpoint()
    out = _read_only_folder(tmp_path) / "results.json"
    assert _eval("--base-url", server.base_url, "--model", "m", "--limit", "2", "--out", str(out)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: --out {out.parent}: cannot write there")
    assert server.calls == {}  # nothing computed, so nothing lost


def test_out_that_becomes_unwritable_mid_eval_keeps_every_answer_in_a_fallback(endpoint, tmp_path, capsys):
    """The results folder disappears (a file takes its place) after two answers: the answers computed so
    far go to the current folder, the one error line says where, and --resume there finishes the eval."""
    import tasks

    out_dir = tmp_path / "results"
    out = out_dir / "eval_results_mine.json"
    state = {"n": 0}

    def break_the_folder_on_the_third_request(desc, n):
        state["n"] += 1
        if state["n"] == 3:
            # The worker asks for the third answer as soon as it hands over the second: wait until the second
            # is saved, so the third is the one whose save fails.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len((_load(out) if out.exists() else {}).get("results", [])) < 2:
                time.sleep(0.02)
            shutil.rmtree(out_dir)
            out_dir.write_text("a file now")
        return False

    server = endpoint(fail=break_the_folder_on_the_third_request)
    assert _eval("--base-url", server.base_url, "--model", "m", "--limit", "5", "-j", "1", "--out", str(out)) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    fallback = tmp_path / "eval_results_mine.json"
    assert line.startswith(f"error: {out}: cannot write the results") and f"are in {fallback}" in line
    assert f"devops-rl eval --resume --out {fallback}" in line
    data = _load(fallback)
    assert data["status"] == "interrupted" and [r["task_id"] for r in data["results"]] == data["task_ids"][:3]
    assert all(r["reward"] is not None for r in data["results"])
    kept = [tasks.get_task(task_id).desc for task_id in data["task_ids"][:3]]
    assert _eval("--resume", "--out", str(fallback)) == 0
    data = _load(fallback)
    assert data["status"] == "complete" and data["summary"]["count"] == 5
    assert [server.calls[desc] for desc in kept] == [1, 1, 1]  # what was kept was not asked again

