"""`score(answer, task)`: the task's rubric decides most of the reward; the six dimensions (weighted per
task type, weights.yaml) count in proportion to the rubric score; minus the named penalties, clamped to
[0, 1], with the evidence for every figure and every criterion in a `RewardBreakdown`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.rewards.checks import penalties as pen
from core.rewards.checks.credentials import find_secrets
from core.rewards.checks.dangers import find_dangers
from core.rewards.checks.penalties import PENALTIES
from core.rewards.checks.precision import unrequested
from core.rewards.checks.signals import annotate, score_dimensions, score_expected
from core.rewards.parse.artifacts import Artifacts
from core.rewards.parse.text import analyse
from core.rewards.rubric import compile_rubric, decisive_cap, evaluate
from core.rewards.rubric.derived import derived_criteria

DIMENSIONS = ("automation", "reliability", "security", "observability", "documentation", "expected_outputs")
WEIGHTS_FILE = Path(__file__).with_name("weights.yaml")

SECRET_SECURITY_FACTOR = 0.5  # each hard-coded secret halves the security dimension
DANGER_SECURITY_FACTOR = 0.6
SECRET_PENALTY = 0.15
DANGER_PENALTY = 0.15
UNSAFE_RUBRIC_FACTOR = 0.8  # the rubric score, per secret or danger found (at most three times)
# With a rubric: final = RUBRIC_SHARE * rubric + (1 - RUBRIC_SHARE) * rubric * dimensions - penalties, so
# polished text that does not solve the task earns close to nothing.
RUBRIC_SHARE = 0.7


@dataclass
class RewardBreakdown:
    """The reward of one answer: the final figure, every dimension and penalty, and why."""

    final_reward: float
    dimensions: dict[str, float]
    penalties: dict[str, float]
    evidence: dict[str, list[str]] = field(default_factory=dict)
    # {"score": rubric score or None (the task has no rubric), "share": its weight in the final reward,
    #  "criteria": [{"id", "description", "weight", "score", "status", "forbid", "decisive", "evidence"}, ...],
    #  "decisive_cap": the most the final reward may be, "capped_by": the decisive criterion that failed or None,
    #  "derived": true when the criteria were derived from the reference answer (the task has no rubric)}
    rubric: dict[str, Any] = field(default_factory=lambda: {"score": None, "share": 0.0, "criteria": [],
                                                             "decisive_cap": 1.0, "capped_by": None,
                                                             "derived": False})

    def to_dict(self) -> dict[str, Any]:
        return {
            "final_reward": self.final_reward,
            "dimensions": dict(self.dimensions),
            "penalties": dict(self.penalties),
            "evidence": {k: list(v) for k, v in self.evidence.items()},
            "rubric": {**self.rubric, "criteria": [dict(c, evidence=list(c["evidence"])) for c in self.rubric["criteria"]]},
        }


@lru_cache(maxsize=1)
def type_weights() -> dict[str, dict[str, float]]:
    """Per task type, the weight of each dimension (normalised to sum to 1), read once from weights.yaml."""
    import yaml

    raw = yaml.safe_load(WEIGHTS_FILE.read_text(encoding="utf-8"))
    table: dict[str, dict[str, float]] = {}
    for task_type, row in raw.items():
        unknown = set(row) - set(DIMENSIONS)
        if unknown or set(row) != set(DIMENSIONS):
            raise UserError(f"{WEIGHTS_FILE}: row '{task_type}' must set exactly {', '.join(DIMENSIONS)}")
        table[task_type] = normalise_weights(row, f"{WEIGHTS_FILE}: {task_type}")
    return table


def normalise_weights(row: Mapping[str, float], where: str) -> dict[str, float]:
    """Weights per dimension scaled to sum to 1; UserError on unknown dimensions or negative weights."""
    for name, value in row.items():
        if name not in DIMENSIONS:
            raise UserError(f"{where}: unknown reward dimension '{name}' (one of {', '.join(DIMENSIONS)})")
        if not isinstance(value, (int, float)) or value < 0:
            raise UserError(f"{where}: weight of '{name}' must be a number >= 0, got {value!r}")
    total = sum(float(v) for v in row.values())
    if total <= 0:
        raise UserError(f"{where}: the weights sum to 0; give at least one dimension a positive weight")
    return {name: float(row.get(name, 0.0)) / total for name in DIMENSIONS}


def weights_for(task_type: str, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """The weights used for a task type: the file's row (or `default`) with `overrides` on top."""
    table = type_weights()
    row = dict(table.get(task_type, table["default"]))
    if overrides:
        row.update(overrides)
        row = normalise_weights(row, f"reward weights for '{task_type}'")
    return row


