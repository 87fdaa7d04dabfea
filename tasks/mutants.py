"""Mutants of a task's reference answer: small edits that each break one decisive decision, with one line saying
why the result is wrong. `tasks validate` checks them; `reward audit` requires each to score low.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MUTANT_KEYS = ("id", "why", "edit")
EDIT_KEYS = ("find", "replace")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{1,47}$")
WHY_RANGE = (10, 300)


def mutant_problems(mutants: Any, reference: str | None) -> list[tuple[int | None, str]]:
    """Every problem of a task's `mutants` list as (mutant index or None, message); empty when valid. Each mutant
    is {id, why, edit: [{find, replace}, ...]}; every `find` must occur in the reference answer."""
    if not isinstance(mutants, list):
        return [(None, "must be a list of mutants (id, why, edit: [{find, replace}])")]
    if mutants and not isinstance(reference, str):
        return [(None, "mutants edit the reference answer; the task has none")]
    problems: list[tuple[int | None, str]] = []
    seen: set[str] = set()
    for index, mutant in enumerate(mutants):
        label = f"mutants[{index}]"
        if not isinstance(mutant, Mapping):
            problems.append((index, f"{label}: each mutant is a mapping of {', '.join(MUTANT_KEYS)}"))
            continue
        if isinstance(mutant.get("id"), str):
            label = f"mutants[{index}] '{mutant['id']}'"
        for key in mutant:
            if key not in MUTANT_KEYS:
                from core.errors import did_you_mean

                problems.append((index, f"{label}: unknown key '{key}' (allowed: {', '.join(MUTANT_KEYS)})"
                                        f"{did_you_mean(str(key), MUTANT_KEYS)}"))
        for key in MUTANT_KEYS:
            if key not in mutant:
                problems.append((index, f"{label}: missing key '{key}'"))
        mutant_id = mutant.get("id")
        if "id" in mutant:
            if not (isinstance(mutant_id, str) and ID_PATTERN.match(mutant_id)):
                problems.append((index, f"{label}: key 'id': {mutant_id!r} must be lowercase letters, digits, '-' or '_'"))
            elif mutant_id in seen:
                problems.append((index, f"{label}: key 'id': '{mutant_id}' is used twice; ids must be unique"))
            seen.add(str(mutant_id))
        why = mutant.get("why")
        if "why" in mutant and not (isinstance(why, str) and WHY_RANGE[0] <= len(why.strip()) <= WHY_RANGE[1]
                                    and "\n" not in why.strip()):
            problems.append((index, f"{label}: key 'why': one line of {WHY_RANGE[0]}-{WHY_RANGE[1]} characters "
                                    "saying which decision the edit breaks"))
        edits = mutant.get("edit")
        if "edit" not in mutant:
            continue
        if not isinstance(edits, list) or not edits:
            problems.append((index, f"{label}: key 'edit': a non-empty list of {{find, replace}} edits"))
            continue
        text = reference or ""
        for at, edit in enumerate(edits):
            where = f"{label}: edit[{at}]"
            if not (isinstance(edit, Mapping) and set(edit) == set(EDIT_KEYS)
                    and isinstance(edit.get("find"), str) and edit["find"]
                    and isinstance(edit.get("replace"), str)):
                problems.append((index, f"{where}: must be a mapping with 'find' (non-empty text) and 'replace' (text, "
                                        "'' to delete)"))
                continue
            if edit["find"] not in text:
                problems.append((index, f"{where}: 'find' text {_short(edit['find'])!r} is not in the reference answer "
                                        "(after the earlier edits); copy it exactly"))
                continue
            text = text.replace(edit["find"], edit["replace"], 1)
        if text == reference:
            problems.append((index, f"{label}: the edits leave the reference unchanged"))
    return problems


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
