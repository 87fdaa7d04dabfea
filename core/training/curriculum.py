"""Curricula (`devops.curriculum`): training in stages, each a weighted mix of task families, drills, the
hand-written tasks and task files, switched at set steps; without one, a single stage of `devops.tasks`.

Validation is always the usual split's validation side (`devops.tasks`, or the built-in tasks), so a curriculum
changes what the policy trains on, never what it is measured on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import UserError

BUILTIN = "builtin"  # the training side of the usual split: devops.tasks, or tasks/data when that is empty
DRILLS = "drills"
FAMILIES = "families"
STAGE_KEY = "training/curriculum_stage"  # the metric: the stage (1-based) that drew the step's prompts
STAGE_EVENT = "curriculum_stage"  # the event written when a stage begins: step, stage, of, mix, tasks


@dataclass(frozen=True)
class Stage:
    """One stage: its steps (1-based, inclusive; `last` None = until the run ends), its mix and its tasks."""

    index: int
    first: int
    last: int | None
    mix: tuple[dict[str, Any], ...]  # {"source", "weight", "tasks"}: what each source gave
    tasks: tuple  # the stage's training tasks, each repeated by its source's weight

    def label(self) -> str:
        """`drills x2 + builtin`: the mix in a few words (the cockpit and the log show it)."""
        return " + ".join(m["source"] + (f" x{m['weight']}" if m["weight"] != 1 else "") for m in self.mix)

    def record(self) -> dict[str, Any]:
        """What meta.json keeps of the stage."""
        return {"stage": self.index + 1, "first_step": self.first, "last_step": self.last, "mix": list(self.mix),
                "tasks": len(self.tasks)}


def source_tasks(source: str, *, instances: int, seed: int, base_train: Sequence, key: str) -> list:
    """The tasks one mix entry names (before its weight); UserError naming `key` for a source that gives none."""
    from tasks.families import families
    from tasks.families import instances as family_instances

    kind, sep, names = source.partition(":")
    if source == BUILTIN:
        found = list(base_train)
    elif source == DRILLS:
        found = family_instances([f.id for f in families(drills_only=True)], seed=seed, per_family=instances)
    elif source == FAMILIES:
        found = family_instances([f.id for f in families()], seed=seed, per_family=instances)
    elif kind == FAMILIES and sep:
        ids = [name.strip() for name in names.split(",") if name.strip()]
        found = family_instances(ids, seed=seed, per_family=instances) if ids else []
    else:
        from tasks.sources import load_sources, option_paths

        paths = option_paths([source], option=key)  # UserError: "<key> PATH: no such task file or folder"
        try:
            found = load_sources(paths)
        except UserError as exc:
            raise UserError(f"{key}: {exc.message}") from None
    if not found:
        raise UserError(f"{key}: {source!r} gives no training tasks; one of {_sources_hint()}")
    return found


def _sources_hint() -> str:
    from core.training.config.schema import CURRICULUM_SOURCES

    return CURRICULUM_SOURCES


def training_stages(devops, tasks: Sequence | None = None) -> tuple[list[Stage], list, Any]:
    """(stages, validation tasks, the Split) for a config's `devops` section. Without a curriculum: one stage of
    `devops.tasks`'s weighted training split, to the end of the run. A curriculum's sources never give a task of
    the validation side (a task file may hold some: they are dropped)."""
    from tasks.sources import config_split

    train, val, split = config_split(devops, tasks)
    curriculum = getattr(devops, "curriculum", None) or []
    if not curriculum:
        mix = ({"source": "tasks", "weight": 1, "tasks": len(train)},)
        return [Stage(0, 1, None, mix, tuple(train))], val, split
    held = {t.id for t in val}
    stages, first = [], 1
    for i, stage in enumerate(curriculum):
        chosen, mix = [], []
        for j, entry in enumerate(stage.mix):
            key = f"devops.curriculum.{i}.mix.{j}.source"
            found = [t for t in source_tasks(entry.source, instances=entry.instances, seed=devops.seed,
                                             base_train=_distinct(train), key=key) if t.id not in held]
            if not found:
                raise UserError(f"{key}: {entry.source!r}: every task is on the validation side; name other tasks")
            chosen.extend(t for t in found for _ in range(entry.weight))
            mix.append({"source": entry.source, "weight": entry.weight, "tasks": len(found)})
        last = first + stage.steps - 1 if stage.steps else None
        stages.append(Stage(i, first, last, tuple(mix), tuple(chosen)))
        first = (last or first) + 1
    return stages, val, split


def _distinct(tasks: Sequence) -> list:
    """Tasks once each (`devops.tasks` weights repeat them; a curriculum's own weights replace those)."""
    seen, out = set(), []
    for task in tasks:
        if task.id not in seen:
            seen.add(task.id)
            out.append(task)
    return out


def distinct_tasks(stages: Sequence[Stage]) -> list:
    """Every stage's tasks once each, in stage order (the SFT warm-start and verl's task table read these)."""
    return _distinct([t for stage in stages for t in stage.tasks])


def planned_steps(cfg, stages: Sequence[Stage]) -> int:
    """The run's steps: trainer.total_training_steps; else every stage's steps when the last has them; else the
    earlier stages' steps and total_epochs passes over the last stage's tasks (as verl's drop-last loader counts)."""
    if cfg.trainer.total_training_steps:
        return cfg.trainer.total_training_steps
    last = stages[-1]
    if last.last is not None:
        return last.last
    return last.first - 1 + max(1, len(last.tasks) // cfg.data.train_batch_size) * cfg.trainer.total_epochs


def stage_at(stages: Sequence[Stage], step: int) -> Stage:
    """The stage that draws the prompts of `step` (the last one past its own end)."""
    for stage in stages:
        if stage.last is None or step <= stage.last:
            return stage
    return stages[-1]


class StagedPromptStream:
    """The training prompts of each stage in turn: a `PromptStream` over the current stage, replaced by the next
    stage's (from its own start) when a step passes the boundary. Its state (stage, epoch, offset) is saved in
    checkpoints, so a resumed run draws the same prompts."""

    def __init__(self, stages: Sequence[Stage], records: Sequence[Sequence[dict]], *, shuffle: bool, seed: int,
                 stage: int = 0, epoch: int = 0, offset: int = 0) -> None:
        self.stages, self.records, self.shuffle, self.seed = list(stages), list(records), shuffle, seed
        self.stage = min(stage, len(self.stages) - 1)
        self._stream = self._open(self.stage, epoch, offset)

    def _open(self, stage: int, epoch: int, offset: int):
        from core.training.batch import PromptStream

        seed = self.seed if stage == 0 else f"{self.seed}/stage{stage}"  # stage 0 deals as a run without stages
        return PromptStream(list(self.records[stage]), shuffle=self.shuffle, seed=seed, epoch=epoch, offset=offset)

    def at_step(self, step: int) -> Stage | None:
        """Move to the stage of `step`; the new Stage when one begins here, else None."""
        index = stage_at(self.stages, step).index
        if index == self.stage:
            return None
        self.stage = index
        self._stream = self._open(index, 0, 0)
        return self.stages[index]

    @property
    def epoch(self) -> int:
        return self._stream.epoch

    def take(self, count: int) -> list[dict]:
        return self._stream.take(count)

    def state(self) -> dict:
        return {"stage": self.stage, **self._stream.state()}
