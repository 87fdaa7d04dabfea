"""A task's rubric: 4-10 criteria (id, description, weight, check), each scored 0-1 with partial credit on
the parsed answer; the rubric score is what decides most of the reward (docs/reward.md, "Writing a rubric").

Check kinds: `concept` (alternatives, matched in substantive text only), `yaml` and `hcl` (JMESPath over the
parsed documents), `sql` (parsed statements), `shell` (parsed commands and their flags), `dockerfile`
(instructions), `pattern` (a regex in valid code or substantive prose), and `forbid` (any of those must not
hold: it takes points off instead of adding them). A list of checks means "any of these" (other tools).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from core.rewards.artifacts import Artifacts, normalise_sql
from core.rewards.negation import HINT as NEGATION_HINT
from core.rewards.negation import negated
from core.rewards.signals import _snippet
from core.rewards.text import _TOKEN, STOPWORDS, Segment, phrase_key, stem
from core.rewards.text import tokens as tokens_of

CHECK_KINDS = ("concept", "yaml", "hcl", "sql", "shell", "dockerfile", "pattern", "forbid")
CRITERIA_RANGE = (4, 10)
MIN_POSITIVE = 3  # criteria that add points (not `forbid`)
WEIGHT_RANGE = (0.0, 10.0)  # exclusive low, inclusive high
CRITERION_KEYS = ("id", "description", "weight", "check")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{1,47}$")
DOCKERFILE_INSTRUCTIONS = frozenset(
    "FROM RUN CMD LABEL MAINTAINER EXPOSE ENV ADD COPY ENTRYPOINT VOLUME USER WORKDIR ARG ONBUILD STOPSIGNAL "
    "HEALTHCHECK SHELL".split())
PASSED, PARTIAL, FAILED = "passed", "partial", "failed"
# A code block whose tokens are mostly the rubric's own concept words is a keyword block, not an artifact.
DENSE_CONCEPT_CODE = 0.4
DENSE_CONCEPT_PROSE = 0.75
CONCEPT_ONLY_FACTOR = 0.5
# An answer is about its task when its own sentences (not a copy of the prompt) use this share of the prompt's
# content words and this many content words that neither the prompt nor the rubric has (see _about_task).
ABOUT_COVERAGE = 0.3
ABOUT_OWN_WORDS = 12
_ECHO_GRAM = 5  # a sentence most of whose 5-word runs are in the prompt is a copy of it


class RubricError(ValueError):
    """A rubric that cannot be compiled; the message names the key and the fix."""


# ---- checks ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How well one check holds on one answer, and why; `grounded` when a check on a parsed artifact (not
    a concept in text) earned the score."""

    score: float
    evidence: list[str] = field(default_factory=list)
    grounded: bool = False
    capped: bool = False  # the rubric's `cap` limited it: its writer has said what this alternative is worth


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _loose_pattern(alternative: str) -> re.Pattern:
    """Where an alternative stands in raw text (to judge a negation before it): its words, any separator."""
    words = [w.lower() for w in _TOKEN.findall(alternative)] or [alternative.lower()]
    return re.compile(r"[\W_]*".join(re.escape(w[:-1] if len(w) > 4 else w) + r"\w*" for w in words), re.I)


@dataclass
class _Check:
    """What every single-kind check has: `cap`, the most it may earn (a rubric's `cap: 0.5` on a text-only
    alternative says "prose gets half")."""

    cap: float = field(default=1.0, kw_only=True)


@dataclass
class ConceptCheck(_Check):
    """Groups of alternative phrases; each group is met by any one of its phrases in substantive text."""

    groups: list[list[tuple[str, tuple[str, ...], re.Pattern]]]
    need: int

    def keys(self) -> list[tuple[str, ...]]:
        return [key for group in self.groups for _, key, _ in group]

    def run(self, view: _View) -> Outcome:
        met, evidence = 0, []
        missing = []
        for group in self.groups:
            hit = view.find_concept(group)
            if hit is None:
                missing.append(" / ".join(raw for raw, _, _ in group[:4]) + (" / …" if len(group) > 4 else ""))
                continue
            met += 1
            evidence.append(f"\"{hit[0]}\" in: \"{_snippet(hit[1].text, phrase_key(hit[0]))}\"")
        if missing:
            evidence.append("not found (in real prose or valid code): " + "; ".join(missing))
        return Outcome(min(1.0, met / self.need), evidence)


