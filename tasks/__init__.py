"""The DevOps task set (`tasks/data/*.yaml`): schema validation, the train/validation split and the
training record every backend consumes.

Loading is safe (PyYAML's SafeLoader only) and every problem names the file, the line and the key.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.errors import UserError, did_you_mean

DATA_DIR = Path(__file__).with_name("data")

TASK_TYPES: tuple[str, ...] = (
    "ci_cd",
    "containers",
    "kubernetes",
    "infrastructure_as_code",
    "observability",
    "security",
    "incident_response",
    "reliability",
    "cost_optimization",
    "database_ops",
    "networking",
)
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")
REQUIRED_KEYS = ("id", "type", "difficulty", "desc", "expected_outputs", "reference_answer")
ALLOWED_KEYS = frozenset((*REQUIRED_KEYS, "rubric", "mutants"))
# `tasks validate` requires a rubric on every task of the task set (tasks/data); a user's own task files
# and a single --task-file may leave it out (the reward then falls back to the six dimensions).
RUBRIC_REQUIRED = True
# ... and, with it, at least one decisive criterion and this many mutants of its reference (tasks/mutants.py).
MUTANTS_REQUIRED = 3  # every built-in task has decisive criteria and at least this many mutants of its reference
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
EXPECTED_OUTPUTS_RANGE = (3, 6)


@dataclass(frozen=True)
class Task:
    """One DevOps task: the prompt, what a good answer must contain, and a reference answer."""

    id: str
    type: str
    difficulty: str
    desc: str
    expected_outputs: tuple[str, ...]
    reference_answer: str | None = None
    source: str = ""
    # The grading criteria (see docs/reward.md, "Writing a rubric"); mappings as written in the file.
    rubric: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    # Edits of the reference that each break one decisive decision (tasks/mutants.py), as written in the file.
    mutants: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The task as its YAML mapping (without `source`)."""
        data: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "difficulty": self.difficulty,
            "desc": self.desc,
            "expected_outputs": list(self.expected_outputs),
        }
        if self.reference_answer is not None:
            data["reference_answer"] = self.reference_answer
        if self.rubric:
            import copy

            data["rubric"] = copy.deepcopy(list(self.rubric))
        if self.mutants:
            import copy

            data["mutants"] = copy.deepcopy(list(self.mutants))
        return data


