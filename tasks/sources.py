"""Where the tasks come from: the built-in `tasks/data`, or a user's task files and folders (`--tasks PATH`,
`devops.tasks` with mixing weights), and the record of which files (and their sha256) a run used.

Every command that reads tasks goes through `load_sources`; every command that splits them goes through
`config_split`, so training, `eval --split val` and `tasks list --split` agree on the split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.split import DEDUP_THRESHOLD, Split, leak_free_split, source_file


@dataclass(frozen=True)
class TaskSource:
    """A task file or folder and its mixing weight (copies of each of its training tasks per epoch)."""

    path: str
    weight: int = 1


def sources_of(entries: Iterable[Any] | None) -> list[TaskSource]:
    """TaskSources from `devops.tasks` entries (objects or mappings with `path`, `weight`) or plain paths."""
    out = []
    for entry in entries or ():
        if isinstance(entry, (str, Path)):
            out.append(TaskSource(str(entry)))
        elif isinstance(entry, dict):
            out.append(TaskSource(str(entry["path"]), int(entry.get("weight", 1))))
        else:
            out.append(TaskSource(str(entry.path), int(getattr(entry, "weight", 1))))
    return out


def source_paths(sources: Sequence[TaskSource]) -> list[str] | None:
    """The paths to load (None: the built-in task set)."""
    return [s.path for s in sources] if sources else None


def load_sources(sources: Sequence[TaskSource] | Iterable[Any] | None = None) -> list:
    """Every task of the sources (the built-in task set when there are none); UserError names the first bad line."""
    from tasks import load_tasks

    return load_tasks(source_paths(sources_of(sources)))


def file_weights(sources: Sequence[TaskSource]) -> dict[str, int]:
    """Resolved task file -> its source's weight (a file named twice keeps the larger weight)."""
    from tasks import task_files

    weights: dict[str, int] = {}
    for source in sources:
        for path in task_files([source.path]):
            key = str(path.resolve())
            weights[key] = max(weights.get(key, 0), source.weight)
    return weights


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def task_file_records(sources: Iterable[Any] | None = None) -> list[dict[str, Any]]:
    """What a run records of its tasks: each task file's resolved path, sha256, task count and weight."""
    from tasks import task_files

    chosen = sources_of(sources)
    tasks = load_sources(chosen)
    counts: dict[str, int] = {}
    for task in tasks:
        counts[source_file(task)] = counts.get(source_file(task), 0) + 1
    weights = file_weights(chosen) if chosen else {}
    records = []
    for path in task_files(source_paths(chosen)):
        key = str(path.resolve())
        records.append({"path": key, "sha256": sha256_of(path), "tasks": counts.get(key, 0), "weight": weights.get(key, 1)})
    return records


def config_split(devops, tasks: Sequence | None = None) -> tuple[list, list, Split]:
    """(training tasks, each repeated by its source's weight; validation tasks; the Split) for a config's
    `devops` section (or anything with `tasks`, `val_fraction`, `seed`, `dedup_threshold`, `holdout`)."""
    sources = sources_of(getattr(devops, "tasks", None))
    pool = load_sources(sources) if tasks is None else list(tasks)
    split = leak_free_split(pool, devops.val_fraction, devops.seed,
                            threshold=getattr(devops, "dedup_threshold", DEDUP_THRESHOLD),
                            holdout=getattr(devops, "holdout", ()) or ())
    train = list(split.train)
    if sources and any(s.weight != 1 for s in sources):
        weights = file_weights(sources)
        train = [t for t in split.train for _ in range(weights.get(source_file(t), 1))]
    return train, list(split.val), split


def option_paths(paths: Iterable[Path | str] | None, option: str = "--tasks") -> list[str]:
    """`--tasks` values as absolute paths (so a run's config finds them from any folder); UserError for a path
    that is neither a file nor a folder."""
    from core.errors import UserError, shorten

    out = []
    for path in map(Path, paths or ()):
        if not (path.is_file() or path.is_dir()):
            raise UserError(f"{option} {shorten(path)}: no such task file or folder; pass a YAML/JSONL task file or a "
                            "folder of them")
        out.append(str(path.absolute()))
    return out