def _tally(items: list, find) -> Outcome:
    """The share of assertions that hold; `find(item)` gives (evidence when it holds or None, evidence when not)."""
    met, evidence = 0, []
    for item in items:
        hit, miss = find(item)
        met += hit is not None
        evidence.append(miss if hit is None else hit)
    return Outcome(met / len(items), evidence)


def _truthy(value: Any) -> bool:
    """JMESPath's truth, except that a list of only false values (`[[], null]`, what a projection over
    documents without a match returns) is no match either; an empty mapping in a list is an item that was
    selected (`ingress: [{}]`, the allow-all rule), so `[{}]` is a match."""
    if isinstance(value, list):
        return any(isinstance(item, dict) or _truthy(item) for item in value)
    return value not in (None, False, {}, "")


@dataclass
class QueryCheck(_Check):
    """JMESPath queries over the answer's YAML/JSON documents (`yaml`) or merged HCL (`hcl`); each must
    select something (non-empty, not false) in some document."""

    source: str  # "yaml" | "hcl"
    queries: list[tuple[str, Any]]

    def run(self, view: _View) -> Outcome:
        docs = view.artifacts.documents if self.source == "yaml" else (
            [("HCL", view.artifacts.hcl)] if view.artifacts.hcl is not None else [])
        if self.source == "hcl" and "python-hcl2" in view.artifacts.missing:
            return Outcome(0.0, ["skipped: python-hcl2 is not installed"])
        return _tally(self.queries, lambda query: (
            next((f"{label}: `{query[0]}`" for label, doc in docs if _truthy(_search(query[1], doc))), None),
            f"no {self.source.upper()} document has `{query[0]}`"))


@lru_cache(maxsize=1)
def _jmespath_options():
    """JMESPath options whose functions answer null instead of raising on a value of the wrong type, so
    `steps[?starts_with(run, 'make')]` skips a step without `run` rather than failing the whole query, and
    `values(jobs)` on a document without `jobs` is null."""
    import jmespath
    from jmespath import exceptions, functions

    class TolerantFunctions(functions.Functions):
        def call_function(self, function_name, resolved_args):
            try:
                return super().call_function(function_name, resolved_args)
            except exceptions.JMESPathTypeError:
                return None

    return jmespath.Options(custom_functions=TolerantFunctions())


def _search(compiled: Any, doc: Any) -> Any:
    """A query on one document; what still raises on odd data (an arity error) is no match there."""
    try:
        return compiled.search(doc, options=_jmespath_options())
    except Exception:  # jmespath raises several error types
        return None


@dataclass
class SqlCheck(_Check):
    """Parsed SQL statements: each pattern must appear in one statement (normalised text)."""

    patterns: list[tuple[str, str]]

    def run(self, view: _View) -> Outcome:
        statements = view.artifacts.sql
        if "sqlglot" in view.artifacts.missing:
            return Outcome(0.0, ["skipped: sqlglot is not installed"])
        return _tally(self.patterns, lambda pattern: (
            next((f"SQL: `{_short(s[1], 70)}`" for s in statements if pattern[1] in s[0] or pattern[1] in s[1]), None),
            f"no parsed SQL statement has `{pattern[0]}`"))


@dataclass
class ShellPattern:
    raw: str
    words: tuple[str, ...]
    flags: tuple[str, ...]


def _has_flag(words: tuple[str, ...], flag: str) -> bool:
    name, _, value = flag.partition("=")
    for at, word in enumerate(words):
        if word == flag or (not value and word.startswith(name + "=")):
            return True
        if value and word == name and at + 1 < len(words) and words[at + 1] == value:
            return True
        if len(name) == 2 and name[1] != "-" and word[:1] == "-" and word[1:2] != "-" and name[1] in _short_group(word):
            return True  # -k inside -fsSLk, -z inside -zw3
    return False


def _short_group(word: str) -> str:
    """The letters of a short-option group ("-fsSL" -> "fsSL", "-zw3" -> "zw")."""
    match = re.match(r"-([A-Za-z]+)", word)
    return match.group(1) if match else ""