class _Problems:
    """Collects `file:line: message` problems while a file is checked."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []  # valid, but probably not what the author meant

    def add(self, path: Path, line: int, message: str) -> None:
        self.lines.append(f"{_where(path, line)}: {message}")

    def warn(self, path: Path, line: int, message: str) -> None:
        self.warnings.append(f"{_where(path, line)}: {message}")


def _where(path: Path, line: int) -> str:
    return f"{path}:{line}" if line > 0 else str(path)


def _parse_yaml(path: Path, problems: _Problems):
    """Return (data, node) for a YAML file, or (None, None) after recording the problem."""
    from core.files import read_text
    from core.yamlfile import parse_yaml

    try:
        document = parse_yaml(read_text(path, "task file"), str(path))
    except UserError as exc:
        problems.lines.append(str(exc))
        return None, None
    if document.node is None:
        problems.add(path, 1, "the file is empty; write a list of tasks ('- id: ...')")
    return document.data, document.node


def _check_task(
    path: Path, data: Any, node: Any, problems: _Problems, *, require_reference: bool, strict_outputs: bool,
    require_rubric: bool = False,
) -> Task | None:
    """Validate one task mapping against the schema; returns the Task or None when it has problems."""
    start = len(problems.lines)
    line = node.start_mark.line + 1 if node is not None else 0
    if not isinstance(data, Mapping):
        problems.add(path, line, f"each task must be a mapping of {', '.join(REQUIRED_KEYS)}; got {type(data).__name__}")
        return None
    key_lines: dict[str, int] = {}
    for key_node, _ in getattr(node, "value", []):
        key = str(key_node.value)
        if key in key_lines:
            problems.add(path, key_node.start_mark.line + 1, f"key '{key}' appears twice in the same task; keep one")
        key_lines.setdefault(key, key_node.start_mark.line + 1)
    label = f"task '{data.get('id')}'" if isinstance(data.get("id"), str) else "task"
    for key in data:
        if key not in ALLOWED_KEYS:
            problems.add(
                path, key_lines.get(str(key), line),
                f"{label}: unknown key '{key}' (allowed: {', '.join((*REQUIRED_KEYS, 'rubric', 'mutants'))})"
                f"{did_you_mean(str(key), ALLOWED_KEYS)}",
            )
    required = REQUIRED_KEYS if require_reference else REQUIRED_KEYS[:-1]
    for key in required:
        if key not in data:
            problems.add(path, line, f"{label}: missing key '{key}'")

    def at(key: str) -> int:
        return key_lines.get(key, line)

    task_id, task_type, difficulty = data.get("id"), data.get("type"), data.get("difficulty")
    if "id" in data and not (isinstance(task_id, str) and ID_PATTERN.match(task_id)):
        problems.add(path, at("id"),
                     f"{label}: key 'id': {task_id!r} must be lowercase letters, digits, '-' or '_' (2-64 chars)")
    if "type" in data and task_type not in TASK_TYPES:
        problems.add(path, at("type"), f"{label}: key 'type': unknown type {task_type!r} (one of {', '.join(TASK_TYPES)})"
                                       f"{did_you_mean(str(task_type), TASK_TYPES)}")
    if "difficulty" in data and difficulty not in DIFFICULTIES:
        problems.add(path, at("difficulty"), f"{label}: key 'difficulty': {difficulty!r} must be one of {', '.join(DIFFICULTIES)}"
                                             f"{did_you_mean(str(difficulty), DIFFICULTIES)}")
    desc = data.get("desc")
    if "desc" in data and not (isinstance(desc, str) and desc.strip()):
        problems.add(path, at("desc"), f"{label}: key 'desc': must be a non-empty string (the prompt)")
    outputs = data.get("expected_outputs")
    if "expected_outputs" in data:
        low, high = EXPECTED_OUTPUTS_RANGE if strict_outputs else (1, 20)
        if not isinstance(outputs, list) or not all(isinstance(o, str) and o.strip() for o in outputs):
            problems.add(path, at("expected_outputs"), f"{label}: key 'expected_outputs': must be a list of non-empty strings")
        elif not low <= len(outputs) <= high:
            problems.add(path, at("expected_outputs"),
                         f"{label}: key 'expected_outputs': has {len(outputs)} items, needs {low} to {high}")
    reference = data.get("reference_answer")
    if reference is not None and not (isinstance(reference, str) and reference.strip()):
        problems.add(path, at("reference_answer"), f"{label}: key 'reference_answer': must be a non-empty string")
    rubric = data.get("rubric")
    if isinstance(reference, str) and not rubric:
        # the criteria come from the reference (core/rewards/rubric/derived.py): its free marks must make sense
        from core.rewards.rubric.derived import free_mark_problems

        for message in free_mark_problems(reference):
            problems.add(path, at("reference_answer"), f"{label}: key 'reference_answer': {message}")
    if "rubric" in data:
        _check_rubric(path, rubric, _value_node(node, "rubric"), at("rubric"), label, problems)
    elif require_rubric:
        problems.add(path, line, f"{label}: missing key 'rubric' (4-10 grading criteria; see docs/reward.md, 'Writing a rubric')")
    mutants = data.get("mutants")
    _check_mutants(path, data, _value_node(node, "mutants"), at("mutants"), label, problems, require_rubric)
    if len(problems.lines) > start:
        return None
    return Task(
        id=task_id,
        type=task_type,
        difficulty=difficulty,
        desc=desc.strip(),
        expected_outputs=tuple(o.strip() for o in outputs),
        reference_answer=reference.strip() if isinstance(reference, str) else None,
        source=f"{path}:{line}",
        rubric=tuple(rubric or ()),
        mutants=tuple(mutants or ()),
    )


def _value_node(node: Any, key: str) -> Any:
    for key_node, value_node in getattr(node, "value", []):
        if str(getattr(key_node, "value", "")) == key:
            return value_node
    return None


def _item_line(items: Any, index: int | None, line: int) -> int:
    """The line of item `index` of a YAML sequence node's items, else `line`."""
    return items[index].start_mark.line + 1 if index is not None and isinstance(items, list) and index < len(items) else line


