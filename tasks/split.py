"""A train/validation split without leaks: near-duplicate tasks stay on one side, whole groups can be held out.

Two tasks are near-duplicates when the sets of words of their prompt, expected outputs and reference answer
overlap by a Jaccard similarity of at least `threshold` (default `DEDUP_THRESHOLD`). MinHash LSH (datasketch)
proposes the candidate pairs, so a set of thousands of tasks is not compared pair by pair; each candidate's exact
Jaccard similarity decides, so the pairs found do not depend on hashing luck. Near-duplicates are joined into
groups (a pair of pairs sharing a task is one group) that `tasks.split_tasks` keeps on one side.

A hold-out (`type:NAME` or `file:PATH`) sends every task of that type or task file to validation, with the
near-duplicates of those tasks; the rest is split as usual.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import UserError

# Word-set Jaccard similarity from which two tasks count as near-duplicates. On the built-in tasks the pairs at
# or above 0.3 ask for the same fix in other words (strict mTLS, a payments NetworkPolicy, a PDB with spread
# constraints, SLO burn-rate alerts, probes, JVM memory on Kubernetes, login rate limiting, TLS renewal); below
# it they share a platform but not the task. docs/tasks.md, "Near-duplicates", lists them.
DEDUP_THRESHOLD = 0.3
NUM_PERM = 128  # MinHash permutations: the estimate's standard error is about 0.04 at this size
# LSH looks this far below the threshold and weighs a missed pair 9 times a false candidate, so the estimate's error
# loses no pair (on the built-in tasks it proposes every pair the exact all-pairs comparison finds; a test holds it)
CANDIDATE_MARGIN = 0.1
LSH_WEIGHTS = (0.1, 0.9)  # (false positive, false negative)
HOLDOUT_KINDS = ("type", "file")
_WORD = re.compile(r"[a-z0-9]+")


def task_words(task) -> frozenset[str]:
    """The words a task is compared by: its prompt, expected outputs and reference answer, lowercased."""
    text = " ".join((task.desc, *task.expected_outputs, task.reference_answer or ""))
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def near_duplicates(tasks: Sequence, threshold: float = DEDUP_THRESHOLD) -> list[tuple[str, str, float]]:
    """(id, id, similarity) of every near-duplicate pair, the most similar first; none when threshold is 0."""
    if threshold <= 0 or len(tasks) < 2:
        return []
    if threshold > 1:
        raise UserError(f"near-duplicate threshold {threshold} must be in (0, 1] (0 turns the check off)")
    from datasketch import MinHash, MinHashLSH

    words = {t.id: task_words(t) for t in tasks}
    lsh = MinHashLSH(threshold=max(0.05, threshold - CANDIDATE_MARGIN), num_perm=NUM_PERM, weights=LSH_WEIGHTS)
    hashes = {}
    for task_id, found in words.items():
        digest = MinHash(num_perm=NUM_PERM, seed=1)
        digest.update_batch(w.encode() for w in sorted(found))
        hashes[task_id] = digest
        lsh.insert(task_id, digest)
    pairs: dict[tuple[str, str], float] = {}
    for task_id, digest in hashes.items():
        for other in lsh.query(digest):
            key = tuple(sorted((task_id, other)))
            if other != task_id and key not in pairs:
                pairs[key] = jaccard(words[task_id], words[other])
    found = [(a, b, round(sim, 4)) for (a, b), sim in pairs.items() if sim >= threshold]
    return sorted(found, key=lambda p: (-p[2], p[0], p[1]))


def duplicate_groups(pairs: Iterable[tuple[str, str, float]]) -> list[tuple[str, ...]]:
    """The connected groups of the pairs (union-find), each sorted, sorted by first id."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b, _ in pairs:
        parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for x in parent:
        groups.setdefault(root(x), []).append(x)
    return sorted(tuple(sorted(g)) for g in groups.values())


def parse_holdout(spec: str) -> tuple[str, str]:
    """`type:NAME` or `file:PATH` as (kind, value); UserError naming the form otherwise."""
    from core.errors import did_you_mean
    from tasks import TASK_TYPES

    kind, sep, value = str(spec).partition(":")
    if not sep or kind not in HOLDOUT_KINDS or not value.strip():
        raise UserError(f"holdout {spec!r}: write type:NAME (a task type) or file:PATH (a task file) to hold out")
    if kind == "type" and value not in TASK_TYPES:
        raise UserError(f"holdout {spec!r}: unknown type {value!r} (one of {', '.join(TASK_TYPES)})"
                        f"{did_you_mean(value, TASK_TYPES)}")
    return kind, value.strip()


def source_file(task) -> str:
    """The task file a loaded task came from (its `source` without the line), resolved."""
    path = task.source.rsplit(":", 1)[0] if task.source else ""
    return str(Path(path).resolve()) if path else ""


def _held_out(task, holdouts: Sequence[tuple[str, str]]) -> bool:
    for kind, value in holdouts:
        if kind == "type" and task.type == value:
            return True
        if kind == "file" and source_file(task) == str(Path(value).resolve()):
            return True
    return False


@dataclass(frozen=True)
class Split:
    """A split and why it looks as it does: the near-duplicate pairs found and the groups kept together."""

    train: list
    val: list
    pairs: list[tuple[str, str, float]] = field(default_factory=list)
    groups: list[tuple[str, ...]] = field(default_factory=list)
    held_out: list[str] = field(default_factory=list)  # ids sent to validation by a hold-out

    def crossing(self) -> list[tuple[str, str, float]]:
        """Near-duplicate pairs with one task in each split (none, by construction)."""
        train_ids = {t.id for t in self.train}
        return [p for p in self.pairs if (p[0] in train_ids) != (p[1] in train_ids)]


def leak_free_split(tasks: Sequence, val_fraction: float = 0.2, seed: int = 0, *,
                    threshold: float = DEDUP_THRESHOLD, holdout: Iterable[str] = ()) -> Split:
    """The stratified split of `tasks.split_tasks` with near-duplicates kept on one side and the held-out groups
    (with their near-duplicates) in validation."""
    from tasks import split_tasks

    holdouts = [parse_holdout(h) for h in holdout]
    for kind, value in holdouts:
        if kind == "file" and not any(source_file(t) == str(Path(value).resolve()) for t in tasks):
            raise UserError(f"holdout 'file:{value}': no task comes from that file; name one of the task files "
                            "the tasks are loaded from")
    pairs = near_duplicates(tasks, threshold)
    groups = duplicate_groups(pairs)
    held = {t.id for t in tasks if _held_out(t, holdouts)}
    for group in groups:  # a near-duplicate of a held-out task is held out with it
        if held & set(group):
            held.update(group)
    rest = [t for t in tasks if t.id not in held]
    if holdouts and not rest:
        raise UserError("holdout: holds out every task, leaving none to train on; hold out fewer groups")
    train, val = split_tasks(rest, val_fraction, seed, linked=groups)
    val = sorted(val + [t for t in tasks if t.id in held], key=lambda t: t.id)
    return Split(train, val, pairs, groups, sorted(held))