def _has_words(words: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """The command is `wanted[0]` and the other wanted words follow in order (flags may sit between); both
    in lower case (`redis-cli INFO` is `redis-cli info`)."""
    if not words or words[0].rsplit("/", 1)[-1] != wanted[0]:
        return False
    rest = iter(words[1:])
    return all(any(w == want for w in rest) for want in wanted[1:])


@dataclass
class ShellCheck(_Check):
    """Parsed shell commands: each pattern is a command (words in order) with the flags it must carry."""

    patterns: list[ShellPattern]

    def run(self, view: _View) -> Outcome:
        if "bashlex" in view.artifacts.missing:
            return Outcome(0.0, ["skipped: bashlex is not installed"])
        commands = view.artifacts.commands
        total, evidence = 0.0, []
        for pattern in self.patterns:
            best, where = 0.0, None
            for command in commands:
                if not _has_words(command.lowered, pattern.words):
                    continue
                present = sum(_has_flag(command.words, f) for f in pattern.flags)
                credit = (1 + present) / (1 + len(pattern.flags))
                if view.in_forbid and present < len(pattern.flags):
                    credit = 0.0  # `kubectl drain` is fine; only `kubectl drain --disable-eviction` violates
                if credit > best:
                    best, where = credit, command
            total += best
            if where is None:
                evidence.append(f"no command `{pattern.raw}`")
            else:
                evidence.append(f"{where.source}: `{_short(' '.join(where.words), 70)}`" +
                                ("" if best == 1.0
                                 else f" (missing {', '.join(f for f in pattern.flags if not _has_flag(where.words, f))})"))
        return Outcome(total / len(self.patterns), evidence)


@dataclass
class DockerAssertion:
    raw: str
    final: bool
    instruction: str | None  # None: the stage count
    regex: re.Pattern | None
    stages: int = 0


@dataclass
class DockerfileCheck(_Check):
    assertions: list[DockerAssertion]

    def run(self, view: _View) -> Outcome:
        files = view.artifacts.dockerfiles
        return _tally(self.assertions, lambda a: (
            next(filter(None, (_docker_hit(a, instructions) for instructions in files)), None),
            f"no Dockerfile has `{a.raw}`"))


def _docker_hit(a: DockerAssertion, instructions: list[tuple[str, str]]) -> str | None:
    """Where one Dockerfile meets the assertion, or None."""
    if a.instruction is None:
        stages = sum(word == "FROM" for word, _ in instructions)
        return f"Dockerfile: {stages} stages" if stages >= a.stages else None
    scope = instructions
    if a.final:
        starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
        scope = instructions[starts[-1]:] if starts else instructions
    found = [(w, args) for w, args in scope if w == a.instruction and (a.regex is None or a.regex.search(args))]
    return f"Dockerfile: {found[-1][0]} {_short(found[-1][1], 60)}" if found else None


@dataclass
class PatternCheck(_Check):
    """Regexes searched in valid code blocks and substantive prose (a negated mention does not count)."""

    regexes: list[tuple[str, re.Pattern]]

    def run(self, view: _View) -> Outcome:
        hits = {raw: view.find_regex(regex) for raw, regex in self.regexes}
        outcome = _tally(list(hits), lambda raw: (f"/{raw}/ in {hits[raw][0]}" if hits[raw] else None, f"no match for /{raw}/"))
        outcome.grounded = any(hit and hit[1] for hit in hits.values())
        return outcome


@dataclass
class AnyOf:
    """Alternatives (a list of checks): the best one counts."""

    checks: list[Any]

    def run(self, view: _View) -> Outcome:
        best: Outcome | None = None
        for check in self.checks:
            outcome = _run(check, view)
            if best is None or outcome.score > best.score or (outcome.score == best.score and outcome.grounded):
                best = outcome
            if best.score >= 1.0 and best.grounded:
                break
        return best or Outcome(0.0)


def _run(check: Any, view: _View) -> Outcome:
    """Run a check; its outcome is grounded when an artifact check (or a pattern inside code) scored."""
    outcome = check.run(view)
    if not isinstance(check, AnyOf):  # alternatives keep the grounding of the one that won
        textual = isinstance(check, (ConceptCheck, PatternCheck)) and not outcome.grounded
        outcome.grounded = outcome.score > 0 and not textual
    cap = getattr(check, "cap", 1.0)
    if outcome.score > cap:
        outcome.score, outcome.capped = cap, True
        outcome.evidence.append(f"at most {cap:g}: the rubric caps this alternative")
    return outcome


@dataclass
class ForbidCheck:
    """The inner check must NOT hold; its score is how much of it does (the violation)."""

    inner: Any


# ---- compiling a rubric ---------------------------------------------------------------------------


def _strings(value: Any, where: str, what: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v.strip() for v in items):
        raise RubricError(f"{where}: {what} must be a non-empty string or a list of non-empty strings")
    return [v.strip() for v in items]


def _compile_concept(value: Any, where: str) -> ConceptCheck:
    need = None
    if isinstance(value, Mapping):
        unknown = set(value) - {"any", "all", "min"}
        if unknown or ("any" in value) == ("all" in value):
            raise RubricError(f"{where}: concept takes a list of alternatives, or a mapping with 'any: [...]' "
                              f"or 'all: [[...], ...]' (and optional 'min'); got keys {sorted(map(str, value))}")
        if "any" in value:
            raw_groups = [_strings(value["any"], where, "concept 'any'")]
        else:
            groups = value["all"]
            if not isinstance(groups, list) or not groups:
                raise RubricError(f"{where}: concept 'all' must be a list of groups (each a phrase or a list of alternatives)")
            raw_groups = [_strings(g, f"{where}: all[{i}]", "a concept group") for i, g in enumerate(groups)]
        need = value.get("min")
        if need is not None and not (isinstance(need, int) and not isinstance(need, bool) and 1 <= need <= len(raw_groups)):
            raise RubricError(f"{where}: concept 'min' must be a whole number from 1 to {len(raw_groups)} (the number of groups)")
    else:
        raw_groups = [_strings(value, where, "concept")]
    groups = []
    for group in raw_groups:
        compiled = []
        for alternative in group:
            key = phrase_key(alternative)
            if not key:
                raise RubricError(f"{where}: concept alternative {alternative!r} has no words to match; write the tool or phrase")
            compiled.append((alternative, key, _loose_pattern(alternative)))
        groups.append(compiled)
    return ConceptCheck(groups, need or len(groups))


def _compile_query(kind: str, value: Any, where: str) -> QueryCheck:
    import jmespath
    from jmespath.exceptions import JMESPathError

    queries = []
    for text in _strings(value, where, f"{kind} (a JMESPath query or a list of them)"):
        try:
            compiled = jmespath.compile(text)
        except JMESPathError as exc:
            raise RubricError(f"{where}: {kind} query `{text}` is not valid JMESPath: {str(exc).splitlines()[0]}") from None
        if _stops_projecting(compiled.parsed):
            raise RubricError(f"{where}: {kind} query `{text}`: after `x.*.a` jmespath projects only one more field, "
                              f"so `x.*.a.b` is always null; write `values(x)[].a.b`")
        queries.append((text, compiled))
    return QueryCheck(kind, queries)


def _stops_projecting(node: Any) -> bool:
    """A `x.*.a.b` in the AST: a subexpression whose left side is a value projection (jmespath.py applies
    `.b` to the projected list, which is null)."""
    if not isinstance(node, dict):
        return False
    children = node.get("children") or []
    if node.get("type") == "subexpression" and children and isinstance(children[0], dict) \
            and children[0].get("type") == "value_projection":
        return True
    return any(_stops_projecting(child) for child in children)


_JMESPATH_TYPES = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object",
                   type(None): "null"}
