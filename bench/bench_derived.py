"""Checks derived from a reference (issue 21, item 2): the built-in tasks whose references hold YAML documents or
shell blocks, written as a user's JSONL task file without their rubric, scored with the derived criteria and, as
the peer in the same run, by the six dimensions alone (the task without its reference: today's fallback).

Three figures: the references' mean reward (goal >= 0.7); one value the question names (a number, a name) changed
once in the reference's code ranks below the reference (goal >= 90% of pairs); another task's reference of the
same artifact kind (Kubernetes YAML, other YAML, shell) ranks below the reference (goal >= 90% of pairs).
`python bench/bench_derived.py` prints the table; `make bench` runs it with the others.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REFERENCE_GOAL = 0.7
RANK_GOAL = 0.9
MUTANTS_PER_TASK = 8
# What a question names: standalone numbers, hyphenated or digit-bearing names, backticked spans.
_NAMED = re.compile(r"`([^`\n]{2,60})`|(?<![\w.-])(\d+|[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)+)(?![\w-]|\.\w)")
CODE_KINDS = ("yaml", "json", "shell", "console")  # the blocks the reward parses as YAML or shell


def user_task_file(folder: Path) -> tuple[Path, dict[str, str]]:
    """The built-in tasks with YAML documents or shell blocks in their reference, rubric and mutants removed, as
    a JSONL task file; and each task's artifact kind (k8s, yaml, shell)."""
    import tasks
    from core.rewards.parse.artifacts import Artifacts
    from core.rewards.parse.text import analyse

    kinds: dict[str, str] = {}
    lines = []
    for task in tasks.load_tasks():
        artifacts = Artifacts(analyse(task.reference_answer or ""))
        documents = [doc for _, doc in artifacts.documents if isinstance(doc, dict)]
        shell = [b for b in artifacts.valid_blocks if b.kind in ("shell", "console")]
        if any(isinstance(doc.get("kind"), str) for doc in documents):
            kinds[task.id] = "k8s"
        elif documents:
            kinds[task.id] = "yaml"
        elif shell:
            kinds[task.id] = "shell"
        else:
            continue
        record = {key: value for key, value in task.to_dict().items() if key not in ("rubric", "mutants")}
        lines.append(json.dumps(record))
    path = folder / "from-references.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, kinds


def _occurrence(term: str) -> str:
    """A whole occurrence of a named value; a number only where it stands as a value, not in a redirection
    (`2>/dev/null`), a regex (`"5.."`), a cron field (`*/15`) or a longer number."""
    if term.isdigit():
        return rf"(?<![\w.\-/*]){term}(?![\w\-.>*/])"
    return rf"(?<![\w.-]){re.escape(term)}(?![\w-]|\.\w)"


def _changed(term: str) -> str:
    """Another value of the same shape: a number plus one, a name with its last letter changed (`cart-api` ->
    `cart-apx`, not `cart-api-other`, which still holds the name)."""
    if term.isdigit():
        return str(int(term) + 1)
    return term[:-1] + ("x" if term[-1] != "x" else "y")


def one_value_mutants(reference: str, desc: str, limit: int = MUTANTS_PER_TASK) -> list[tuple[str, str]]:
    """(what changed, the reference with one occurrence of a value the question names changed) for occurrences
    in the YAML and shell blocks' code (as the reward classifies blocks; not in comments), at most `limit`,
    spread over the named values."""
    from core.rewards.parse.text import analyse

    named = list(dict.fromkeys(m.group(1) or m.group(2) for m in _NAMED.finditer(desc)))
    lines = reference.splitlines()
    places = []
    for block in analyse(reference).blocks:
        if block.kind not in CODE_KINDS or not block.valid:
            continue
        for number in range(block.line, block.line + len(block.body.splitlines())):
            line = lines[number]
            code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
            for term in named:
                for match in re.finditer(_occurrence(term), code):
                    places.append((term, number, match.start()))
    by_term: dict[str, list[tuple[int, int]]] = {}
    for term, number, at in places:
        by_term.setdefault(term, []).append((number, at))
    rounds = max((len(v) for v in by_term.values()), default=0)
    spread = [(term, *found[i]) for i in range(rounds) for term, found in by_term.items() if i < len(found)]
    out = []
    for term, number, at in spread[:limit]:
        line = lines[number]
        mutated = lines[:number] + [line[:at] + _changed(term) + line[at + len(term):]] + lines[number + 1:]
        out.append((f"{term} -> {_changed(term)} (line {number + 1})", "\n".join(mutated)))
    return out


def measure(derived: bool = True) -> dict:
    """The three figures, with the derived criteria (`derived`) or the six dimensions alone."""
    import tasks
    from core.rewards import score

    with tempfile.TemporaryDirectory() as folder:
        path, kinds = user_task_file(Path(folder))
        pool = tasks.load_tasks([path])
    cache: dict[tuple[str, str], float] = {}

    def reward(answer: str, task) -> float:
        key = (answer, task.id)
        if key not in cache:
            mapping = task.to_dict()
            if not derived:
                mapping.pop("reference_answer", None)
            cache[key] = score(answer, mapping, validators=False).final_reward
        return cache[key]

    references = {t.id: reward(t.reference_answer, t) for t in pool}
    one_value = [(t.id, what, reward(mutant, t) < references[t.id])
                 for t in pool for what, mutant in one_value_mutants(t.reference_answer, t.desc)]
    cross = [(t.id, o.id, reward(o.reference_answer, t) < references[t.id])
             for t in pool for o in pool if o.id != t.id and kinds[o.id] == kinds[t.id]]
    return {
        "tasks": len(pool),
        "kinds": {k: sum(1 for v in kinds.values() if v == k) for k in sorted(set(kinds.values()))},
        "reference_mean": sum(references.values()) / len(references),
        "reference_min": min(references.values()),
        "one_value": sum(r for *_, r in one_value) / max(1, len(one_value)),
        "one_value_pairs": len(one_value),
        "one_value_misses": [f"{i}: {w}" for i, w, r in one_value if not r],
        "cross": sum(r for *_, r in cross) / max(1, len(cross)),
        "cross_pairs": len(cross),
    }


def run() -> list[dict]:
    new, old = measure(True), measure(False)
    where = f"{new['tasks']} built-in tasks without their rubric ({', '.join(f'{n} {k}' for k, n in new['kinds'].items())})"
    return [
        {"benchmark": "derived", "figure": f"reference mean reward, {where} (min {new['reference_min']:.2f})",
         "value": round(new["reference_mean"], 3), "unit": "reward", "peer": round(old["reference_mean"], 3),
         "ratio": round(new["reference_mean"] / old["reference_mean"], 2) if old["reference_mean"] else None,
         "goal": f">= {REFERENCE_GOAL}"},
        {"benchmark": "derived", "figure": f"one named value changed ranks below the reference ({new['one_value_pairs']} pairs)",
         "value": round(new["one_value"], 3), "unit": "share", "peer": round(old["one_value"], 3),
         "ratio": round(new["one_value"] / old["one_value"], 2) if old["one_value"] else None, "goal": f">= {RANK_GOAL}"},
        {"benchmark": "derived", "figure": f"another reference of the same kind ranks below ({new['cross_pairs']} pairs)",
         "value": round(new["cross"], 3), "unit": "share", "peer": round(old["cross"], 3),
         "ratio": round(new["cross"] / old["cross"], 2) if old["cross"] else None, "goal": f">= {RANK_GOAL}"},
    ]


if __name__ == "__main__":
    from run_all import print_table

    if "--misses" in sys.argv:
        print("\n".join(measure(True)["one_value_misses"]))
    else:
        print_table(run())
