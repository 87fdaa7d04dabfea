"""`devops-rl reward score` as a user runs it: a real subprocess per case, task from the task set or a
file, answer from a file or stdin, JSON with exactly five keys, one-line errors with exit code 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tasks
from core.rewards import score

CLI = Path(sys.executable).with_name("devops-rl")
HELDOUT = Path(__file__).parent / "fixtures" / "rewards" / "containers-java-harden"


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(CLI), "reward", "score", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture(scope="module")
def task() -> tasks.Task:
    return tasks.get_task("k8s-001")


@pytest.fixture
def answer_file(tmp_path, task) -> Path:
    path = tmp_path / "answer.md"
    path.write_text(task.reference_answer, encoding="utf-8")
    return path


def test_json_has_exactly_the_five_keys_and_matches_the_api(task, answer_file):
    result = run_cli("--task", task.id, "--answer", str(answer_file), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert list(data) == ["final_reward", "dimensions", "penalties", "evidence", "rubric"]
    assert data == json.loads(json.dumps(score(task.reference_answer, task).to_dict()))


def test_task_file_and_answer_from_stdin():
    answer = (HELDOUT / "expert.md").read_text(encoding="utf-8")
    result = run_cli("--task-file", str(HELDOUT / "task.yaml"), "--answer", "-", "--json", stdin=answer)
    assert result.returncode == 0, result.stderr
    expected = score(answer, tasks.load_task_file(HELDOUT / "task.yaml")).final_reward
    assert json.loads(result.stdout)["final_reward"] == expected


def test_readable_breakdown_names_dimensions_weights_and_penalties(task, tmp_path):
    answer = tmp_path / "bad.md"
    answer.write_text(task.reference_answer + "\n\nJust run `chmod 777 /data` if the volume is read-only.\n", encoding="utf-8")
    result = run_cli("--task", task.id, "--answer", str(answer))
    assert result.returncode == 0, result.stderr
    assert "final reward" in result.stdout
    for name in ("automation", "reliability", "security", "observability", "documentation", "expected_outputs"):
        assert name in result.stdout
    assert "dangerous_advice" in result.stdout and "chmod 777" in result.stdout


@pytest.mark.parametrize("args, message", [
    (("--task", "k8s-01", "--answer", "ANSWER"), "no task with id 'k8s-01'"),
    (("--task", "k8s-001", "--answer", "/nonexistent/answer.md"), "--answer /nonexistent/answer.md: no such file"),
    (("--task-file", "/nonexistent/task.yaml", "--answer", "ANSWER"), "/nonexistent/task.yaml: no such task file"),
    (("--answer", "ANSWER"), "exactly one of --task ID or --task-file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, answer_file):
    result = run_cli(*(str(answer_file) if a == "ANSWER" else a for a in args))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert result.stdout == ""


def test_a_task_file_with_a_bad_key_names_the_file_line_and_key(tmp_path, answer_file):
    bad = tmp_path / "task.yaml"
    bad.write_text("id: x1\ntype: kubernetes\ndifficulty: easy\ndesc: d\nexpected_output: [a]\n", encoding="utf-8")
    result = run_cli("--task-file", str(bad), "--answer", str(answer_file))
    assert result.returncode == 2
    assert f"{bad}:" in result.stderr and "expected_output" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_readable_breakdown_shows_the_rubric_table(task, answer_file):
    result = run_cli("--task", task.id, "--answer", str(answer_file))
    assert result.returncode == 0, result.stderr
    assert "rubric        1.000" in result.stdout
    for criterion in task.rubric:
        assert criterion["id"] in result.stdout
    assert "forbid no-dependency-in-liveness" in result.stdout and "passed" in result.stdout


def test_audit_passes_on_tasks_with_a_rubric_and_reports_its_coverage():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([str(CLI), "reward", "audit", "--task", "k8s-011", "--task", "cicd-005", "--json"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    report = json.loads(result.stdout)
    assert report["covered"] == 2 and report["failures"] == []
    rows = {row["task"]: row for row in report["rows"]}
    assert rows["k8s-011"]["excellent"]["gatekeeper instead of kyverno"] >= 0.6
    assert all(value < rows["cicd-005"]["reference"] for value in rows["cicd-005"]["hacks"].values())
    assert "reference + hostPID" in rows["cicd-005"]["hacks"]
    table = subprocess.run([str(CLI), "reward", "audit", "--task", "k8s-003"], capture_output=True, text=True,
                           timeout=300, env=env)
    assert table.returncode == 0 and "covered 1 of 1 tasks" in table.stdout and "audit passed" in table.stdout


def test_audit_fails_when_a_hack_reaches_the_reference():
    from core.rewards.audit import audit

    report = audit([tasks.get_task("k8s-003")], score=lambda answer, task: 0.9)  # a reward that cannot tell
    assert any("scores 0.900 >= reference 0.900" in failure for failure in report.failures)
    assert any("generic essay scores 0.900 > 0.3" in failure for failure in report.failures)


def test_sqlglot_warnings_go_to_the_log_file_not_the_terminal(tmp_path):
    answer = tmp_path / "answer.md"
    answer.write_text("Enable logical decoding, then publish the table:\n\n```sql\nALTER SYSTEM SET wal_level = logical;\n"
                      "CREATE PUBLICATION orders_pub FOR TABLE orders;\n```\n", encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEVOPS_RL_LOG_DIR": str(tmp_path / "logs")}
    result = subprocess.run([str(CLI), "reward", "score", "--task", "db-007", "--answer", str(answer)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "unsupported syntax" not in result.stderr + result.stdout
    assert "unsupported syntax" in (tmp_path / "logs" / "devops-rl.log").read_text(encoding="utf-8")
