"""Scoring an answer against compiled criteria: the segments where concepts count, the grounding rule (text-only
credit halves without an artifact), the "about the task" test and the judge blend.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.negation import HINT as NEGATION_HINT
from core.rewards.parse.negation import negated
from core.rewards.parse.text import STOPWORDS, Segment, phrase_key, stem
from core.rewards.parse.text import tokens as tokens_of
from core.rewards.rubric.checks import (
    AnyOf,
    ConceptCheck,
    DockerfileCheck,
    ForbidCheck,
    QueryCheck,
    RelationCheck,
    ShellCheck,
    SqlCheck,
    _run,
    _short,
)
from core.rewards.rubric.compile import Criterion

PASSED, PARTIAL, FAILED = "passed", "partial", "failed"
# A failed decisive criterion caps the final reward at DECISIVE_CAP; between half and full credit the cap rises
# linearly to 1 (a decisive check that half holds is still a wrong decision).
DECISIVE_CAP = 0.3
# A code block whose tokens are mostly the rubric's own concept words is a keyword block, not an artifact.
DENSE_CONCEPT_CODE = 0.4
DENSE_CONCEPT_PROSE = 0.75
CONCEPT_ONLY_FACTOR = 0.5
# An answer is about its task when its own sentences (not a copy of the prompt) use this share of the prompt's
# content words and this many content words that neither the prompt nor the rubric has (see _about_task).
ABOUT_COVERAGE = 0.3
ABOUT_OWN_WORDS = 12
_ECHO_GRAM = 5  # a sentence most of whose 5-word runs are in the prompt is a copy of it


class _View:
    """What the checks of one rubric read: the artifacts, and the segments where concepts may count."""

    def __init__(self, artifacts: Artifacts, segments: list[Segment], concept_keys: list[tuple[str, ...]]) -> None:
        self.artifacts = artifacts
        # Inside a `forbid`, a warning ("never use --force") is not a violation; elsewhere a negated mention
        # still counts ("Kyverno rejects privileged pods" is what a guardrail criterion asks for).
        self.in_forbid = False
        # a heading counts when it heads a real section: a postmortem written as `## Timeline` sections has
        # its section names there; a heading over one stock sentence (a hack's template) does not count
        self.segments = [s for s in segments if (s.section if s.kind == "heading" else s.substantive)
                         and not _dense(s, concept_keys)]

    @cached_property
    def continued(self) -> list[tuple[Any, str, str]]:
        """(block, label, text) of the code blocks with a multi-line expression, joined onto single lines."""
        out = []
        for block, (label, body) in zip(self.artifacts.valid_blocks, self.artifacts.code_texts):
            joined = joined_expressions(body)
            if joined is not body:
                out.append((block, label, joined))
        return out

    def use(self, block, at: int | None = None) -> None:
        """A criterion that adds points drew on this block (at this offset of its body): it was asked for."""
        if not self.in_forbid:
            self.artifacts.mark(block, at)

    def use_document(self, index: int) -> None:
        if not self.in_forbid:
            self.artifacts.mark_document(index)

    def use_source(self, source: str) -> None:
        if not self.in_forbid:
            self.artifacts.mark_source(source)

    def find_concept(self, group) -> tuple[str, Segment] | None:
        """The first alternative of the group in a counted segment, not negated where it stands."""
        for raw, key, loose in group:
            needle = " " + " ".join(key) + " "
            for segment in self.segments:
                if needle not in _joined(segment):
                    continue
                if self.in_forbid and segment.kind not in ("code", "inline_code") and NEGATION_HINT.search(segment.text):
                    match = loose.search(segment.text)
                    if match and negated(segment.text[: match.start()], segment.text[match.end():]):
                        continue
                if segment.kind == "code" and segment.block is not None and not self.in_forbid:
                    self.artifacts.mark_phrase(segment.block, needle)
                return raw, segment
        return None

    def find_regex(self, regex: re.Pattern) -> tuple[str, bool] | None:
        """(where the regex matched, whether that is a code block), code first."""
        for block, (label, body) in zip(self.artifacts.valid_blocks, self.artifacts.code_texts):
            match = regex.search(body)
            if match:
                self.use(block, match.start())
                return f"{label}: \"{_short(match.group(0), 60)}\"", True
        for block, label, joined in self.continued:
            match = regex.search(joined)
            if match:
                self.use(block)
                return f"{label}: \"{_short(match.group(0), 60)}\"", True
        for segment in self.segments:
            if segment.kind == "code":
                continue
            match = regex.search(segment.text)
            if match and not (self.in_forbid and negated(segment.text[: match.start()], segment.text[match.end():])):
                return f"\"{_short(segment.text, 70)}\"", False
        return None


# A line that continues an expression (PromQL `and`/`or`/`unless`, `by (...)`, an operator or a closing bracket
# first), or a line that ends with a binary keyword (and its `on (...)`): joined for pattern checks.
_CONTINUES = re.compile(r"[ \t]*\n[ \t]*(?=(?:and|or|unless|by|without|on|ignoring|group_left|group_right)(?![\w:-])"
                        r"|[+*/%^<>=!)])")
_ENDS_WITH_OPERATOR = re.compile(r"(?<=[ \t])((?:and|or|unless)(?:[ \t]+(?:on|ignoring)[ \t]*\([^)\n]*\))?"
                                 r"(?:[ \t]+group_(?:left|right)(?:[ \t]*\([^)\n]*\))?)?)[ \t]*\n[ \t]*")


@lru_cache(maxsize=2048)
def joined_expressions(body: str) -> str:
    """The block with multi-line expressions on one line (`... > 0.1`, `and`, `...` on three lines become one);
    the same object when nothing continues. Expressions have brackets: a block without any is left alone."""
    if "(" not in body and "{" not in body:
        return body
    joined = _ENDS_WITH_OPERATOR.sub(r"\1 ", _CONTINUES.sub(" ", body))
    return body if joined == body else joined


def _joined(segment: Segment) -> str:
    if segment.joined is None:
        segment.joined = " " + " ".join(segment.tokens) + " "
    return segment.joined


def _dense(segment: Segment, keys: list[tuple[str, ...]]) -> bool:
    """A segment mostly made of the rubric's own concept words (a YAML block of keywords, a keyword line)."""
    n = len(segment.tokens)
    if segment.kind == "inline_code":
        limit = n - 0.5  # a backticked term made only of concept words (`kill switch`) is a keyword, not a command
    elif n < 6:
        return False
    else:
        limit = (DENSE_CONCEPT_CODE if segment.kind == "code" else DENSE_CONCEPT_PROSE) * n
    joined = _joined(segment)
    present = [k for k in keys if " " + " ".join(k) + " " in joined]
    if sum(joined.count(" " + " ".join(k) + " ") * len(k) for k in present) <= limit:
        return False  # an upper bound (overlapping phrases count twice) already under the limit
    tokens = segment.tokens
    covered = set()
    for key in present:
        size = len(key)
        for at in range(n - size + 1):
            if tokens[at] == key[0] and tuple(tokens[at:at + size]) == key:
                covered.update(range(at, at + size))
    return len(covered) > limit