def _check_mutants(path: Path, data: Mapping, node: Any, line: int, label: str, problems: _Problems,
                   required: bool) -> None:
    """The mutants' problems at their lines; the task set's tasks (required) need a decisive criterion and
    MUTANTS_REQUIRED mutants."""
    from tasks.mutants import mutant_problems

    mutants = data.get("mutants")
    items = getattr(node, "value", None) if node is not None else None
    reference = data.get("reference_answer")
    if "mutants" in data:
        for index, message in mutant_problems(mutants, reference.strip() if isinstance(reference, str) else None):
            problems.add(path, _item_line(items, index, line), f"{label}: key 'mutants': {message}")
    if not (required and MUTANTS_REQUIRED) or not isinstance(data.get("rubric"), list):
        return
    if not any(isinstance(c, Mapping) and c.get("decisive") is True for c in data["rubric"]):
        problems.add(path, line, f"{label}: key 'rubric': no criterion is 'decisive: true'; mark the ones that decide "
                                 "whether the answer works (docs/reward.md, 'Decisive criteria')")
    count = len(mutants) if isinstance(mutants, list) else 0
    if count < MUTANTS_REQUIRED:
        problems.add(path, line, f"{label}: key 'mutants': has {count}, needs at least {MUTANTS_REQUIRED} edits of the "
                                 "reference that each break one decisive decision (docs/reward.md, 'Mutants')")


def _check_rubric(path: Path, rubric: Any, node: Any, line: int, label: str, problems: _Problems) -> None:
    """The rubric's problems, and queries that can never match (warnings), each at the line of its criterion."""
    from core.rewards.rubric import rubric_problems, rubric_warnings

    items = getattr(node, "value", None) if node is not None else None

    def line_of(index: int | None) -> int:
        return _item_line(items, index, line)

    found = rubric_problems(rubric)
    for index, message in found:
        problems.add(path, line_of(index), f"{label}: key 'rubric': {message}")
    if not found:
        for index, message in rubric_warnings(rubric):
            problems.warn(path, line_of(index), f"{label}: key 'rubric': {message}")


TASK_FILE_SUFFIXES = (".yaml", ".yml", ".jsonl")


def _task_files(paths: Iterable[Path | str] | None) -> list[Path]:
    """The task files named: a file as given, a folder's `*.yaml`, `*.yml` and `*.jsonl` files (sorted, not recursive)."""
    if paths is None:
        paths = [DATA_DIR]
    files: list[Path] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            files.extend(sorted(p for p in entry.iterdir() if p.suffix in TASK_FILE_SUFFIXES and p.is_file()))
        else:
            files.append(entry)
    return files


def task_files(paths: Iterable[Path | str] | None = None) -> list[Path]:
    """The task files `load_tasks(paths)` reads, in its order (folders expanded)."""
    return _task_files(paths)


class _LineNode:
    """A stand-in for a YAML mapping node of a JSONL line: every key sits on the line's number."""

    class _Mark:
        def __init__(self, line: int) -> None:
            self.line = line

    class _Key:
        def __init__(self, key: str, mark: _LineNode._Mark) -> None:
            self.value, self.start_mark = key, mark

    def __init__(self, data: Any, line: int) -> None:
        self.start_mark = self._Mark(line - 1)
        self.value = [(self._Key(str(k), self.start_mark), None) for k in data] if isinstance(data, Mapping) else []


