"""`devops-rl tasks families`: list the task families (tasks/families) with their instance counts, show one
instance, and validate each family on a sample of instances (docs/families.md)."""

from __future__ import annotations

import json
import sys

import typer

families_app = typer.Typer(help="Parameterized task families and drills: list, show an instance, validate.",
                           no_args_is_help=True)


def _nonnegative(value: int, option: str) -> None:
    from core.errors import UserError

    if value < 0:
        raise UserError(f"{option} {value} must be >= 0")


def family_rows(probe: int = 400) -> list[dict]:
    """One row per family: id, type, difficulty, drill, parameters, space and distinct prompts among `probe`."""
    from tasks.families import families
    from tasks.families.validate import distinct_prompts

    return [{"id": f.id, "type": f.type, "difficulty": f.difficulty, "drill": f.drill, "summary": f.summary,
             "params": list(f.params), "space": f.space(), "distinct_prompts": distinct_prompts(f, 0, probe)}
            for f in families()]


@families_app.command("list")
def list_families(
    drills: bool = typer.Option(False, "--drills", help="Only the drills (one small artifact per answer)."),
    probe: int = typer.Option(400, "--probe", help="Count distinct prompts among this many instances per family."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """List the families: type, parameter space and distinct prompts (seed 0, the first --probe instances)."""
    _nonnegative(probe, "--probe")
    rows = [row for row in family_rows(probe) if row["drill"] or not drills]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("id", "type", "kind", "space", "prompts"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("space", "prompts") else "left")
    table.add_column("what", overflow="ellipsis", no_wrap=True, ratio=1)
    for row in rows:
        table.add_row(row["id"], row["type"], "drill" if row["drill"] else "task", f"{row['space']:,}",
                      f"{row['distinct_prompts']:,}", row["summary"])
    console = Console()
    console.print(table)
    types = len({row["type"] for row in rows})
    console.print(f"{len(rows)} families over {types} task types; {sum(r['distinct_prompts'] for r in rows):,} distinct "
                  f"prompts among the first {probe} instances of each (seed 0)")


@families_app.command("show")
def show_instance(
    family_id: str = typer.Argument(..., help="Family id, e.g. drill-k8s-pdb."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed."),
    index: int = typer.Option(0, "--index", help="Instance index."),
    as_json: bool = typer.Option(False, "--json", help="Print the instance as a task mapping (JSON)."),
) -> None:
    """Show one instance: its parameter values, prompt, rubric, reference answer and mutants."""
    from tasks.families import get_family

    _nonnegative(seed, "--seed")
    _nonnegative(index, "--index")
    family = get_family(family_id)
    task = family.instance(seed, index)
    values = family.sample(seed, index)
    if as_json:
        print(json.dumps({**task.to_dict(), "family": family.id, "seed": seed, "index": index, "values": values},
                         indent=2, default=list))
        return
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    console.print(f"[bold]{task.id}[/]  {task.type} · {task.difficulty} · family {family.id}", markup=True)
    console.print("values: " + ", ".join(f"{k}={v}" for k, v in values.items()), markup=False)
    console.print(task.desc, soft_wrap=True, markup=False)
    console.print("\n[bold]Rubric[/]")
    for criterion in task.rubric:
        flag = "!" if criterion.get("decisive") else " "
        console.print(f" {flag} {criterion['id']} (weight {criterion['weight']}): {criterion['description']}", markup=False)
    console.print("\n[bold]Reference answer[/]")
    console.print(Markdown(task.reference_answer or ""))
    console.print("\n[bold]Mutants[/]")
    for m in task.mutants:
        console.print(f"  • {m['id']}: {m['why']}", markup=False)


@families_app.command("validate")
def validate_families(
    family_ids: list[str] | None = typer.Argument(None, help="Family ids (default: every family)."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed."),
    sample: int = typer.Option(4, "--sample", help="Instances checked per family (indexes 0..N-1)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON report per family."),
) -> None:
    """Check each family on a sample: the task-file validation passes, reference >= 0.7, every mutant <= 0.5.
    Exit 0 when all pass, 1 when a family fails."""
    from core.errors import UserError
    from tasks.families import families, get_family
    from tasks.families.validate import validate_family

    _nonnegative(seed, "--seed")
    if sample < 1:
        raise UserError(f"--sample {sample} must be >= 1")
    chosen = [get_family(fid) for fid in family_ids] if family_ids else families()
    reports = [validate_family(f, seed=seed, sample=sample) for f in chosen]
    if as_json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        for r in reports:
            figures = (f"reference >= {r.reference_min:.3f}, mutants <= {r.mutant_max:.3f}"
                       if r.reference_min is not None else "not scored")
            print(f"{'ok  ' if r.ok else 'FAIL'} {r.family:<28} {r.checked} instances, {figures}")
            for problem in r.problems:
                print(f"     {problem}", file=sys.stderr)
    failed = [r.family for r in reports if not r.ok]
    if failed:
        print(f"error: {len(failed)} of {len(reports)} families failed: {', '.join(failed)}", file=sys.stderr)
        raise typer.Exit(1)
    if not as_json:
        print(f"ok: {len(reports)} families valid on {sample} instances each (seed {seed})")