_ORDERING = frozenset({"lt", "lte", "gt", "gte"})


def query_warnings(text: str, parsed: Any) -> list[str]:
    """Why a compiled JMESPath query can never select anything, from its syntax tree (empty when it can):
    `!a.b` (the `!` applies to `a`), a bare CamelCase name compared like a string, an ordering against a
    string, a function that does not exist, is called with the wrong number of arguments or with a literal
    of a type it never accepts."""
    from jmespath.functions import Functions

    found: list[str] = []

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        kind, children = node.get("type"), node.get("children") or []
        if kind == "subexpression" and children and isinstance(children[0], dict) and children[0].get("type") == "not_expression":
            found.append(f"`{text}`: `!` binds tighter than `.`, so `!a.b` is always null; write `!(a.b)`")
        if kind == "comparator":
            for side in children:
                if isinstance(side, dict) and side.get("type") == "field" and str(side.get("value", ""))[:1].isupper() \
                        and any(isinstance(o, dict) and o.get("type") == "field" and o is not side for o in children):
                    found.append(f"`{text}`: `{side['value']}` is read as a field name; a string needs quotes: '{side['value']}'")
            if node.get("value") in _ORDERING and any(isinstance(c, dict) and c.get("type") == "literal"
                                                      and isinstance(c.get("value"), str) for c in children):
                found.append(f"`{text}`: <, <=, > and >= compare numbers only; against a string they never hold")
        if kind == "function_expression":
            name = node.get("value")
            spec = Functions.FUNCTION_TABLE.get(name)
            if spec is None:
                found.append(f"`{text}`: JMESPath has no function `{name}()`")
            else:
                signature = spec["signature"]
                variadic = bool(signature) and signature[-1].get("variadic")
                if len(children) < len(signature) or (not variadic and len(children) > len(signature)):
                    found.append(f"`{text}`: `{name}()` takes {len(signature)} argument(s), got {len(children)}")
                for argument, expected in zip(children, signature):
                    accepted = expected.get("types") or []
                    if isinstance(argument, dict) and argument.get("type") == "literal" and accepted \
                            and _JMESPATH_TYPES.get(type(argument.get("value"))) not in accepted:
                        found.append(f"`{text}`: `{name}()` never accepts {argument.get('value')!r} "
                                     f"({_JMESPATH_TYPES.get(type(argument.get('value')))}; it takes {', '.join(accepted)})")
        for child in children:
            walk(child)

    walk(parsed)
    return list(dict.fromkeys(found))


