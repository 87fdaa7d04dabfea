"""`devops-rl reward score` scores one answer against one task and shows the breakdown; `reward audit`
runs the built-in hack suite over every task with a rubric and fails when a hack reaches the reference.

The task comes from the task set (`--task ID`) or a YAML file (`--task-file`); the answer from a file
or stdin (`--answer -`). `--json` prints exactly final_reward, dimensions, penalties, evidence and rubric.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

reward_app = typer.Typer(help="Score answers with the multi-dimensional DevOps reward.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(reward_app, name="reward")


def _read_answer(answer: str) -> str:
    from core.errors import UserError, shorten
    from core.files import read_stdin, read_text

    if answer == "-":
        return read_stdin("answer", "--answer - (stdin)")
    path = Path(answer)
    if not path.exists() and not path.is_symlink():  # a symlink loop is named by the reader
        raise UserError(f"--answer {shorten(answer)}: no such file; pass a text/markdown file with the answer, or '-' "
                        "for stdin")
    return read_text(path, "answer")


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
    print(f"rubric        {rubric['score']:.3f}  "
          f"(decides {rubric['share']:.0%} of the reward; the dimensions count in proportion)")
    if rubric.get("capped_by"):
        print(f"decisive      '{rubric['capped_by']}' does not hold: the final reward is capped at {rubric['decisive_cap']:.2f}")
    labels = [("forbid " if item["forbid"] else "") + ("! " if item.get("decisive") else "") + item["id"]
              for item in rubric["criteria"]]
    width = max(map(len, labels), default=9)
    print(f"\n  {'criterion (! decisive)':<{width}} status   score  weight  evidence")
    for label, item in zip(labels, rubric["criteria"]):
        evidence = item["evidence"] or ["-"]
        print(f"  {label:<{width}} {item['status']:<8} {item['score']:5.2f}  {item['weight']:5.1f}   {evidence[0]}")
        for line in evidence[1:2]:
            print(f"  {'':<{width}} {'':<8} {'':5}  {'':5}   {line}")


@reward_app.command("score")
def score_command(
    answer: str = typer.Option(..., "--answer", help="File with the answer (markdown), or '-' to read stdin."),
    task_id: str | None = typer.Option(None, "--task", help="Id of a task in tasks/data, e.g. k8s-001."),
    task_file: Path | None = typer.Option(None, "--task-file", help="YAML file with one task (reference_answer optional)."),
    task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder that --task is looked up "
                                          "in, instead of the built-in tasks (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print {final_reward, dimensions, penalties, evidence, rubric} as JSON."),
) -> None:
    """Score one answer against one task: final reward, rubric criteria, six dimensions, penalties and evidence."""
    from core.errors import UserError

    if (task_id is None) == (task_file is None):
        raise UserError("pass exactly one of --task ID or --task-file FILE.yaml")
    from core.rewards import score
    from tasks import get_task, load_task_file
    from tasks.sources import load_sources, option_paths

    if task_paths and task_id is None:
        raise UserError("--tasks: names the files --task ID is looked up in; add --task ID")
    task = get_task(task_id, load_sources(option_paths(task_paths))) if task_id is not None else load_task_file(task_file)
    result = score(_read_answer(answer), task)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        _print_breakdown(task, result)


@reward_app.command("audit")
def audit_command(
    task_ids: list[str] | None = typer.Option(None, "--task", help="Only these task ids (repeatable)."),
    task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder to audit instead of the "
                                          "built-in tasks (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Score the hack suite, a plain answer and excellent answers with other tools on every task with a
    rubric; exit 1 when a hack reaches a reference, an excellent answer scores < 0.6 or a reference < 0.7."""
    from core.rewards.audit import HACKS, audit
    from tasks import get_task
    from tasks.sources import load_sources, option_paths

    pool = load_sources(option_paths(task_paths))
    selected = [get_task(t, pool) for t in task_ids] if task_ids else pool
    report = audit(selected)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_audit(report, len(HACKS))
    if report.failures:
        raise typer.Exit(1)


def _print_audit(report, n_hacks: int) -> None:
    print(f"{'task':<12} {'reference':>9} {'plain':>6} {'best hack':>6}  {'margin':>7}  {'mutant':>6}  {'excellent':>9}  "
          "result  (best hack)")
    for row in report.rows:
        name, value = row.best_hack
        excellent = f"{min(row.excellent.values()):.3f}" if row.excellent else "-"
        mutant = f"{row.worst_mutant[1]:.3f}" if row.mutants else "-"
        print(f"{row.task_id:<12} {row.reference:>9.3f} {row.plain:>6.3f} {value:>9.3f}  {row.reference - value:>+7.3f}  "
              f"{mutant:>6}  {excellent:>9}  {'FAIL' if row.failures else 'ok':<6}  ({name})")
    worst: dict[str, float] = {}
    for row in report.rows:
        for name, value in row.hacks.items():
            worst[name] = max(worst.get(name, 0.0), value)
    print("\nhighest score of each hack over the covered tasks:")
    for name, value in sorted(worst.items(), key=lambda item: -item[1]):
        print(f"  {value:.3f}  {name}")
    mutants = [value for row in report.rows for value in row.mutants.values()]
    if mutants:
        print(f"\nmutants (one decisive decision broken; each must score <= 0.5 and 0.25 below its reference): "
              f"{len(mutants)}, highest {max(mutants):.3f}, mean {sum(mutants) / len(mutants):.3f}")
    for row in report.rows:
        for failure in row.failures:
            print(f"  FAIL {row.task_id}: {failure}")
    excellent = [(row.task_id, name, value) for row in report.rows for name, value in row.excellent.items()]
    if excellent:
        print("\nexcellent answers with another tool or terse (must score >= 0.6):")
        for task_id, name, value in excellent:
            print(f"  {value:.3f}  {task_id}: {name}")
    print(f"\ncovered {len(report.rows)} of {report.total} tasks ({len(report.skipped)} without a rubric), {n_hacks} hacks each")
    for failure in report.failures:
        print(f"FAIL {failure}")
    print("audit passed" if not report.failures else f"audit failed: {len(report.failures)} problem(s)")


@reward_app.command("doctor")
def doctor_command() -> None:
    """List the execution tier's engines (promtool, the shell sandbox): available, or missing with what to
    install. Criteria whose engine is missing score 0 with that in their evidence; exit 1 when one is missing."""
    from core.rewards.engines import ENGINES, engine_missing

    missing = 0
    print(f"{'engine':<10} {'status':<10} detail")
    for name, engine in sorted(ENGINES.items()):
        why = engine_missing(name)
        missing += why is not None
        print(f"{name:<10} {'missing' if why else 'available':<10} {f'{why}; {engine.install}' if why else ''}".rstrip())
    if missing:
        raise typer.Exit(1)