@dataclass
class CriterionResult:
    id: str
    description: str
    weight: float
    score: float
    status: str
    forbidden: bool
    evidence: list[str]
    decisive: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "description": self.description, "weight": self.weight, "score": self.score,
                "status": self.status, "forbid": self.forbidden, "decisive": self.decisive,
                "evidence": list(self.evidence)}


def decisive_cap(results: Sequence[CriterionResult]) -> tuple[float, str | None]:
    """The most the final reward may be given its decisive criteria, and the criterion that sets it (None when
    every decisive criterion holds): DECISIVE_CAP at half credit or less, rising linearly to 1 at full credit."""
    cap, which = 1.0, None
    for result in results:
        if not result.decisive:
            continue
        limit = DECISIVE_CAP + (1 - DECISIVE_CAP) * max(0.0, 2 * result.score - 1)
        if limit < cap - 1e-9:
            cap, which = round(limit, 4), result.id
    return cap, which


def _status(value: float) -> str:
    return PASSED if value >= 0.999 else FAILED if value <= 0.001 else PARTIAL


def evaluate(criteria: Sequence[Criterion], artifacts: Artifacts, segments: list[Segment],
             judge: Mapping[str, float] | None = None, judge_weight: float = 0.0,
             task_desc: str = "") -> tuple[float, list[CriterionResult]]:
    """(rubric score in [0, 1], one result per criterion).

    A criterion earns its weight times its score; a `forbid` criterion takes its weight times the violation
    off; the sum is divided by the weights of the criteria that add points. When the rubric checks artifacts
    and none of those checks found anything, text-only credit counts half for the criteria that ask for an
    artifact, and for every criterion when the answer is not about the task (`task_desc`, the prompt) in
    words of its own. With judge grades (criterion id -> [0, 1], 1 = met / avoided), each criterion's score
    is blended: (1 - w) * rule + w * judge.
    """
    keys = list(dict.fromkeys(k for c in criteria for k in _concept_keys(c.check)))
    view = _View(artifacts, segments, keys)
    outcomes = []
    for criterion in criteria:
        view.in_forbid = criterion.forbidden
        outcomes.append(_run(criterion.check.inner if criterion.forbidden else criterion.check, view))
    # Text alone is weak evidence: when the rubric checks artifacts and none of those checks found anything,
    # text-only credit counts half where the criterion asks for an artifact (a manifest, a command), and
    # everywhere when the answer does not speak about this task in words of its own (essays, echoed prompts,
    # pasted checklists, concept sentences). Incident and design answers are legitimately prose.
    structural = any(_has_structure(c.check) for c in criteria if not c.forbidden)
    grounded = any(o.grounded for c, o in zip(criteria, outcomes) if not c.forbidden)
    about: tuple[bool, str] | None = None
    results = []
    earned = penalty = total = 0.0
    for criterion, outcome in zip(criteria, outcomes):
        value = outcome.score
        if structural and not grounded and not criterion.forbidden and value > 0:
            if _asks_artifact(criterion.check) and not outcome.capped:
                why = "this criterion asks for an artifact and no artifact check of this rubric passed"
            else:
                if about is None:
                    about = _about_task(task_desc, criteria, view.segments)
                why = None if about[0] else f"no artifact check of this rubric passed and {about[1]}"
            if why:
                value *= CONCEPT_ONLY_FACTOR
                outcome.evidence.append(f"x{CONCEPT_ONLY_FACTOR}: {why}")
        evidence = list(outcome.evidence)
        if criterion.forbidden:
            evidence = ([f"violated: {e}" for e in evidence if not e.startswith(("no ", "not found"))]
                        if value > 0 else ["not found"])
        grade = None if judge is None else judge.get(criterion.id)
        if grade is not None and judge_weight > 0:
            rule = value
            judged = 1.0 - grade if criterion.forbidden else grade
            value = (1 - judge_weight) * rule + judge_weight * judged
            evidence.append(f"judge {grade:.2f} (rule {rule:.2f}, judge weight {judge_weight:.2f})")
        value = round(min(1.0, max(0.0, value)), 4)
        if criterion.forbidden:
            penalty += criterion.weight * value
            met = round(1.0 - value, 4)
        else:
            earned += criterion.weight * value
            total += criterion.weight
            met = value
        results.append(CriterionResult(criterion.id, criterion.description, criterion.weight, met, _status(met),
                                       criterion.forbidden, evidence, criterion.decisive))
    score = (earned - penalty) / total if total else 0.0
    return round(min(1.0, max(0.0, score)), 4), results


