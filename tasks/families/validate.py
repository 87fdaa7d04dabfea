"""Checks of a family on a sample of its instances: each instance passes the task files' own validation (schema,
rubric, decisive criteria, mutants), its reference answer scores >= REFERENCE_MIN and every mutant <= MUTANT_MAX."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.families.base import Family

REFERENCE_MIN = 0.7
MUTANT_MAX = 0.5


@dataclass
class FamilyReport:
    """What validating one family on a sample found; `ok` when there are no problems."""

    family: str
    checked: int = 0
    reference_min: float | None = None
    mutant_max: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "checked": self.checked, "ok": self.ok, "reference_min": self.reference_min,
                "mutant_max": self.mutant_max, "problems": list(self.problems)}


def write_task_file(tasks: Iterable[Any], path: Path | str) -> Path:
    """The tasks as a task YAML file (`tasks/data` format), e.g. for `load_tasks([path])`."""
    import yaml

    path = Path(path)
    path.write_text(yaml.safe_dump([task.to_dict() for task in tasks], sort_keys=False, allow_unicode=True,
                                   width=1000), encoding="utf-8")
    return path


def distinct_prompts(family: Family, seed: int = 0, limit: int = 400) -> int:
    """How many distinct prompts the first `limit` instances of `family` (for `seed`) have."""
    return len({family.instance(seed, index).desc for index in range(min(limit, family.space()))})


def _file_problems(tasks: list[Any]) -> list[str]:
    """The task-file validation's problems for these instances, plus the task set's own requirements (a decisive
    criterion and MUTANTS_REQUIRED mutants), which `validate_task_files` only enforces inside tasks/data."""
    from tasks import MUTANTS_REQUIRED, validate_task_files

    with tempfile.TemporaryDirectory(prefix="devops-rl-family-") as folder:
        path = write_task_file(tasks, Path(folder) / "instances.yaml")
        problems = [line.replace(str(path), "instances") for line in validate_task_files([path])]
    for task in tasks:
        if not any(c.get("decisive") is True for c in task.rubric):
            problems.append(f"{task.id}: no decisive criterion")
        if len(task.mutants) < MUTANTS_REQUIRED:
            problems.append(f"{task.id}: {len(task.mutants)} mutants, needs {MUTANTS_REQUIRED}")
    return problems


def validate_family(family: Family, *, seed: int = 0, sample: int = 4, validators: bool = True) -> FamilyReport:
    """Check instances 0..sample-1 of `family` for `seed` (see the module's docstring)."""
    from core.rewards import score_batch
    from core.rewards.audit import apply_mutant

    report = FamilyReport(family.id)
    tasks = []
    for index in range(sample):
        try:
            tasks.append(family.instance(seed, index))
        except Exception as exc:  # a template bug: name the instance, keep checking the others
            report.problems.append(f"{family.id} seed {seed} index {index}: cannot build the instance: {exc!r}")
    if not tasks:
        return report
    report.problems.extend(_file_problems(tasks))
    if report.problems:
        return report
    pairs: list[tuple[str, Any]] = []
    for task in tasks:
        pairs.append((task.reference_answer, task))
        pairs.extend((apply_mutant(task.reference_answer, m), task) for m in task.mutants)
    results = iter(score_batch(pairs, validators=validators))
    references, mutants = [], []
    for task in tasks:
        reference = next(results).final_reward
        references.append(reference)
        if reference < REFERENCE_MIN:
            report.problems.append(f"{task.id}: the reference scores {reference:.3f} < {REFERENCE_MIN}")
        for m in task.mutants:
            value = next(results).final_reward
            mutants.append(value)
            if value > MUTANT_MAX:
                report.problems.append(f"{task.id}: mutant '{m['id']}' scores {value:.3f} > {MUTANT_MAX}")
    report.checked = len(tasks)
    report.reference_min = round(min(references), 4)
    report.mutant_max = round(max(mutants), 4) if mutants else None
    return report