def _task_fields(task: Any) -> tuple[str, list[str], Any, str, str | None]:
    if isinstance(task, Mapping):
        task_type, expected, rubric = task.get("type"), task.get("expected_outputs"), task.get("rubric")
        desc, reference = task.get("desc"), task.get("reference_answer")
        label = f"task '{task.get('id', '?')}'"
    else:
        task_type, expected = getattr(task, "type", None), getattr(task, "expected_outputs", None)
        rubric, desc = getattr(task, "rubric", None), getattr(task, "desc", None)
        reference = getattr(task, "reference_answer", None)
        label = f"task '{getattr(task, 'id', '?')}'"
    if not isinstance(task_type, str) or not task_type:
        raise UserError(f"{label}: key 'type' is missing; the reward needs the task type (e.g. kubernetes)")
    if expected is None:
        expected = []
    if isinstance(expected, str) or not all(isinstance(e, str) for e in expected):
        raise UserError(f"{label}: key 'expected_outputs' must be a list of strings")
    return (task_type, [e for e in expected if e.strip()], rubric or None, desc if isinstance(desc, str) else "",
            reference if isinstance(reference, str) else None)


def strip_reasoning(answer: str) -> str:
    """The answer without a reasoning model's `<think>...</think>` part (only the final answer is graded;
    an unfinished `<think>` means there is no answer yet)."""
    if "</think>" in answer:
        return answer.rsplit("</think>", 1)[1]
    if "<think>" in answer:
        return answer.split("<think>", 1)[0]
    return answer


