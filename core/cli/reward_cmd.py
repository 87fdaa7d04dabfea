"""`devops-rl reward score`: score one answer against one task and show the breakdown.

The task comes from the task set (`--task ID`) or a YAML file (`--task-file`); the answer from a file
or stdin (`--answer -`). `--json` prints exactly final_reward, dimensions, penalties, evidence and rubric.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

reward_app = typer.Typer(help="Score answers with the multi-dimensional DevOps reward.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(reward_app, name="reward")


def _read_answer(answer: str) -> str:
    from core.errors import UserError

    if answer == "-":
        return sys.stdin.read()
    path = Path(answer)
    if not path.is_file():
        raise UserError(f"--answer {answer}: no such file; pass a text/markdown file with the answer, or '-' for stdin")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--answer {answer}: not UTF-8 text; save the answer as UTF-8") from None


def _print_breakdown(task, result) -> None:
    from core.rewards import weights_for

    weights = weights_for(task.type)
    print(f"task {task.id} ({task.type}, {task.difficulty})")
    print(f"final reward  {result.final_reward:.3f}")
    _print_rubric(result.rubric)
    print("\ndimension          score  weight  evidence")
    for name, value in result.dimensions.items():
        evidence = result.evidence.get(name) or ["-"]
        print(f"  {name:<17} {value:5.2f}  {weights[name]:5.2f}   {evidence[0]}")
        for line in evidence[1:4]:
            print(f"  {'':<17} {'':5}  {'':5}   {line}")
        if len(evidence) > 4:
            print(f"  {'':<31} (+{len(evidence) - 4} more with --json)")
    applied = {name: value for name, value in result.penalties.items() if value}
    print("\npenalties" + ("" if applied else "  none"))
    for name, value in applied.items():
        print(f"  {name:<17} -{value:.2f}")
        for line in result.evidence.get(name, [])[:3]:
            print(f"  {'':<18} {line}")


def _print_rubric(rubric: dict) -> None:
    if rubric["score"] is None:
        print("rubric        none (the task has no rubric: the six dimensions decide)")
        return
    print(f"rubric        {rubric['score']:.3f}  (decides {rubric['share']:.0%} of the reward; the dimensions count in proportion)")
    print("\ncriterion                     status   score  weight  evidence")
    for item in rubric["criteria"]:
        label = ("forbid " if item["forbid"] else "") + item["id"]
        evidence = item["evidence"] or ["-"]
        print(f"  {label[:28]:<28} {item['status']:<8} {item['score']:5.2f}  {item['weight']:5.1f}   {evidence[0]}")
        for line in evidence[1:2]:
            print(f"  {'':<28} {'':<8} {'':5}  {'':5}   {line}")


@reward_app.command("score")
def score_command(
    answer: str = typer.Option(..., "--answer", help="File with the answer (markdown), or '-' to read stdin."),
    task_id: Optional[str] = typer.Option(None, "--task", help="Id of a task in tasks/data, e.g. k8s-001."),
    task_file: Optional[Path] = typer.Option(None, "--task-file", help="YAML file with one task (reference_answer optional)."),
    as_json: bool = typer.Option(False, "--json", help="Print {final_reward, dimensions, penalties, evidence, rubric} as JSON."),
) -> None:
    """Score one answer against one task: final reward, rubric criteria, six dimensions, penalties and evidence."""
    from core.errors import UserError

    if (task_id is None) == (task_file is None):
        raise UserError("pass exactly one of --task ID or --task-file FILE.yaml")
    from core.rewards import score
    from tasks import get_task, load_task_file

    task = get_task(task_id) if task_id is not None else load_task_file(task_file)
    result = score(_read_answer(answer), task)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        _print_breakdown(task, result)