def rubric_warnings(rubric: Any) -> list[tuple[int, str]]:
    """(criterion index, message) for every yaml/hcl query of a valid rubric that can never match."""
    found = []
    for index, item in enumerate(rubric if isinstance(rubric, list) else []):
        try:
            check = compile_check(item.get("check"), f"rubric[{index}]") if isinstance(item, Mapping) else None
        except RubricError:
            continue
        for query_check in _query_checks(check):
            for text, compiled in query_check.queries:
                found.extend((index, f"rubric[{index}] '{item.get('id')}': {query_check.source} query {message}")
                             for message in query_warnings(text, compiled.parsed))
    return found


def _query_checks(check: Any) -> list[QueryCheck]:
    if isinstance(check, AnyOf):
        return [q for c in check.checks for q in _query_checks(c)]
    if isinstance(check, ForbidCheck):
        return _query_checks(check.inner)
    return [check] if isinstance(check, QueryCheck) else []


def _compile_shell(value: Any, where: str) -> ShellCheck:
    patterns = []
    for text in _strings(value, where, "shell (a command such as 'kubectl drain --ignore-daemonsets')"):
        parts = text.split()
        words = tuple(p.lower() for p in parts if not p.startswith("-"))
        flags = tuple(p for p in parts if p.startswith("-"))
        if not parts or parts[0].startswith("-"):
            raise RubricError(f"{where}: shell pattern {text!r} must start with the command name")
        patterns.append(ShellPattern(text, words, flags))
    return ShellCheck(patterns)


_STAGES = re.compile(r"^stages\s*>=\s*(\d+)$", re.I)


