"""Precision: artifacts that no criterion of the task drew on and that are not about the task (none of its
names, none of its rubric's concepts) are extra, a kitchen sink of every common artifact; past a free allowance
of the answer's code they take a share of the reward.
"""

from __future__ import annotations

import re
from functools import lru_cache

from core.rewards.parse.artifacts import Artifacts

# The task's own names: backticked spans and hyphenated or underscored identifiers (`cart-api`, orders_db).
_BACKTICKED = re.compile(r"`([^`\n]{2,60})`")
_IDENTIFIER = re.compile(r"(?<![\w.-])[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+(?![\w-])")
_NAME_PARTS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*[A-Za-z0-9]")
# Words of ordinary English (and of every DevOps text) that a prompt may hyphenate: not a name of the task.
_COMMON = frozenset("""multi-stage multi-az zero-downtime read-only non-root long-running high-availability
cross-region cross-account end-to-end built-in in-place on-call per-service self-hosted step-by-step
up-to-date well-known follow-up run-time real-time pre-production least-privilege point-in-time
open-source third-party opt-in opt-out rate-limit re-run write-ahead""".split())

FREE_SHARE = 0.25  # this share of the answer's artifact lines may be extra (a verification script, a helper) ...
FREE_LINES = 20  # ... or this many lines, whichever is more
RATE = 3.0  # beyond that, each share of extra lines takes three times that share of the reward
DISTINCT_WORD = 6  # a one-word concept this long names the task's subject (`karpenter`); shorter ones are too common


@lru_cache(maxsize=512)
def task_names(desc: str) -> tuple[tuple[str, ...], re.Pattern | None]:
    """The names a task gives its own things (its identifiers and backticked names), lower case, and one pattern
    that finds them as whole names (`cart-api` in `name: cart-api`, not `checkout` in `actions/checkout@v4`)."""
    names = {m.group(0).lower() for m in _IDENTIFIER.finditer(desc)}
    for span in _BACKTICKED.findall(desc):
        names.update(part.lower() for part in _NAME_PARTS.findall(span))
    names = {n for n in names if n not in _COMMON and (len(n) >= 4 or re.search(r"[-_\d]", n))}
    if not names:
        return (), None
    alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    return tuple(names), re.compile(rf"(?<![\w/@.])(?:{alternatives})(?![\w@/])", re.I)


@lru_cache(maxsize=512)
def _vocabulary(concepts: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[list[str], tuple[str, ...], re.Pattern | None]:
    """The rubric's concept phrases as joined tokens, and its one-word concepts (lower case) with one pattern that
    finds them as whole words."""
    phrases = [" " + " ".join(key) + " " for _, key in concepts if len(key) > 1]
    words = tuple(sorted({raw.lower() for raw, key in concepts if len(key) == 1 and len(raw) >= DISTINCT_WORD and raw.isalnum()}))
    pattern = re.compile(rf"(?<![A-Za-z])(?:{'|'.join(map(re.escape, words))})(?![a-z])", re.I) if words else None
    return phrases, words, pattern


def _found(lowered: str, text: str, candidates: tuple[str, tuple[str, ...], re.Pattern | None] | tuple) -> bool:
    """Is one of the words (lower case) in the text as a whole word? A plain look first, the pattern to confirm."""
    words, pattern = candidates
    return pattern is not None and any(word in lowered for word in words) and pattern.search(text) is not None


def _about_task(artifacts: Artifacts, index: int, names: tuple, phrases: list[str], words: tuple) -> bool:
    """Does the artifact name one of the task's things or use the rubric's own vocabulary (a phrase of its
    concepts, or a one-word concept as a whole word: `versioning`, not the `Version` of `apiVersion`)?"""
    joined = artifacts.joined(index)
    if any(phrase in joined for phrase in phrases):
        return True
    text = artifacts.units[index].text
    lowered = text.lower()
    return _found(lowered, text, names) or _found(lowered, text, words)


def unrequested(artifacts: Artifacts, task_desc: str,
                concepts: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[float, list[str]]:
    """(share of the reward to take off, evidence): the answer's artifact lines in units that no criterion drew
    on and that are not about the task (none of its names, none of the rubric's concepts), beyond the free
    allowance, times RATE (at most 1)."""
    units = artifacts.units
    total = sum(u.lines for u in units)
    if not total or len(artifacts.used) == len(units):
        return 0.0, []
    allowance = max(FREE_SHARE * total, FREE_LINES)
    unused = [index for index in range(len(units)) if index not in artifacts.used]
    if sum(units[index].lines for index in unused) <= allowance:
        return 0.0, []  # even if none of them were about the task
    names = task_names(task_desc)
    phrases, *words = _vocabulary(concepts)
    extra = [units[index] for index in unused if not _about_task(artifacts, index, names, phrases, tuple(words))]
    lines = sum(u.lines for u in extra)
    if lines <= allowance:
        return 0.0, []
    share = (lines - allowance) / total
    evidence = [f"{lines} of {total} artifact lines are in artifacts no criterion asks for and that are not about "
                f"the task (free: {allowance:.0f}): reward x{max(0.0, 1 - RATE * share):.2f}"]
    evidence.extend(f"{u.label} ({u.lines} lines)" for u in extra[:8])
    return round(min(1.0, RATE * share), 4), evidence