def score(answer: str, task: Any, *, weights: Mapping[str, float] | None = None,
          judge: Mapping[str, float] | None = None, judge_weight: float = 0.0,
          validators: bool = True) -> RewardBreakdown:
    """Score one answer to one task (a `tasks.Task` or a mapping with `type`, `expected_outputs` and, for
    the tasks of tasks/data, `rubric`).

    `weights` overrides some dimension weights of the task's type (e.g. from the training config).
    `judge` is an LLM judge's grade per rubric criterion id (see core.rewards.judge), blended into each
    criterion's rule score with `judge_weight`. `validators=False` skips the external validators
    (shellcheck, hadolint, kubernetes-validate, ...): the parsing and rubric tier only. Without a judge it
    is deterministic and makes no network calls.
    """
    task_type, expected, rubric, desc, reference = _task_fields(task)
    answer = strip_reasoning("" if answer is None else str(answer))
    weight = weights_for(task_type, weights)
    analysis = analyse(answer)
    validator_notes, validator_secrets = _run_validators(analysis) if validators else ([], [])
    annotate(analysis.segments)
    dense = pen.mark_dense_segments(analysis)

    dimensions, evidence = score_dimensions(analysis.segments)
    coverage, expected_evidence, unsupported = score_expected(expected, analysis.segments)
    dimensions["expected_outputs"] = coverage if expected else 0.0
    evidence["expected_outputs"] = expected_evidence
    if not expected:
        weight = normalise_weights({**weight, "expected_outputs": 0.0}, f"task type '{task_type}'")

    structure = min(1.0, analysis.headings / 4) * 0.5 + min(1.0, sum(b.valid for b in analysis.blocks) / 2) * 0.5
    if analysis.headings or analysis.blocks:
        evidence["documentation"].insert(0, f"structure: {analysis.headings} headings/labels, "
                                            f"{sum(b.valid for b in analysis.blocks)} valid code blocks")
    dimensions["documentation"] = 0.7 * dimensions["documentation"] + 0.3 * structure * min(1.0, len(analysis.words) / 150)

    penalty_values: dict[str, float] = {"unrequested_artifacts": 0.0}
    penalty_values["keyword_stuffing"], evidence["keyword_stuffing"] = pen.keyword_stuffing(
        analysis, dense, unsupported, len(expected))
    penalty_values["repetition"], evidence["repetition"] = pen.repetition(analysis)
    penalty_values["degenerate"], evidence["degenerate"] = pen.degenerate(analysis)
    penalty_values["length"], evidence["length"] = pen.length(analysis)
    penalty_values["broken_code"], evidence["broken_code"] = pen.broken_code(analysis)
    evidence["broken_code"].extend(validator_notes)
    penalty_values["grader_note"], evidence["grader_note"] = pen.grader_note(analysis)
    evidence["documentation"].extend([f"not counted (invisible): {e}" for e in analysis.hidden] +
                                     [f"not counted (the answer disowns it): {e}" for e in analysis.disowned])

    artifacts = Artifacts(analysis)
    secrets = find_secrets(analysis, artifacts)
    secrets += [s for s in validator_secrets if not any(s.split(" at ")[0].split(": ", 1)[-1] in f for f in secrets)][:3]
    dangers = find_dangers(analysis, artifacts)
    penalty_values["hardcoded_secret"] = round(min(0.45, SECRET_PENALTY * len(secrets)), 4)
    penalty_values["dangerous_advice"] = round(min(0.45, DANGER_PENALTY * len(dangers)), 4)
    evidence["hardcoded_secret"], evidence["dangerous_advice"] = secrets, dangers
    if secrets or dangers:
        factor = SECRET_SECURITY_FACTOR ** len(secrets) * DANGER_SECURITY_FACTOR ** len(dangers)
        evidence["security"].append(f"security x{factor:.2f}: {len(secrets)} hard-coded secret(s), "
                                    f"{len(dangers)} dangerous advice")
        dimensions["security"] *= factor

    dimensions = {name: round(min(1.0, max(0.0, dimensions[name])), 4) for name in DIMENSIONS}
    base = sum(weight[name] * dimensions[name] for name in DIMENSIONS)
    rubric_part: dict[str, Any] = {"score": None, "share": 0.0, "criteria": [], "decisive_cap": 1.0, "capped_by": None,
                                   "derived": False}
    # without a rubric, criteria derived from the reference answer (core/rewards/rubric/derived.py)
    criteria = compile_rubric(rubric) if rubric else derived_criteria(reference, desc)
    if criteria:
        rubric_score, results = evaluate(criteria, artifacts, analysis.segments,
                                         judge, judge_weight if judge else 0.0, task_desc=desc)
        cap, capped_by = decisive_cap(results)
        # precision: what no criterion drew on (the checks marked what they used) and names nothing of the task
        share, evidence["unrequested_artifacts"] = unrequested(artifacts, desc, _positive_concepts(criteria))
        rubric_part = {"score": rubric_score, "share": RUBRIC_SHARE, "criteria": [r.to_dict() for r in results],
                       "decisive_cap": cap, "capped_by": capped_by, "derived": not rubric}
        if secrets or dangers:
            # an answer that solves the task dangerously must lose to a plain, safe one
            factor = UNSAFE_RUBRIC_FACTOR ** min(3, len(secrets) + len(dangers))
            evidence["security"].append(f"rubric x{factor:.2f}: the answer is unsafe")
            rubric_score = round(rubric_score * factor, 4)
        base = RUBRIC_SHARE * rubric_score + (1 - RUBRIC_SHARE) * rubric_score * base
        if penalty_values["length"] and evidence["length"] and len(analysis.words) < pen.SHORT_WORDS:
            # a terse answer that does what the task asks is not "too short"
            penalty_values["length"] = round(penalty_values["length"] * (1 - rubric_score), 4)
        penalty_values["unrequested_artifacts"] = round(base * share, 4)
    final = min(1.0, max(0.0, base - sum(penalty_values.values())))
    # a wrong decision (a failed decisive criterion) is not outweighed by everything else the answer does well
    final = min(final, rubric_part["decisive_cap"])
    ordered_evidence = {name: evidence.get(name, []) for name in (*DIMENSIONS, *PENALTIES)}
    return RewardBreakdown(
        final_reward=round(final, 4),
        dimensions=dimensions,
        penalties={name: penalty_values[name] for name in PENALTIES},
        evidence=ordered_evidence,
        rubric=rubric_part,
    )


