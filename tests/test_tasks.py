"""Task set and loader: the curated data meets the issue's bar, and bad files get file:line:key errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import yaml

import tasks
from core.errors import UserError

GOOD_TASK = """\
- id: demo-001
  type: kubernetes
  difficulty: easy
  desc: Add readiness and liveness probes to the payments Deployment so rollouts stop sending traffic to cold pods.
  expected_outputs: [readinessProbe, livenessProbe, rollout]
  reference_answer: |
    Use HTTP probes on /healthz.
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True, timeout=120
    )


# --- the curated data -------------------------------------------------------------------------


def test_curated_tasks_meet_the_bar():
    loaded = tasks.load_tasks()
    assert len(loaded) >= 100
    by_type = Counter(t.type for t in loaded)
    assert set(by_type) == set(tasks.TASK_TYPES)
    assert min(by_type.values()) >= 12, by_type
    for task_type in tasks.TASK_TYPES:
        difficulties = {t.difficulty for t in loaded if t.type == task_type}
        assert difficulties == set(tasks.DIFFICULTIES), (task_type, difficulties)
    assert len({t.id for t in loaded}) == len(loaded)
    assert all(t.reference_answer and "```" in t.reference_answer for t in loaded)


def test_curated_prompts_are_not_templates():
    loaded = tasks.load_tasks()
    openings = Counter(" ".join(t.desc.split()[:6]).lower() for t in loaded)
    assert openings.most_common(1)[0][1] <= 3, openings.most_common(3)
    assert all(2 <= t.desc.count(".") + t.desc.count("?") <= 12 for t in loaded)


def test_curated_yaml_blocks_parse():
    import re

    block = re.compile(r"```ya?ml\n(.*?)```", re.S)
    for task in tasks.load_tasks():
        for body in block.findall(task.reference_answer):
            list(yaml.safe_load_all(body))  # raises on a broken block, naming the task in the traceback


# --- schema errors ------------------------------------------------------------------------------


def test_valid_file_loads_with_source_line(tmp_path):
    path = write(tmp_path, "k.yaml", GOOD_TASK)
    (task,) = tasks.load_tasks([path])
    assert task.id == "demo-001" and task.expected_outputs == ("readinessProbe", "livenessProbe", "rollout")
    assert task.source == f"{path}:1"


@pytest.mark.parametrize(
    "edit, expected",
    [
        (("  type: kubernetes", "  type: kubernets"), ":2: task 'demo-001': key 'type': unknown type 'kubernets'"),
        (("  difficulty: easy", "  difficulty: trivial"), ":3: task 'demo-001': key 'difficulty': 'trivial' must be one of"),
        (("  desc:", "  dsc:"), "unknown key 'dsc'"),
        (("  expected_outputs: [readinessProbe, livenessProbe, rollout]", "  expected_outputs: [one]"),
         "has 1 items, needs 3 to 6"),
        (("  reference_answer: |\n    Use HTTP probes on /healthz.\n", ""), "missing key 'reference_answer'"),
    ],
)
def test_schema_problems_name_file_line_and_key(tmp_path, edit, expected):
    path = write(tmp_path, "k.yaml", GOOD_TASK.replace(*edit))
    problems = tasks.validate_task_files([path])
    assert len(problems) >= 1
    assert any(str(path) in p and expected in p for p in problems), problems
    with pytest.raises(UserError):
        tasks.load_tasks([path])


def test_unknown_key_suggests_the_right_one(tmp_path):
    path = write(tmp_path, "k.yaml", GOOD_TASK.replace("  expected_outputs:", "  expected_output:"))
    problems = tasks.validate_task_files([path])
    assert any("did you mean 'expected_outputs'?" in p for p in problems)


def test_duplicate_ids_across_files(tmp_path):
    write(tmp_path, "a.yaml", GOOD_TASK)
    write(tmp_path, "b.yaml", GOOD_TASK)
    problems = tasks.validate_task_files([tmp_path])
    assert len(problems) == 1
    assert "b.yaml:1: task 'demo-001': duplicate id (first defined at" in problems[0] and "a.yaml:1" in problems[0]


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "broken.yaml", GOOD_TASK + "- id: demo-002\n  type: [kubernetes\n")
    (problem,) = tasks.validate_task_files([path])
    assert problem.startswith(f"{path}:") and "YAML syntax error" in problem


