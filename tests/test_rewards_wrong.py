"""Expert-looking answers with one wrong decision (tests/fixtures/rewards/wrong, `<task-id>--<label>.md`, first line
an HTML comment naming the mistake): each must score at most 0.5 and well below its task's reference, or the
trained policy is paid for an outage as much as for the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import tasks
from core.rewards import score_batch

WRONG = sorted((Path(__file__).parent / "fixtures" / "rewards" / "wrong").glob("*--*.md"))
CEILING = 0.5  # the audit's mutant ceiling (core/rewards/audit.py)
MARGIN = 0.25  # and at least this far below the reference


def _answer(path: Path) -> str:
    comment, _, answer = path.read_text(encoding="utf-8").partition("\n")
    assert comment.startswith("<!-- wrong:") and comment.rstrip().endswith("-->"), f"{path.name}: name the mistake"
    return answer


@pytest.fixture(scope="module")
def scored() -> dict[str, tuple[float, float]]:
    """file stem -> (its score, its task's reference score)."""
    by_id = {task.id: task for task in tasks.load_tasks()}
    pairs = [(_answer(path), by_id[path.stem.split("--")[0]]) for path in WRONG]
    references = [(task.reference_answer, task) for _, task in pairs]
    results = score_batch(pairs + references)
    return {path.stem: (results[i].final_reward, results[len(pairs) + i].final_reward) for i, path in enumerate(WRONG)}


def test_the_held_out_set_covers_every_task_type():
    types = {tasks.get_task(path.stem.split("--")[0]).type for path in WRONG}
    assert len(WRONG) >= 30 and types == set(tasks.TASK_TYPES)


@pytest.mark.parametrize("stem", [path.stem for path in WRONG])
def test_one_wrong_decision_costs_the_answer_its_reward(scored, stem):
    wrong, reference = scored[stem]
    assert wrong <= CEILING, f"{stem}: {wrong:.3f} > {CEILING}"
    assert wrong <= reference - MARGIN, f"{stem}: {wrong:.3f} not {MARGIN} below the reference's {reference:.3f}"


def test_a_built_in_task_needs_a_decisive_criterion_and_mutants(tmp_path, monkeypatch):
    """The task set's own files (tasks/data) are held to the format; a user's file is not."""
    task = tasks.get_task("k8s-003").to_dict()
    plain = {**task, "rubric": [{key: value for key, value in c.items() if key != "decisive"} for c in task["rubric"]]}
    plain.pop("mutants", None)
    (tmp_path / "data").mkdir()
    built_in = tmp_path / "data" / "kubernetes.yaml"
    built_in.write_text(yaml.safe_dump([plain], sort_keys=False), encoding="utf-8")
    users = tmp_path / "mine.yaml"
    users.write_text(yaml.safe_dump([plain], sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(tasks, "DATA_DIR", tmp_path / "data")
    problems = tasks.validate_task_files([built_in])
    assert any("no criterion is 'decisive: true'" in p for p in problems)
    assert any("key 'mutants': has 0, needs at least 3" in p for p in problems)
    assert not [p for p in tasks.validate_task_files([users]) if "decisive" in p or "mutants" in p]