_CONCEPTS: dict[int, tuple[Any, tuple]] = {}  # id(compiled criteria) -> (them, their concepts): compiled once each


def _positive_concepts(criteria: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(phrase, key) of each concept of the criteria that add points: what the task's rubric asks an answer to
    talk about."""
    from core.rewards.rubric.scoring import concept_phrases

    cached = _CONCEPTS.get(id(criteria))
    if cached is not None and cached[0] is criteria:
        return cached[1]
    found = tuple(dict.fromkeys(p for criterion in criteria if not criterion.forbidden
                                for p in concept_phrases(criterion.check)))
    if len(_CONCEPTS) > 1024:
        _CONCEPTS.clear()
    _CONCEPTS[id(criteria)] = (criteria, found)
    return found


def _run_validators(analysis) -> tuple[list[str], list[str]]:
    """Run the real validators on the answer's valid code blocks: their errors and warnings join each block's
    problems and issues (the broken_code penalty); detect-secrets findings are returned as secrets."""
    from core.rewards.checks.validators import ERROR, Block, validate

    blocks = [b for b in analysis.blocks if b.valid and b.body.strip()]
    findings, notes = validate([Block(b.kind, b.body) for b in blocks])
    secrets = []
    for block, found in zip(blocks, findings):
        for finding in found:
            if finding.severity == "secret":
                secrets.append(f"{finding.tool}: {finding.message} ({block.kind} block at line {block.line})")
            elif finding.severity == ERROR:
                block.problems.append(str(finding))
            else:
                block.issues.append(str(finding))
    return notes, secrets


def prefetch_validators(answers: list[str]) -> None:
    """Run every external validator once over all valid code blocks of `answers` and cache the results, so
    scoring them one by one starts no more shellcheck/hadolint processes (one per batch instead of per answer)."""
    from core.rewards.checks.validators import Block, prefetch
    from core.rewards.parse.code_blocks import check_block
    from core.rewards.parse.visible import recommended_parts

    blocks = []
    for answer in answers:
        for part in recommended_parts(strip_reasoning("" if answer is None else str(answer)))[1]:
            if part.lang is not None and part.body.strip():
                report = check_block(part)
                if report.valid:
                    blocks.append(Block(report.kind, part.body))
    prefetch(blocks)


def score_batch(pairs: list[tuple[str, Any]], **options: Any) -> list[RewardBreakdown]:
    """`score` for many (answer, task) pairs, with every external validator run once for all their code blocks."""
    if options.get("validators", True):
        prefetch_validators([answer for answer, _ in pairs])
    return [score(answer, task, **options) for answer, task in pairs]


def calculate_devops_reward(answer: str, task: Any) -> float:
    """The final reward in [0, 1] for one answer (what a GRPO step optimises)."""
    return score(answer, task).final_reward
