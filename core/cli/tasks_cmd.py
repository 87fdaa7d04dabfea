"""`devops-rl tasks`: list, show, validate and count the DevOps tasks.

Reads `tasks/data/*.yaml`, or the task files and folders given with `--tasks` (YAML or JSONL); output is a table
on a TTY and JSON with `--json`. The split is the one training makes (near-duplicates on one side, docs/tasks.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

tasks_app = typer.Typer(help="List, show, validate and count the DevOps tasks.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")
    from core.cli.families_cmd import families_app  # `devops-rl tasks families` (issue 22)
    tasks_app.add_typer(families_app, name="families")


TASKS_HELP = "Task file (YAML/JSONL) or folder to read instead of the built-in tasks (repeatable)."


def _tasks_option():
    return typer.Option([], "--tasks", help=TASKS_HELP)


def _load(task_paths: list[Path] | None) -> list:
    from tasks.sources import load_sources, option_paths

    return load_sources(option_paths(task_paths) or None)


def _split(tasks: list, val_fraction: float = 0.2, seed: int = 0, threshold: float | None = None,
           holdout: list[str] | None = None):
    from types import SimpleNamespace

    from tasks.sources import config_split
    from tasks.split import DEDUP_THRESHOLD

    devops = SimpleNamespace(tasks=[], val_fraction=val_fraction, seed=seed,
                             dedup_threshold=DEDUP_THRESHOLD if threshold is None else threshold, holdout=holdout or [])
    return config_split(devops, tasks)[2]


def _check_choice(value: str | None, choices: tuple[str, ...], option: str) -> None:
    from core.errors import UserError, did_you_mean

    if value is not None and value not in choices:
        raise UserError(f"{option} {value!r} is not one of {', '.join(choices)}{did_you_mean(value, choices)}")


@tasks_app.command("list")
def list_tasks(
    task_type: str | None = typer.Option(None, "--type", help="Only tasks of this type."),
    difficulty: str | None = typer.Option(None, "--difficulty", help="Only easy, medium or hard tasks."),
    split: str | None = typer.Option(None, "--split", help="Only the train or val split."),
    task_paths: list[Path] = _tasks_option(),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """List tasks (id, type, difficulty, split, prompt)."""
    from tasks import DIFFICULTIES, TASK_TYPES

    _check_choice(task_type, TASK_TYPES, "--type")
    _check_choice(difficulty, DIFFICULTIES, "--difficulty")
    _check_choice(split, ("train", "val"), "--split")
    tasks = _load(task_paths)
    train_ids = {t.id for t in _split(tasks).train}
    rows = [
        t for t in tasks
        if (task_type is None or t.type == task_type)
        and (difficulty is None or t.difficulty == difficulty)
        and (split is None or (t.id in train_ids) == (split == "train"))
    ]
    if as_json:
        print(json.dumps([{**t.to_dict(), "split": "train" if t.id in train_ids else "val"} for t in rows], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("id", "type", "difficulty", "split"):
        table.add_column(column, no_wrap=True)
    table.add_column("prompt", overflow="ellipsis", no_wrap=True, ratio=1)
    for t in rows:
        table.add_row(t.id, t.type, t.difficulty, "train" if t.id in train_ids else "val", t.desc)
    console = Console()
    console.print(table)
    console.print(f"{len(rows)} of {len(tasks)} tasks")


@tasks_app.command("show")
def show_task(
    task_id: str = typer.Argument(..., help="Task id, e.g. k8s-001."),
    task_paths: list[Path] = _tasks_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the task as JSON."),
) -> None:
    """Show one task: prompt, expected outputs, rubric (or the checks derived from its reference) and reference answer."""
    from core.rewards.rubric.derived import derive_rubric
    from tasks import get_task

    task = get_task(task_id, _load(task_paths))
    derived = [] if task.rubric else derive_rubric(task.reference_answer, task.desc)
    if as_json:
        print(json.dumps({**task.to_dict(), "source": task.source, **({"derived_rubric": derived} if derived else {})},
                         indent=2))
        return
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    console.print(f"[bold]{task.id}[/]  {task.type} · {task.difficulty}  ({task.source})")
    console.print(task.desc, soft_wrap=True)
    console.print("\n[bold]Expected outputs[/]")
    for output in task.expected_outputs:
        console.print(f"  • {output}", markup=False)
    if task.rubric:
        console.print("\n[bold]Rubric[/] (what the reward checks; docs/reward.md)")
        for criterion in task.rubric:
            kind = "forbid " if "forbid" in (criterion.get("check") or {}) else ""
            console.print(f"  • {kind}{criterion['id']} (weight {criterion.get('weight', 1)}): {criterion['description']}",
                          markup=False)
    if derived:
        console.print("\n[bold]Checks derived from the reference[/] (the task has no rubric; docs/tasks.md)")
        for criterion in derived:
            ((kind, checks),) = criterion["check"].items()
            console.print(f"  • {criterion['id']} (weight {criterion['weight']:g}): {criterion['description']}",
                          markup=False, soft_wrap=True)
            for check in checks:
                console.print(f"      {kind}: {check}", markup=False, soft_wrap=True)
    if task.reference_answer:
        console.print("\n[bold]Reference answer[/]")
        console.print(Markdown(task.reference_answer))


@tasks_app.command("validate")
def validate(
    paths: list[Path] | None = typer.Argument(None, help="Task files or folders (default: tasks/data)."),
    task_paths: list[Path] = _tasks_option(),
) -> None:
    """Check task files against the schema: exit 0 when valid, 2 with one line per problem."""
    from tasks import load_tasks, validate_task_files

    paths = [*(paths or []), *task_paths]
    warnings: list[str] = []
    problems = validate_task_files(paths or None, warnings=warnings)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"error: {len(problems)} problem(s) in the task files", file=sys.stderr)
        raise typer.Exit(2)
    count = len(load_tasks(paths or None))
    print(f"ok: {count} tasks valid")


@tasks_app.command("stats")
def stats(
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
    val_fraction: float = typer.Option(0.2, "--val-fraction", help="Share of each type held out for validation."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split."),
    threshold: float | None = typer.Option(None, "--dedup-threshold",
                                           help="Word-set similarity from which two tasks are near-duplicates (0 = off; "
                                                "default 0.3, as devops.dedup_threshold)."),
    holdout: list[str] = typer.Option([], "--holdout", help="Hold out a whole group for validation: type:NAME or "
                                      "file:PATH (repeatable; as devops.holdout)."),
    task_paths: list[Path] = _tasks_option(),
) -> None:
    """Count tasks by type and difficulty, the train/val split and the near-duplicate pairs it keeps together."""
    from core.errors import UserError
    from tasks import task_stats
    from tasks.split import DEDUP_THRESHOLD

    if threshold is not None and not 0 <= threshold <= 1:
        raise UserError(f"--dedup-threshold {threshold}: must be in [0, 1] (0 turns the check off)")
    tasks = _load(task_paths)
    split = _split(tasks, val_fraction, seed, threshold, holdout)
    figures = task_stats(tasks, val_fraction, seed)
    figures["split"] = {"train": len(split.train), "val": len(split.val)}
    figures["near_duplicates"] = {
        "threshold": DEDUP_THRESHOLD if threshold is None else threshold,
        "pairs": [{"a": a, "b": b, "similarity": sim} for a, b, sim in split.pairs],
        "groups": [list(g) for g in split.groups],
        "across_split": len(split.crossing()),
    }
    figures["held_out"] = split.held_out
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    print(f"total: {figures['total']}  (train {figures['split']['train']}, val {figures['split']['val']})")
    for name, count in figures["by_type"].items():
        print(f"  {name:<24} {count}")
    print("  " + "  ".join(f"{d}: {n}" for d, n in figures["by_difficulty"].items()))
    near = figures["near_duplicates"]
    print(f"near-duplicates (word-set similarity >= {near['threshold']}): {len(near['pairs'])} pairs in "
          f"{len(near['groups'])} groups, each group kept on one side ({near['across_split']} across the split)")
    for pair in near["pairs"]:
        print(f"  {pair['similarity']:.2f}  {pair['a']}  {pair['b']}")
    if split.held_out:
        print(f"held out for validation: {len(split.held_out)} tasks ({', '.join(holdout)} and their near-duplicates)")
