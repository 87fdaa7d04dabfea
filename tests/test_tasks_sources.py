"""A user's own tasks (`--tasks`, `devops.tasks` with weights, JSONL) through every command and both backends'
data paths, the run's record of its task files, and the split without leaks (near-duplicates, hold-outs)."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import tasks
from core.errors import UserError
from tasks.sources import config_split, load_sources, task_file_records
from tasks.split import DEDUP_THRESHOLD, jaccard, leak_free_split, near_duplicates, task_words

REPO = Path(__file__).resolve().parents[1]
BUILTIN_IDS = ("k8s-002", "k8s-005", "cicd-001", "cicd-003", "sec-001", "sec-002", "obs-001", "obs-002")


def user_tasks(count: int = len(BUILTIN_IDS), prefix: str = "team") -> list[dict]:
    """Built-in tasks renamed, without rubric and mutants: what a team's own file looks like."""
    pool = {t.id: t for t in tasks.load_tasks()}
    out = []
    for task_id in BUILTIN_IDS[:count]:
        data = pool[task_id].to_dict()
        data.pop("rubric", None)
        data.pop("mutants", None)
        out.append({**data, "id": f"{prefix}-{task_id}"})
    return out


@pytest.fixture
def team_file(tmp_path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(user_tasks(), sort_keys=False), encoding="utf-8")
    return path


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**__import__("os").environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})


# --- loading -------------------------------------------------------------------------------------


def test_a_folder_of_yaml_and_jsonl_loads_in_file_order(tmp_path):
    rows = user_tasks(4)
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(rows[:2]), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows[2:]) + "\n\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a task file")
    loaded = load_sources([tmp_path])
    assert [t.id for t in loaded] == [r["id"] for r in rows]
    assert loaded[2].source == f"{tmp_path / 'b.jsonl'}:1" and loaded[3].source.endswith("b.jsonl:2")
    assert loaded[3].reference_answer == rows[3]["reference_answer"].strip()


