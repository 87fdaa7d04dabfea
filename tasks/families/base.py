"""Task families: a template with typed parameters and a deterministic sampler.

An instance is `f(family, seed, index)`: every parameter's value comes from a SHA-256 hash of
(family id, seed, index, parameter name), never from a random generator's state, so adding a family, a parameter
or a Python version does not move the values of the others. Each instance is a normal `tasks.Task` whose prompt,
rubric, reference answer and mutants are written against its own values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError, did_you_mean

INSTANCE_PREFIX = "fam"


def draw(family_id: str, seed: int, index: int, name: str) -> int:
    """A 64-bit integer fixed by (family id, seed, index, parameter name): the sampler's only source of values."""
    digest = hashlib.sha256(f"{family_id}\x1f{seed}\x1f{index}\x1f{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class Choice:
    """One of a fixed list of values (names, versions, image tags, schedules)."""

    options: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.options or len(set(map(repr, self.options))) != len(self.options):
            raise ValueError(f"Choice needs distinct options, got {self.options!r}")

    def size(self) -> int:
        return len(self.options)

    def pick(self, number: int) -> Any:
        return self.options[number % len(self.options)]

    def contains(self, value: Any) -> bool:
        return value in self.options


@dataclass(frozen=True)
class IntRange:
    """An integer in [low, high] on a grid of `step` (ports, replica counts, thresholds, days)."""

    low: int
    high: int
    step: int = 1

    def __post_init__(self) -> None:
        if self.step <= 0 or self.high < self.low or (self.high - self.low) % self.step:
            raise ValueError(f"IntRange({self.low}, {self.high}, {self.step}): high - low must be a multiple of step > 0")

    def size(self) -> int:
        return (self.high - self.low) // self.step + 1

    def pick(self, number: int) -> int:
        return self.low + (number % self.size()) * self.step

    def contains(self, value: Any) -> bool:
        return isinstance(value, int) and self.low <= value <= self.high and (value - self.low) % self.step == 0


Param = Choice | IntRange


@dataclass(frozen=True)
class Family:
    """A task template: `build(values)` returns the task's desc, expected_outputs, reference_answer, rubric and
    mutants for one set of parameter values (a mapping of parameter name to value)."""

    id: str
    type: str
    difficulty: str
    summary: str
    params: Mapping[str, Param]
    build: Callable[[dict[str, Any]], dict[str, Any]] = field(repr=False)
    drill: bool = False  # the answer is one small artifact checked exactly against the values

    def space(self) -> int:
        """How many parameter combinations there are (an upper bound on distinct prompts)."""
        total = 1
        for param in self.params.values():
            total *= param.size()
        return total

    def sample(self, seed: int = 0, index: int = 0) -> dict[str, Any]:
        """The parameter values of instance `index` for `seed`."""
        if seed < 0 or index < 0:
            raise UserError(f"family '{self.id}': seed and index must be >= 0 (got seed {seed}, index {index})")
        return {name: param.pick(draw(self.id, seed, index, name)) for name, param in self.params.items()}

    def instance(self, seed: int = 0, index: int = 0):
        """Instance `index` for `seed`, as a `tasks.Task`."""
        from tasks import Task

        values = self.sample(seed, index)
        body = self.build(values)
        return Task(
            id=instance_id(self.id, seed, index), type=self.type, difficulty=self.difficulty,
            desc=" ".join(body["desc"].split()), expected_outputs=tuple(body["expected_outputs"]),
            reference_answer=body["reference_answer"].strip(), source=f"family:{self.id}?seed={seed}&index={index}",
            rubric=tuple(body["rubric"]), mutants=tuple(body["mutants"]),
        )


def instance_id(family_id: str, seed: int, index: int) -> str:
    """`fam-<family>-s<seed>-<index>`: the task id of an instance (unique over families, seeds and indexes)."""
    return f"{INSTANCE_PREFIX}-{family_id}-s{seed}-{index}"


# ---- helpers the families' builders share ---------------------------------------------------------------

def criterion(cid: str, description: str, check: Any, weight: float = 1.0, decisive: bool = False) -> dict[str, Any]:
    """One rubric criterion (docs/reward.md, 'Writing a rubric')."""
    out: dict[str, Any] = {"id": cid, "description": description, "weight": weight, "check": check}
    if decisive:
        out["decisive"] = True
    return out


def mutant(mid: str, why: str, *edits: tuple[str, str]) -> dict[str, Any]:
    """One mutant of the reference: edits applied in order, each at its first occurrence (tasks/mutants.py)."""
    return {"id": mid, "why": why, "edit": [{"find": find, "replace": replace} for find, replace in edits]}


def block(language: str, body: str) -> str:
    """A fenced code block."""
    return f"```{language}\n{body.strip()}\n```"


def other(value: Any, options: Any) -> Any:
    """A value of `options` that is not `value` (for a mutant that uses a wrong value of the same kind)."""
    for option in options:
        if option != value:
            return option
    raise ValueError(f"no other value than {value!r}")


def lookup(families: Mapping[str, Family], family_id: str) -> Family:
    if family_id not in families:
        raise UserError(f"no task family '{family_id}'{did_you_mean(family_id, list(families))} "
                        "(see 'devops-rl tasks families list')")
    return families[family_id]