def _compile_dockerfile(value: Any, where: str) -> DockerfileCheck:
    assertions = []
    for text in _strings(value, where, "dockerfile (e.g. 'HEALTHCHECK', 'final USER ^(?!root)', 'stages >= 2')"):
        stages = _STAGES.match(text)
        if stages:
            assertions.append(DockerAssertion(text, False, None, None, int(stages.group(1))))
            continue
        rest = text
        final = text.lower().startswith("final ")
        if final:
            rest = text[6:].strip()
        instruction, _, expression = rest.partition(" ")
        if instruction.upper() not in DOCKERFILE_INSTRUCTIONS:
            raise RubricError(f"{where}: dockerfile assertion {text!r} must be 'stages >= N' or '[final] INSTRUCTION [regex]' "
                              f"with a Dockerfile instruction (FROM, RUN, USER, HEALTHCHECK, ...)")
        regex = None
        if expression.strip():
            try:
                regex = re.compile(expression.strip(), re.I)
            except re.error as exc:
                raise RubricError(f"{where}: dockerfile regex {expression.strip()!r} is not valid: {exc}") from None
        assertions.append(DockerAssertion(text, final, instruction.upper(), regex))
    return DockerfileCheck(assertions)


def _compile_pattern(value: Any, where: str) -> PatternCheck:
    regexes = []
    for text in _strings(value, where, "pattern (a regular expression or a list of them)"):
        try:
            regexes.append((text, re.compile(text, re.I | re.M)))
        except re.error as exc:
            raise RubricError(f"{where}: pattern {text!r} is not a valid regular expression: {exc}") from None
    return PatternCheck(regexes)


def compile_check(spec: Any, where: str, *, inside_forbid: bool = False) -> Any:
    """One `check` value (a mapping with one kind, or a list of them = alternatives) as a runnable check."""
    if isinstance(spec, list):
        if not spec:
            raise RubricError(f"{where}: an empty list of checks; give at least one")
        return AnyOf([compile_check(s, f"{where}[{i}]", inside_forbid=inside_forbid) for i, s in enumerate(spec)])
    cap = spec.get("cap") if isinstance(spec, Mapping) else None
    kinds = {k: v for k, v in spec.items() if k != "cap"} if isinstance(spec, Mapping) else spec
    if not isinstance(kinds, Mapping) or len(kinds) != 1:
        got = sorted(map(str, kinds)) if isinstance(kinds, Mapping) else type(spec).__name__
        raise RubricError(f"{where}: a check is a mapping with exactly one kind ({', '.join(CHECK_KINDS)}) and an "
                          f"optional 'cap', or a list of them; got {got}")
    ((kind, value),) = kinds.items()
    if kind not in CHECK_KINDS:
        from core.errors import did_you_mean

        raise RubricError(f"{where}: unknown check kind '{kind}' (one of {', '.join(CHECK_KINDS)})"
                          f"{did_you_mean(str(kind), CHECK_KINDS)}")
    check = _compile_kind(kind, value, f"{where}: {kind}", inside_forbid)
    if "cap" in spec:
        if kind == "forbid" or isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap <= 1:
            raise RubricError(f"{where}: 'cap' is the most this {kind} check may earn, a number above 0 and at most 1 "
                              f"(e.g. 0.5: prose gets half), and not on a forbid; got {cap!r}")
        check.cap = float(cap)
    return check


def _compile_kind(kind: str, value: Any, where: str, inside_forbid: bool) -> Any:
    """The runnable check of one kind."""
    if kind == "concept":
        return _compile_concept(value, where)
    if kind in ("yaml", "hcl"):
        return _compile_query(kind, value, where)
    if kind == "sql":
        return SqlCheck([(t, normalise_sql(t)) for t in _strings(value, where, "sql (a statement fragment or a list of them)")])
    if kind == "shell":
        return _compile_shell(value, where)
    if kind == "dockerfile":
        return _compile_dockerfile(value, where)
    if kind == "pattern":
        return _compile_pattern(value, where)
    if inside_forbid:
        raise RubricError(f"{where}: a forbid inside a forbid; write the inner check directly")
    return ForbidCheck(compile_check(value, where, inside_forbid=True))


@dataclass
class Criterion:
    id: str
    description: str
    weight: float
    check: Any

    @property
    def forbidden(self) -> bool:
        return isinstance(self.check, ForbidCheck)