@pytest.mark.parametrize("line, fragment", [
    ('{"id": "x-001", "type": "kubernets"}', "b.jsonl:2: task 'x-001': key 'type': unknown type 'kubernets'"),
    ('{"id": "x-001", "type": "kubernetes", "difficulty": "easy", "desc": "d", "expected_outputs": ["a"], '
     '"reference_answer": "r", "rubrik": []}', "b.jsonl:2: task 'x-001': unknown key 'rubrik'"),
    ('{"id": "x-001", oops}', "b.jsonl:2: not a JSON object"),
])
def test_a_bad_jsonl_line_is_named_by_file_line_task_and_key(tmp_path, line, fragment):
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(user_tasks(1)[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="b.jsonl:2"):
        load_sources([path])
    result = cli("tasks", "validate", "--tasks", str(path))
    assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [
    ("tasks", "list"), ("tasks", "stats"), ("tasks", "show", "team-k8s-002"),
    ("reward", "audit"), ("reward", "score", "--task", "team-k8s-002", "--answer", "-"),
    ("eval", "--local", "builtin:tiny"), ("train", "--mode", "test"),
])
def test_every_command_refuses_a_bad_task_file_in_one_line(tmp_path, team_file, command):
    rows = user_tasks()
    rows[1]["difficulty"] = "trivial"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(rows, sort_keys=False))
    result = cli(*command, "--tasks", str(bad), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {bad}:") and "key 'difficulty': 'trivial'" in line and "task 'team-" in line
    assert not (tmp_path / "runs").exists()  # train refused before any run folder
    missing = cli(*command, "--tasks", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "--tasks" in missing.stderr and "no such task file or folder" in missing.stderr


# --- the commands -----------------------------------------------------------------------------------


def test_tasks_list_show_stats_validate_read_the_users_file(team_file):
    listed = json.loads(cli("tasks", "list", "--tasks", str(team_file), "--json").stdout)
    assert sorted(t["id"] for t in listed) == sorted(f"team-{i}" for i in BUILTIN_IDS)
    assert {t["split"] for t in listed} == {"train", "val"}
    shown = json.loads(cli("tasks", "show", "team-sec-001", "--tasks", str(team_file), "--json").stdout)
    assert shown["source"].startswith(str(team_file)) and "rubric" not in shown
    stats = json.loads(cli("tasks", "stats", "--tasks", str(team_file), "--json").stdout)
    assert stats["total"] == len(BUILTIN_IDS) and stats["by_type"]["security"] == 2
    valid = cli("tasks", "validate", "--tasks", str(team_file))  # a user's file needs no rubric
    assert valid.returncode == 0 and f"ok: {len(BUILTIN_IDS)} tasks valid" in valid.stdout


def test_reward_score_and_audit_take_the_users_tasks(tmp_path, team_file):
    answer = tmp_path / "answer.md"
    pool = {t.id: t for t in tasks.load_tasks()}
    answer.write_text(pool["sec-001"].reference_answer)
    scored = cli("reward", "score", "--tasks", str(team_file), "--task", "team-sec-001", "--answer", str(answer), "--json")
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["final_reward"] > 0.3
    unknown = cli("reward", "score", "--tasks", str(team_file), "--task", "sec-001", "--answer", str(answer))
    assert unknown.returncode == 2 and "no task with id 'sec-001'" in unknown.stderr  # only the given files count
    # audit covers the tasks with a rubric: a user's file with one built-in task (rubric and mutants kept)
    graded = tmp_path / "graded.yaml"
    graded.write_text(yaml.safe_dump([{**pool["k8s-002"].to_dict(), "id": "team-graded"}, user_tasks(1)[0]]))
    audited = cli("reward", "audit", "--tasks", str(graded), "--json")
    report = json.loads(audited.stdout)
    assert [row["task"] for row in report["rows"]] == ["team-graded"] and report["total"] == 2


def test_eval_runs_on_the_users_tasks_and_resume_keeps_them(tmp_path, team_file, monkeypatch):
    from core.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--local", "builtin:tiny", "--tasks", str(team_file), "--split", "all", "--limit", "2",
                 "--max-tokens", "4", "-j", "1"]) == 0
    [path] = tmp_path.glob("eval_results_*.json")
    data = json.loads(path.read_text())
    assert data["task_ids"] == [f"team-{i}" for i in BUILTIN_IDS[:2]]
    assert data["settings"]["tasks"] == [str(team_file)]
    from core.agent.evaluate import EvalSettings, _resumed
    from core.agent.results import ResultsFile

    resumed, _ = _resumed(EvalSettings(resume=True), ResultsFile.load(path))
    assert resumed.tasks == (str(team_file),)  # a resumed eval finds its tasks in the file it started with


def test_eval_val_split_of_a_run_is_the_runs_own(team_file):
    from core.agent.evaluate import select_tasks
    from core.training.config import load_config

    cfg = load_config("ci-fast", None, [f"devops.tasks=[{{path: {team_file}}}]"])
    _, val, _ = config_split(cfg.devops)
    assert [t.id for t in select_tasks("val", devops=cfg.devops)] == [t.id for t in val]
    assert all(t.id.startswith("team-") for t in val)


# --- training: both backends' data paths, weights, the run's record -----------------------------------


def test_weights_repeat_a_sources_training_tasks_not_its_validation(tmp_path):
    first, second = tmp_path / "first.yaml", tmp_path / "second.jsonl"
    rows = user_tasks()
    first.write_text(yaml.safe_dump(rows[:4]))
    second.write_text("\n".join(json.dumps({**r, "id": r["id"] + "-b"}) for r in rows[4:]))
    devops = SimpleNamespace(tasks=[{"path": str(first), "weight": 3}, {"path": str(second)}], val_fraction=0.2, seed=0,
                             dedup_threshold=0, holdout=[])
    train, val, split = config_split(devops)
    counts = {t.id: sum(1 for x in train if x.id == t.id) for t in split.train}
    assert counts == {t.id: (3 if t.source.startswith(str(first)) else 1) for t in split.train}
    assert len(val) == len({t.id for t in val}) and val == split.val