_CONTENT_STOP = STOPWORDS | {stem(word) for word in STOPWORDS}


def _content(words) -> set[str]:
    return {w for w in words if len(w) > 2 and w not in _CONTENT_STOP}


def _about_task(task_desc: str, criteria: Sequence[Criterion], segments: list[Segment]) -> tuple[bool, str]:
    """Does the answer speak about this task in words of its own? Its segments, except copies of the prompt,
    must use ABOUT_COVERAGE of the prompt's content words (a generic essay does not) and ABOUT_OWN_WORDS
    content words that neither the prompt nor the rubric has (an echoed prompt, pasted criteria or concept
    sentences have none). Returns the verdict and, when it is no, why."""
    prompt = phrase_key(task_desc)
    grams = {tuple(prompt[at:at + _ECHO_GRAM]) for at in range(len(prompt) - _ECHO_GRAM + 1)}
    used: set[str] = set()
    for segment in segments:
        tokens = segment.tokens
        runs = [tuple(tokens[at:at + _ECHO_GRAM]) for at in range(len(tokens) - _ECHO_GRAM + 1)]
        if not (runs and 2 * sum(run in grams for run in runs) >= len(runs)):
            used.update(tokens)
    wanted = _content(prompt)
    coverage = len(wanted & used) / len(wanted) if wanted else 0.0
    known = set(prompt)
    for criterion in criteria:
        known.update(tokens_of(criterion.description))
        for key in _concept_keys(criterion.check):
            known.update(key)
    own = len(_content(used) - known)
    if coverage >= ABOUT_COVERAGE and own >= ABOUT_OWN_WORDS:
        return True, ""
    return False, (f"the answer is not about the task in its own words ({coverage:.0%} of the prompt's words, "
                   f"{own} words of its own; needs {ABOUT_COVERAGE:.0%} and {ABOUT_OWN_WORDS})")


def _asks_artifact(check: Any) -> bool:
    """A criterion whose check (or one of its alternatives) reads a parsed artifact: YAML/JSON, HCL, SQL, shell
    commands or a Dockerfile. Its evidence is the artifact; prose is the fallback."""
    if isinstance(check, AnyOf):
        return any(_asks_artifact(c) for c in check.checks)
    if isinstance(check, ForbidCheck):
        return False
    return isinstance(check, (QueryCheck, SqlCheck, ShellCheck, DockerfileCheck, RelationCheck))


def _has_structure(check: Any) -> bool:
    if isinstance(check, AnyOf):
        return any(_has_structure(c) for c in check.checks)
    return not isinstance(check, ConceptCheck)


def _concept_keys(check: Any) -> list[tuple[str, ...]]:
    if isinstance(check, ConceptCheck):
        return check.keys()
    if isinstance(check, AnyOf):
        return [k for c in check.checks for k in _concept_keys(c)]
    return []


def concept_phrases(check: Any) -> list[tuple[str, tuple[str, ...]]]:
    """(phrase as written, its key) of every concept alternative of a check."""
    if isinstance(check, ConceptCheck):
        return [(raw, key) for group in check.groups for raw, key, _ in group]
    if isinstance(check, AnyOf):
        return [p for c in check.checks for p in concept_phrases(c)]
    return []