def rubric_problems(rubric: Any) -> list[tuple[int | None, str]]:
    """Every problem of a task's rubric as (criterion index or None, message); empty when it is valid."""
    if not isinstance(rubric, list):
        return [(None, f"must be a list of {CRITERIA_RANGE[0]}-{CRITERIA_RANGE[1]} criteria (id, description, weight, check)")]
    problems: list[tuple[int | None, str]] = []
    low, high = CRITERIA_RANGE
    if not low <= len(rubric) <= high:
        problems.append((None, f"has {len(rubric)} criteria, needs {low} to {high}"))
    seen: set[str] = set()
    positive = 0
    for index, item in enumerate(rubric):
        label = f"rubric[{index}]"
        if not isinstance(item, Mapping):
            problems.append((index, f"{label}: each criterion is a mapping of {', '.join(CRITERION_KEYS)}"))
            continue
        cid = item.get("id")
        if isinstance(cid, str):
            label = f"rubric[{index}] '{cid}'"
        for key in item:
            if key not in CRITERION_KEYS:
                from core.errors import did_you_mean

                problems.append((index, f"{label}: unknown key '{key}' (allowed: {', '.join(CRITERION_KEYS)})"
                                        f"{did_you_mean(str(key), CRITERION_KEYS)}"))
        for key in ("id", "description", "check"):
            if key not in item:
                problems.append((index, f"{label}: missing key '{key}'"))
        if "id" in item:
            if not (isinstance(cid, str) and ID_PATTERN.match(cid)):
                problems.append((index, f"{label}: key 'id': {cid!r} must be lowercase letters, digits, '-' or '_' (2-48 chars)"))
            elif cid in seen:
                problems.append((index, f"{label}: key 'id': '{cid}' is used twice in this rubric; ids must be unique"))
            seen.add(str(cid))
        description = item.get("description")
        if "description" in item and not (isinstance(description, str) and 10 <= len(description.strip()) <= 300
                                          and "\n" not in description.strip()):
            problems.append((index, f"{label}: key 'description': one line of 10-300 characters, "
                                    "usable as a judge's checklist item"))
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not WEIGHT_RANGE[0] < weight <= WEIGHT_RANGE[1]:
            problems.append((index, f"{label}: key 'weight': {weight!r} must be a number above 0 "
                                    f"and at most {WEIGHT_RANGE[1]:g}"))
        if "check" in item:
            try:
                check = compile_check(item["check"], f"{label}: key 'check'")
            except RubricError as exc:
                problems.append((index, str(exc)))
            else:
                positive += not isinstance(check, ForbidCheck)
    if not problems and positive < MIN_POSITIVE:
        problems.append((None, f"has {positive} criteria that add points; at least {MIN_POSITIVE} must not be 'forbid'"))
    return problems


@lru_cache(maxsize=512)
def _compile_cached(key: str) -> tuple[Criterion, ...]:
    rubric = json.loads(key)
    problems = rubric_problems(rubric)
    if problems:
        from core.errors import UserError

        raise UserError(f"rubric: {problems[0][1]} (run 'devops-rl tasks validate')")
    return tuple(Criterion(c["id"], c["description"].strip(), float(c.get("weight", 1)),
                           compile_check(c["check"], f"rubric '{c['id']}'")) for c in rubric)


def compile_rubric(rubric: Sequence[Mapping]) -> tuple[Criterion, ...]:
    """The criteria of a rubric, compiled once per distinct rubric; UserError when it is invalid."""
    return _compile_cached(json.dumps(list(rubric), sort_keys=True, default=str))


# ---- scoring --------------------------------------------------------------------------------------


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
                return raw, segment
        return None

    def find_regex(self, regex: re.Pattern) -> tuple[str, bool] | None:
        """(where the regex matched, whether that is a code block), code first."""
        for label, body in self.artifacts.code_texts:
            match = regex.search(body)
            if match:
                return f"{label}: \"{_short(match.group(0), 60)}\"", True
        for segment in self.segments:
            if segment.kind == "code":
                continue
            match = regex.search(segment.text)
            if match and not (self.in_forbid and negated(segment.text[: match.start()], segment.text[match.end():])):
                return f"\"{_short(segment.text, 70)}\"", False
        return None


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

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "description": self.description, "weight": self.weight, "score": self.score,
                "status": self.status, "forbid": self.forbidden, "evidence": list(self.evidence)}


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
                                       criterion.forbidden, evidence))
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
    return isinstance(check, (QueryCheck, SqlCheck, ShellCheck, DockerfileCheck))


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