def test_loading_is_safe(tmp_path):
    marker = tmp_path / "pwned"
    path = write(tmp_path, "evil.yaml", f"- !!python/object/apply:os.system ['touch {marker}']\n")
    problems = tasks.validate_task_files([path])
    assert problems and "YAML syntax error" in problems[0]
    assert not marker.exists()


def test_task_file_takes_one_task_without_reference(tmp_path):
    text = GOOD_TASK.replace("  reference_answer: |\n    Use HTTP probes on /healthz.\n", "")
    path = write(tmp_path, "one.yaml", textwrap.dedent("\n".join(line[2:] for line in text.splitlines())))
    task = tasks.load_task_file(path)
    assert task.reference_answer is None and task.type == "kubernetes"
    with pytest.raises(UserError, match="no such task file"):
        tasks.load_task_file(tmp_path / "missing.yaml")


def test_get_task_suggests_close_ids(tmp_path):
    path = write(tmp_path, "k.yaml", GOOD_TASK)
    with pytest.raises(UserError, match="did you mean 'demo-001'"):
        tasks.get_task("demo-01", tasks.load_tasks([path]))


# --- split and records -------------------------------------------------------------------------


def _synthetic(n_per_type: int) -> list[tasks.Task]:
    return [
        tasks.Task(id=f"{t[:4]}-{i:03d}", type=t, difficulty=tasks.DIFFICULTIES[i % 3], desc="d.", expected_outputs=("a",))
        for t in tasks.TASK_TYPES
        for i in range(n_per_type)
    ]


def test_split_is_stratified_deterministic_and_seeded():
    pool = _synthetic(10)
    train, val = tasks.split_tasks(pool, 0.2, seed=0)
    assert sorted(t.id for t in train + val) == sorted(t.id for t in pool)
    assert not {t.id for t in train} & {t.id for t in val}
    assert Counter(t.type for t in val) == {t: 2 for t in tasks.TASK_TYPES}
    assert tasks.split_tasks(list(reversed(pool)), 0.2, seed=0) == (train, val)
    assert tasks.split_tasks(pool, 0.2, seed=1)[1] != val


def test_adding_a_task_to_one_type_leaves_the_others_alone():
    pool = _synthetic(10)
    _, val = tasks.split_tasks(pool)
    extra = tasks.Task(id="kube-999", type="kubernetes", difficulty="hard", desc="d.", expected_outputs=("a",))
    _, val2 = tasks.split_tasks(pool + [extra])
    assert [t for t in val if t.type != "kubernetes"] == [t for t in val2 if t.type != "kubernetes"]


def test_record_carries_system_prompt_and_task():
    task = _synthetic(1)[0]
    record = tasks.to_record(task)
    assert [m["role"] for m in record["prompt"]] == ["system", "user"]
    assert "DevOps" in record["prompt"][0]["content"] and record["prompt"][1]["content"] == task.desc
    assert record["task"] == task.to_dict() and record["task_id"] == task.id


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_validate_and_stats_on_curated_data():
    result = cli("tasks", "validate")
    assert result.returncode == 0, result.stderr
    stats = json.loads(cli("tasks", "stats", "--json").stdout)
    assert set(stats) == {"total", "by_type", "by_difficulty", "split", "near_duplicates", "held_out"}
    assert stats["total"] >= 100 and len(stats["by_type"]) == 11
    assert stats["split"]["train"] + stats["split"]["val"] == stats["total"]
    assert stats["near_duplicates"]["pairs"] and stats["near_duplicates"]["across_split"] == 0


def test_cli_validate_reports_one_line_per_problem(tmp_path):
    path = write(tmp_path, "bad.yaml", GOOD_TASK.replace("kubernetes", "kubernets").replace("easy", "trivial"))
    result = cli("tasks", "validate", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3 and "Traceback" not in result.stderr
    assert all(line.startswith(str(path)) for line in lines[:2])


def test_cli_list_filters_and_show():
    listed = json.loads(cli("tasks", "list", "--type", "security", "--difficulty", "hard", "--json").stdout)
    assert listed and all(t["type"] == "security" and t["difficulty"] == "hard" for t in listed)
    shown = json.loads(cli("tasks", "show", listed[0]["id"], "--json").stdout)
    assert shown["id"] == listed[0]["id"] and shown["source"].startswith(str(tasks.DATA_DIR))
    bad = cli("tasks", "show", "no-such-task")
    assert bad.returncode == 2 and bad.stderr.startswith("error: no task with id 'no-such-task'")