def _parse_jsonl(path: Path, problems: _Problems) -> list[tuple[Any, Any]]:
    """(task mapping, node) for each non-blank line of a JSONL task file; a line that is not JSON is a problem."""
    import json

    from core.files import read_text

    try:
        text = read_text(path, "task file")
    except UserError as exc:
        problems.lines.append(str(exc))
        return []
    items = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except ValueError as exc:
            problems.add(path, number, f"not a JSON object ({exc.msg} at column {exc.colno}); write one task per line")
            continue
        items.append((data, _LineNode(data, number)))
    if not items and not problems.lines:
        problems.add(path, 1, "the file is empty; write one task per line as a JSON object ({\"id\": ...})")
    return items


def _load(paths: Iterable[Path | str] | None, *, strict: bool = False) -> tuple[list[Task], _Problems]:
    problems = _Problems()
    tasks: list[Task] = []
    first_seen: dict[str, str] = {}
    files = _task_files(paths)
    if not files:
        where = ", ".join(map(str, paths)) if paths else str(DATA_DIR)
        problems.lines.append(f"{where}: no task files (*.yaml, *.yml, *.jsonl) found; pass task files or a folder "
                              "holding them")
    for path in files:
        if not path.exists():
            problems.add(path, 0, "no such file")
            continue
        if path.suffix == ".jsonl":
            items = _parse_jsonl(path, problems)
        else:
            data, node = _parse_yaml(path, problems)
            if node is None:
                continue
            if not isinstance(data, list):
                problems.add(path, 1, "a task file must be a YAML list of tasks (each item starting with '- id: ...')")
                continue
            items = list(zip(data, node.value))
        for item, item_node in items:
            task = _check_task(path, item, item_node, problems, require_reference=True, strict_outputs=True,
                               require_rubric=strict and RUBRIC_REQUIRED and path.resolve().parent == DATA_DIR.resolve())
            if task is None:
                continue
            if task.id in first_seen:
                problems.add(path, item_node.start_mark.line + 1,
                             f"task '{task.id}': duplicate id (first defined at {first_seen[task.id]}); rename one")
                continue
            first_seen[task.id] = task.source
            tasks.append(task)
    return tasks, problems


def validate_task_files(paths: Iterable[Path | str] | None = None, warnings: list[str] | None = None) -> list[str]:
    """Every problem in the task files, one `file:line: message` string each (empty when valid); tasks of
    the task set (tasks/data) must carry a rubric. Warnings (a rubric query that can never match) are
    appended to `warnings` when a list is given."""
    problems = _load(paths, strict=True)[1]
    if warnings is not None:
        warnings.extend(problems.warnings)
    return problems.lines


@lru_cache(maxsize=8)
def _load_cached(key: tuple[str, ...] | None) -> tuple[Task, ...]:
    tasks, found = _load(key)
    problems = found.lines
    if problems:
        more = f" (and {len(problems) - 1} more; run 'devops-rl tasks validate')" if len(problems) > 1 else ""
        raise UserError(problems[0] + more)
    return tuple(tasks)


def load_tasks(paths: Iterable[Path | str] | None = None) -> list[Task]:
    """Load and validate tasks (default: every file in tasks/data); UserError names the first problem."""
    key = None if paths is None else tuple(str(Path(p).resolve()) for p in paths)
    return list(_load_cached(key))


def load_task_file(path: Path | str) -> Task:
    """Load one task from a YAML file holding a single task mapping (`reference_answer` optional)."""
    path = Path(path)
    problems = _Problems()
    if not path.exists() and not path.is_symlink():  # anything else (a FIFO, a loop) is named by the reader
        raise UserError(f"{path}: no such task file; pass a YAML file with one task mapping")
    data, node = _parse_yaml(path, problems)
    if problems.lines:
        raise UserError(problems.lines[0])
    if isinstance(data, list) and len(data) == 1:
        data, node = data[0], node.value[0]
    task = _check_task(path, data, node, problems, require_reference=False, strict_outputs=False)
    if task is None:
        raise UserError(problems.lines[0])
    return task