def test_verl_parquet_rows_come_from_the_configs_task_files(tmp_path, team_file):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from core.training.config import load_config
    from core.training.verl_backend.data import export_parquet, split_rows

    cfg = load_config("ci-fast", None, [f"devops.tasks=[{{path: {team_file}, weight: 2}}]"])
    paths = export_parquet(cfg, tmp_path / "data")
    stored = json.loads(paths["tasks"].read_text())
    assert set(stored) == {f"team-{i}" for i in BUILTIN_IDS}  # each task once, whatever its weight
    train = pq.read_table(paths["train"]).to_pylist()
    val = pq.read_table(paths["val"]).to_pylist()
    train_ids = [r["extra_info"]["task_id"] for r in train]
    assert len(train_ids) == 2 * len(set(train_ids)) and not set(train_ids) & {r["extra_info"]["task_id"] for r in val}
    assert split_rows(cfg)["train"][0]["extra_info"]["task_id"].startswith("team-")


def test_torch_training_on_a_users_file_records_it(tmp_path, team_file):
    """`train --mode test --tasks F`: the torch loop trains on F's tasks, meta.json records F's sha256."""
    run = tmp_path / "run"
    result = cli("train", "--mode", "test", "--tasks", str(team_file), "--run-dir", str(run), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["task_files"] == [{"path": str(team_file.resolve()), "tasks": len(BUILTIN_IDS), "weight": 1,
                                   "sha256": hashlib.sha256(team_file.read_bytes()).hexdigest()}]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["devops"]["tasks"] == [{"path": str(team_file), "weight": 1}]
    sampled = {s["task_id"] for line in (run / "samples.jsonl").read_text().splitlines() for s in json.loads(line)["samples"]}
    assert sampled and all(task_id.startswith("team-") for task_id in sampled)
    log = (run / "train.log").read_text()
    assert "4 train / 4 val tasks" in log


def test_the_builtin_run_records_every_file_of_the_task_set():
    records = task_file_records(None)
    assert [Path(r["path"]).name for r in records] == sorted(p.name for p in tasks.DATA_DIR.glob("*.yaml"))
    assert sum(r["tasks"] for r in records) == len(tasks.load_tasks())


def test_a_resume_with_changed_task_files_warns_and_records_them(tmp_path, team_file):
    from core.cli.train_cmd import _note_task_changes
    from core.runs import RunDirectory
    from core.training.config import load_config

    run = RunDirectory.create(tmp_path, mode="test", backend="torch", config=load_config("ci-fast"), run_id="r1")
    try:
        run.update_meta(task_files=task_file_records([team_file]))
        team_file.write_text(team_file.read_text() + "\n")
        tasks._load_cached.cache_clear()
        now = task_file_records([team_file])
        _note_task_changes(run, now)
        assert run.meta()["task_files"] == now
        events = [json.loads(line) for line in run.events_path.read_text().splitlines()]
        assert events[-1]["event"] == "warning" and events[-1]["message"] == "task files changed since the run started"
    finally:
        run.release_lock()


def test_config_key_refuses_a_bad_source():
    from core.training.config import load_config

    for override, fragment in (("devops.tasks=[{path: x, weight: 0}]", "weight"),
                               ("devops.tasks=[{paht: x}]", "paht"), ("devops.dedup_threshold=1.5", "dedup_threshold")):
        with pytest.raises(UserError, match=fragment):
            load_config("ci-fast", None, [override])


# --- the split without leaks ------------------------------------------------------------------------


def test_no_near_duplicate_pair_crosses_the_builtin_split():
    pool = tasks.load_tasks()
    split = leak_free_split(pool, 0.2, 0)
    assert split.pairs and split.crossing() == []
    train_ids = {t.id for t in split.train}
    plain_train, _ = tasks.split_tasks(pool, 0.2, 0)
    plain_ids = {t.id for t in plain_train}
    assert [p for p in split.pairs if (p[0] in plain_ids) != (p[1] in plain_ids)]  # the plain split leaked
    assert {"k8s-003", "rel-003"} <= train_ids or not {"k8s-003", "rel-003"} & train_ids  # the issue's own example
    for seed in range(5):  # and for other seeds
        assert leak_free_split(pool, 0.2, seed).crossing() == []


def test_lsh_finds_every_pair_the_exact_comparison_finds():
    pool = tasks.load_tasks()
    words = {t.id: task_words(t) for t in pool}
    exact = sorted((a.id, b.id) for a, b in itertools.combinations(pool, 2)
                   if jaccard(words[a.id], words[b.id]) >= DEDUP_THRESHOLD)
    assert sorted((a, b) for a, b, _ in near_duplicates(pool)) == exact


def _task(task_id: str, task_type: str, desc: str) -> tasks.Task:
    return tasks.Task(id=task_id, type=task_type, difficulty="easy", desc=desc, expected_outputs=("a",),
                      source=f"/x/{task_type}.yaml:1")


def test_near_duplicates_of_two_types_land_on_one_side():
    filler = [_task(f"k8s-{i:03d}", "kubernetes", f"unique words number {i} alpha{i} beta{i} gamma{i}") for i in range(5)]
    filler += [_task(f"rel-{i:03d}", "reliability", f"other words count {i} delta{i} eps{i} zeta{i}") for i in range(5)]
    twin_a = _task("k8s-900", "kubernetes", "Add a PodDisruptionBudget and topology spread constraints to checkout")
    twin_b = _task("rel-900", "reliability", "Add a PodDisruptionBudget and topology spread constraints to checkout now")
    for seed in range(20):
        split = leak_free_split([*filler, twin_a, twin_b], 0.3, seed)
        assert ("k8s-900", "rel-900", pytest.approx(jaccard(task_words(twin_a), task_words(twin_b)))) in split.pairs
        assert split.crossing() == []
        assert len(split.val) >= 2  # the group counts towards the share; it does not empty validation
    off = leak_free_split([*filler, twin_a, twin_b], 0.3, 0, threshold=0)
    assert off.pairs == [] and (off.train, off.val) == tasks.split_tasks([*filler, twin_a, twin_b], 0.3, 0)


def test_holdout_of_a_type_or_a_file_sends_it_whole_to_validation(tmp_path):
    pool = tasks.load_tasks()
    split = leak_free_split(pool, 0.2, 0, holdout=["type:networking"])
    val_ids = {t.id for t in split.val}
    assert {t.id for t in pool if t.type == "networking"} <= val_ids
    assert not any(t.type == "networking" for t in split.train) and split.crossing() == []
    assert {"k8s-006", "sec-010"} <= set(split.held_out)  # near-duplicates of networking tasks go with them
    ci_file = tasks.DATA_DIR / "ci_cd.yaml"
    by_file = leak_free_split(pool, 0.0, 0, holdout=[f"file:{ci_file}"])
    assert {t.id for t in by_file.val} == {t.id for t in pool if t.type == "ci_cd"} | set(by_file.held_out)
    for bad, fragment in (("networking", "write type:NAME"), ("type:netwrking", "did you mean 'networking'"),
                          (f"file:{tmp_path / 'x.yaml'}", "no task comes from that file")):
        with pytest.raises(UserError, match=fragment):
            leak_free_split(pool, 0.2, 0, holdout=[bad])
    stats = json.loads(cli("tasks", "stats", "--holdout", "type:networking", "--json").stdout)
    assert len(stats["held_out"]) == len(split.held_out) and stats["near_duplicates"]["across_split"] == 0


def test_stats_reports_pairs_threshold_and_groups():
    result = cli("tasks", "stats")
    assert result.returncode == 0
    assert f"near-duplicates (word-set similarity >= {DEDUP_THRESHOLD})" in result.stdout
    assert "k8s-003  rel-003" in result.stdout and "(0 across the split)" in result.stdout
    off = json.loads(cli("tasks", "stats", "--dedup-threshold", "0", "--json").stdout)
    assert off["near_duplicates"]["pairs"] == [] and off["near_duplicates"]["threshold"] == 0


# --- docs/tasks.md's worked example ------------------------------------------------------------------


def test_the_docs_example_file_loads_validates_and_scores():
    from core.rewards import score

    example = REPO / "docs" / "examples" / "team-tasks.yaml"
    assert example.name in (REPO / "docs" / "tasks.md").read_text()
    loaded = {t.id: t for t in load_sources([example])}
    assert set(loaded) == {"team-redis-pdb", "team-backup-check"}
    assert loaded["team-redis-pdb"].rubric and not loaded["team-backup-check"].rubric  # with and without a rubric
    assert tasks.validate_task_files([example]) == []
    result = score(loaded["team-redis-pdb"].reference_answer, loaded["team-redis-pdb"])
    assert result.rubric["score"] is not None and result.final_reward > score("Use a PDB.", loaded["team-redis-pdb"]).final_reward
