"""Compiling a task's rubric: its YAML criteria validated (one message per problem) and turned into runnable
checks, once per distinct rubric; plus the warnings about JMESPath queries that can never match.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from core.rewards.parse.artifacts import normalise_sql
from core.rewards.parse.text import phrase_key
from core.rewards.rubric.checks import (
    AnyOf,
    ConceptCheck,
    DockerAssertion,
    DockerfileCheck,
    ForbidCheck,
    PatternCheck,
    QueryCheck,
    RelationCheck,
    RunCheck,
    ShellCheck,
    ShellPattern,
    SqlCheck,
    _loose_pattern,
    jmespath_function_table,
)

CHECK_KINDS = ("concept", "yaml", "hcl", "sql", "shell", "dockerfile", "pattern", "relation", "run", "forbid")
CRITERIA_RANGE = (4, 10)
MIN_POSITIVE = 3  # criteria that add points (not `forbid`)
WEIGHT_RANGE = (0.0, 10.0)  # exclusive low, inclusive high
CRITERION_KEYS = ("id", "description", "weight", "check", "decisive")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{1,47}$")
DOCKERFILE_INSTRUCTIONS = frozenset(
    "FROM RUN CMD LABEL MAINTAINER EXPOSE ENV ADD COPY ENTRYPOINT VOLUME USER WORKDIR ARG ONBUILD STOPSIGNAL "
    "HEALTHCHECK SHELL".split())


class RubricError(ValueError):
    """A rubric that cannot be compiled; the message names the key and the fix."""


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
    spellings = {text: [(jmespath.compile(variant), needles) for variant, needles in key_spellings(text)]
                 for text, _ in queries} if kind == "yaml" else {}
    return QueryCheck(kind, queries, {text: found for text, found in spellings.items() if found})


_QUERY_LITERAL = re.compile(r"'(?:\\.|[^'\\])*'|`(?:\\.|[^`\\])*`|\"(?:\\.|[^\"\\])*\"")
_QUERY_NAME = re.compile(r"(?<![\w@])[A-Za-z_][A-Za-z0-9_]*(?!\w|\s*\()")
_SNAKE = re.compile(r"(?<=[a-z0-9])_([a-z0-9])")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def key_spellings(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """The query with its snake_case keys in camelCase and with its camelCase keys in snake_case (`page_alert`
    <-> `pageAlert`: tools spell the same setting both ways, a CRD often camelCase), each with the keys it
    respells; literals and function names are left alone. Empty when there is nothing to respell."""
    out = []
    for pattern, respell in ((_SNAKE, lambda m: m.group(1).upper()), (_CAMEL, lambda m: "_" + m.group(1).lower())):
        needles: list[str] = []

        def swap(match: re.Match, pattern=pattern, respell=respell, needles=needles) -> str:
            name = match.group(0)
            new = pattern.sub(respell, name)
            if new != name:
                needles.append(new)
            return new

        pieces, at = [], 0
        for literal in _QUERY_LITERAL.finditer(text):
            pieces.append(_QUERY_NAME.sub(swap, text[at:literal.start()]))
            pieces.append(literal.group(0))
            at = literal.end()
        pieces.append(_QUERY_NAME.sub(swap, text[at:]))
        if needles:
            out.append(("".join(pieces), tuple(dict.fromkeys(needles))))
    return out


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
    table = jmespath_function_table()
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
            spec = table.get(name)
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


def _compile_relation(value: Any, where: str) -> RelationCheck:
    """`relation: NAME` or `relation: {name: NAME, <argument>: <value>, ...}`: a named, tested predicate of
    core.rewards.rubric.relations over the answer's parsed artifacts."""
    from core.errors import did_you_mean
    from core.rewards.rubric.relations import RELATIONS, relation_arguments

    if isinstance(value, str):
        name, arguments = value.strip(), {}
    elif isinstance(value, Mapping) and isinstance(value.get("name"), str):
        name, arguments = value["name"].strip(), {str(k): v for k, v in value.items() if k != "name"}
    else:
        raise RubricError(f"{where}: relation takes a name ('selector_matches') or a mapping with 'name' and its "
                          f"arguments; got {type(value).__name__}")
    if name not in RELATIONS:
        raise RubricError(f"{where}: unknown relation '{name}' (one of {', '.join(sorted(RELATIONS))})"
                          f"{did_you_mean(name, sorted(RELATIONS))}")
    try:
        arguments = relation_arguments(name, arguments)
    except ValueError as exc:
        raise RubricError(f"{where}: relation '{name}': {exc}") from None
    return RelationCheck(name, RELATIONS[name], arguments)


def _compile_run(value: Any, where: str, inside_forbid: bool) -> RunCheck:
    """`run: {engine: NAME, ...scenario}`: an executed check (core.rewards.engines), the scenario checked here."""
    from core.errors import did_you_mean
    from core.rewards.engines import ENGINES

    if inside_forbid:
        raise RubricError(f"{where}: an executed check cannot be forbidden; write the scenario the answer must pass")
    if not isinstance(value, Mapping) or not isinstance(value.get("engine"), str):
        raise RubricError(f"{where}: run takes a mapping with 'engine' ({', '.join(sorted(ENGINES))}) and its scenario")
    name = value["engine"]
    if name not in ENGINES:
        raise RubricError(f"{where}: unknown engine '{name}' (one of {', '.join(sorted(ENGINES))})"
                          f"{did_you_mean(name, sorted(ENGINES))}")
    problems = ENGINES[name].scenario_problems(value)
    if problems:
        raise RubricError(f"{where}: {name} scenario: {problems[0]}")
    return RunCheck(name, json.loads(json.dumps(dict(value), default=str)))


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
    if kind == "relation":
        return _compile_relation(value, where)
    if kind == "run":
        return _compile_run(value, where, inside_forbid)
    if inside_forbid:
        raise RubricError(f"{where}: a forbid inside a forbid; write the inner check directly")
    return ForbidCheck(compile_check(value, where, inside_forbid=True))


@dataclass
class Criterion:
    id: str
    description: str
    weight: float
    check: Any
    # A decisive criterion decides whether the answer works at all: when it fails, the final reward is capped
    # well below an honest answer, whatever else the answer has (docs/reward.md, "Decisive criteria").
    decisive: bool = False

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
        if not isinstance(item.get("decisive", False), bool):
            problems.append((index, f"{label}: key 'decisive': {item.get('decisive')!r} must be true or false"))
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
                           compile_check(c["check"], f"rubric '{c['id']}'"), bool(c.get("decisive", False)))
                 for c in rubric)


def compile_rubric(rubric: Sequence[Mapping]) -> tuple[Criterion, ...]:
    """The criteria of a rubric, compiled once per distinct rubric; UserError when it is invalid."""
    return _compile_cached(json.dumps(list(rubric), sort_keys=True, default=str))
