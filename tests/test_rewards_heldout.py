"""Held-out check of the reward on tasks it was never calibrated on (tests/fixtures/rewards), with rubrics
written from the task alone: expert > solid > generic >= poor on every task, and keyword salads below the
solid answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tasks
from core.rewards import score
from core.rewards.checks.signals import rubric_keywords

FIXTURES = Path(__file__).parent / "fixtures" / "rewards"
LEVELS = ("expert", "solid", "generic", "poor")
TASK_DIRS = sorted(p for p in FIXTURES.iterdir() if (p / "task.yaml").is_file())


def test_there_are_at_least_six_new_tasks_none_of_them_in_the_task_set():
    assert len(TASK_DIRS) >= 6
    known = {t.id for t in tasks.load_tasks()}
    ids = [tasks.load_task_file(d / "task.yaml").id for d in TASK_DIRS]
    assert not known & set(ids)
    assert len({tasks.load_task_file(d / "task.yaml").type for d in TASK_DIRS}) >= 6


@pytest.mark.parametrize("task_dir", TASK_DIRS, ids=lambda p: p.name)
def test_expert_beats_solid_beats_generic_beats_poor(task_dir):
    task = tasks.load_task_file(task_dir / "task.yaml")
    rewards = {level: score((task_dir / f"{level}.md").read_text(encoding="utf-8"), task).final_reward for level in LEVELS}
    assert rewards["expert"] > rewards["solid"] > rewards["generic"] >= rewards["poor"], rewards
    assert rewards["expert"] >= 0.7 and rewards["solid"] >= 0.5, rewards
    assert rewards["generic"] <= 0.3, rewards  # generic advice does not solve the task: close to nothing


@pytest.mark.parametrize("task_dir", TASK_DIRS, ids=lambda p: p.name)
def test_keyword_salads_rank_below_the_solid_answer(task_dir):
    task = tasks.load_task_file(task_dir / "task.yaml")
    solid = score((task_dir / "solid.md").read_text(encoding="utf-8"), task).final_reward
    terms = rubric_keywords() + list(task.expected_outputs)
    salads = {
        "comma list": ", ".join(terms),
        "bullets": "\n".join(f"- {t}" for t in terms),
        "sentences": " ".join(f"We use {a} and {b} for the {c}." for a, b, c in zip(terms[::3], terms[1::3], terms[2::3])),
        "solid answer plus salad": (task_dir / "generic.md").read_text(encoding="utf-8") + "\n\n" + ", ".join(terms),
    }
    for name, salad in salads.items():
        assert score(salad, task).final_reward < solid, name
