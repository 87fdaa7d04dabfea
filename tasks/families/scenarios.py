"""Task families whose answer is two artifacts that must agree on the instance's values (the Service and the
Ingress on the port, the alert pair on the job, the Role and the NetworkPolicy on the namespace): each is built
from two drills sharing one set of values, with a situation to read, and checked by both drills' rubrics and
mutants (criterion and mutant ids prefixed by the part)."""

from __future__ import annotations

import re
from collections.abc import Callable

from tasks.families.base import block  # noqa: F401  (re-exported for families that add a block of their own)

_ANSWER_FORMAT = re.compile(r"\s*Answer with the (artifact|command|SQL) only, in one fenced code block\.")
MAX_CRITERIA, MAX_OUTPUTS = 10, 6


def compose(situation: str, parts: tuple[tuple[str, Callable[[dict], dict]], ...], closing: str) -> Callable[[dict], dict]:
    """A builder for `situation` + the parts' asks, answered by the parts' artifacts in order."""

    def build(values: dict) -> dict:
        built = [(name, builder(values)) for name, builder in parts]
        asks = " ".join(_ANSWER_FORMAT.sub("", body["desc"]).strip() for _, body in built)
        outputs: list[str] = []
        for _, body in built:
            outputs.extend(o for o in body["expected_outputs"] if o not in outputs)
        rubric, mutants = [], []
        earlier = ""
        for name, body in built:
            rubric.extend({**c, "id": f"{name}-{c['id']}"} for c in body["rubric"])
            mutants.extend({**_own_part(m, body["reference_answer"], earlier), "id": f"{name}-{m['id']}"}
                           for m in body["mutants"])
            earlier += body["reference_answer"]
        if len(rubric) > MAX_CRITERIA:  # drop the lightest criteria that are neither decisive nor forbid
            optional = sorted((c for c in rubric if not c.get("decisive") and "forbid" not in c["check"]),
                              key=lambda c: c["weight"])
            drop = {c["id"] for c in optional[: len(rubric) - MAX_CRITERIA]}
            rubric = [c for c in rubric if c["id"] not in drop]
        reference = "\n\n".join(body["reference_answer"] for _, body in built)
        return {"desc": f"{situation.format(**values)} {asks} {closing}", "expected_outputs": outputs[:MAX_OUTPUTS],
                "reference_answer": f"{closing_line(values)}\n\n{reference}", "rubric": rubric, "mutants": mutants}

    return build


def _own_part(mutant: dict, part: str, earlier: str) -> dict:
    """The mutant with its edits made on its own part: an edit whose text also occurs in an earlier part (the same
    app name, the same `runs-on`) would land there, so it becomes one edit of the whole part."""
    if not any(edit["find"] in earlier for edit in mutant["edit"]):
        return mutant
    edited = part
    for edit in mutant["edit"]:
        edited = edited.replace(edit["find"], edit["replace"], 1)
    return {**mutant, "edit": [{"find": part, "replace": edited}]}


def closing_line(values: dict) -> str:
    """The reference's one-line lead-in."""
    return "Both artifacts below use the same names and values, so they work together:"
