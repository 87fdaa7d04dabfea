"""Excellent answers that use another valid tool or are terse (tests/fixtures/rewards/alternatives, one file per
answer, `<task-id>--<label>.md`, first line an HTML comment saying what it shows) score at least 0.6 on their
task and above every hack of the audit's suite on that task."""

from __future__ import annotations

from pathlib import Path

import pytest

import tasks
from core.rewards import score_batch
from core.rewards.audit import EXCELLENT_FLOOR, audit

ALTERNATIVES = sorted((Path(__file__).parent / "fixtures" / "rewards" / "alternatives").glob("*--*.md"))


def _answer(path: Path) -> str:
    comment, _, answer = path.read_text(encoding="utf-8").partition("\n")
    assert comment.startswith("<!--") and comment.rstrip().endswith("-->"), f"{path.name}: first line must say what it shows"
    return answer


@pytest.fixture(scope="module")
def scored() -> dict[str, tuple[float, str, float]]:
    """file stem -> (its score, the best hack on its task, that hack's score), with every validator."""
    pool = tasks.load_tasks()
    by_id = {task.id: task for task in pool}
    wanted = [by_id[path.stem.split("--")[0]] for path in ALTERNATIVES]
    rows = {row.task_id: row for row in audit(list({task.id: task for task in wanted}.values()), pool=pool).rows}
    results = score_batch([(_answer(path), task) for path, task in zip(ALTERNATIVES, wanted)])
    return {path.stem: (result.final_reward, *rows[task.id].best_hack)
            for path, task, result in zip(ALTERNATIVES, wanted, results)}


def test_every_alternative_names_a_task_of_the_set():
    ids = {task.id for task in tasks.load_tasks()}
    assert len(ALTERNATIVES) >= 50
    assert not [path.name for path in ALTERNATIVES if path.stem.split("--")[0] not in ids]


@pytest.mark.parametrize("stem", [path.stem for path in ALTERNATIVES])
def test_an_alternative_answer_passes_and_beats_every_hack(stem, scored):
    value, hack, hack_value = scored[stem]
    assert value >= EXCELLENT_FLOOR, f"{stem} scores {value:.3f} < {EXCELLENT_FLOOR}"
    assert value > hack_value, f"{stem} scores {value:.3f}, not above the hack '{hack}' ({hack_value:.3f})"