def get_task(task_id: str, tasks: Iterable[Task] | None = None) -> Task:
    """The task with this id; UserError with the closest ids when there is none."""
    pool = list(tasks) if tasks is not None else load_tasks()
    for task in pool:
        if task.id == task_id:
            return task
    raise UserError(f"no task with id '{task_id}'{did_you_mean(task_id, [t.id for t in pool])} (see 'devops-rl tasks list')")


def split_tasks(tasks: Iterable[Task], val_fraction: float = 0.2, seed: int = 0, *,
                linked: Iterable[Iterable[str]] = ()) -> tuple[list[Task], list[Task]]:
    """Deterministic train/validation split, stratified by type.

    Within each type the tasks are sorted by id and shuffled with a generator seeded by
    `(seed, type)`; the first `round(n * val_fraction)` (at least one when the type has two or
    more tasks and `val_fraction > 0`) go to validation. Adding a task to one type never moves
    tasks of another type between the splits.

    `linked` names groups of task ids that must land on the same side (near-duplicates, tasks/split.py): a group
    is one unit, placed with the type of its first id (sorted), and counts as its size towards that type's share.
    Without groups every task is its own unit and the split is the one described above.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise UserError(f"val_fraction {val_fraction} must be in [0, 1)")
    pool = {task.id: task for task in tasks}
    unit_of: dict[str, tuple[str, ...]] = {}
    for group in linked:
        ids = tuple(sorted({i for i in group if i in pool} | {j for i in group if i in unit_of for j in unit_of[i]}))
        for task_id in ids:
            unit_of[task_id] = ids
    by_type: dict[str, list[tuple[str, ...]]] = {}
    seen: set[tuple[str, ...]] = set()
    for task_id in sorted(pool):
        unit = unit_of.get(task_id, (task_id,))
        if unit not in seen:
            seen.add(unit)
            by_type.setdefault(pool[unit[0]].type, []).append(unit)
    train: list[Task] = []
    val: list[Task] = []
    for task_type in sorted(by_type):
        units = by_type[task_type]  # sorted by first id, as the tasks are sorted by id without groups
        random.Random(f"{seed}:{task_type}").shuffle(units)
        size = sum(map(len, units))
        n_val = round(size * val_fraction)
        if val_fraction > 0 and size >= 2:
            n_val = max(1, n_val)
        taken = 0
        for unit in units:
            side = val if taken < n_val and (len(units) > 1 or size <= n_val) else train
            side.extend(pool[i] for i in unit)
            taken += len(unit) if side is val else 0
    return sorted(train, key=lambda t: t.id), sorted(val, key=lambda t: t.id)


def to_record(task: Task, system_prompt: str | None = None) -> dict[str, Any]:
    """The training record every backend consumes: chat prompt plus the task as reward metadata."""
    if system_prompt is None:
        from tasks.prompt import system_prompt as default_prompt

        system_prompt = default_prompt()
    return {
        "prompt": [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": task.desc},
        ],
        "task_id": task.id,
        "type": task.type,
        "difficulty": task.difficulty,
        "expected_outputs": list(task.expected_outputs),
        "task": task.to_dict(),
    }


def task_stats(tasks: list[Task], val_fraction: float = 0.2, seed: int = 0) -> dict[str, Any]:
    """Counts by type and difficulty and the split sizes, as `devops-rl tasks stats --json` prints them."""
    by_type = {t: 0 for t in TASK_TYPES}
    by_difficulty = {d: 0 for d in DIFFICULTIES}
    for task in tasks:
        by_type[task.type] = by_type.get(task.type, 0) + 1
        by_difficulty[task.difficulty] += 1
    from tasks.split import leak_free_split

    split = leak_free_split(tasks, val_fraction, seed)
    train, val = split.train, split.val
    return {
        "total": len(tasks),
        "by_type": by_type,
        "by_difficulty": by_difficulty,
        "split": {"train": len(train), "val": len(val)},
    }
