"""The rubric's checks: one class per check kind (concept, yaml/hcl queries, sql, shell, dockerfile, pattern,
alternatives, forbid), each run on one answer's view to an `Outcome` with evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from core.rewards.checks.signals import _snippet
from core.rewards.parse.artifacts import Present
from core.rewards.parse.text import _TOKEN, phrase_key

if TYPE_CHECKING:
    from core.rewards.rubric.scoring import _View


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
    """The share of assertions that hold; `find(item)` gives (evidence when it holds or None, evidence when not);
    it is called once per item (it may mark what it used)."""
    met, evidence = 0, []
    for item in items:
        hit, miss = find(item)
        met += hit is not None
        evidence.append(miss if hit is None else hit)
    return Outcome(met / len(items), evidence)


def _truthy(value: Any) -> bool:
    """JMESPath's truth, except that a list of only false values (`[[], null]`, what a projection over
    documents without a match returns) is no match either; an empty mapping in a list is an item that was
    selected (`ingress: [{}]`, the allow-all rule), so `[{}]` is a match; so is a key written without a value
    (`Present`, `on: pull_request:`)."""
    if isinstance(value, list):
        return any(isinstance(item, dict) or _truthy(item) for item in value)
    return isinstance(value, Present) or value not in (None, False, {}, "")


@dataclass
class QueryCheck(_Check):
    """JMESPath queries over the answer's YAML/JSON documents (`yaml`) or merged HCL (`hcl`); each must
    select something (non-empty, not false) in some document."""

    source: str  # "yaml" | "hcl"
    queries: list[tuple[str, Any]]
    # query text -> [(the query with its keys respelled, the respelled keys)]: tried when the query selects
    # nothing and a YAML/JSON block of the answer has one of those keys (`pageAlert` for `page_alert`)
    spellings: dict[str, list[tuple[Any, tuple[str, ...]]]] = field(default_factory=dict)

    def run(self, view: _View) -> Outcome:
        artifacts = view.artifacts
        docs = artifacts.documents if self.source == "yaml" else (
            [("HCL", artifacts.hcl)] if artifacts.hcl is not None else [])
        if self.source == "hcl" and "python-hcl2" in artifacts.missing:
            return Outcome(0.0, ["skipped: python-hcl2 is not installed"])

        def find(query: tuple[str, Any]) -> tuple[str | None, str]:
            tries = [(query[1], docs)]
            if self.source == "yaml":
                # then its keys' other spelling where the answer has it, and keys written without a value
                tries += [(variant, docs) for variant, keys in self.spellings.get(query[0], ())
                          if any(key in artifacts.yaml_text for key in keys)]
                if artifacts.has_empty_keys:
                    tries += [(compiled, artifacts.query_documents) for compiled, _ in list(tries)]
            for compiled, documents in tries:
                for index, (label, doc) in enumerate(documents):
                    if _truthy(_search(compiled, doc)):
                        if self.source == "yaml":
                            view.use_document(index)
                        else:
                            for block in artifacts.valid_blocks:
                                if block.kind == "hcl":
                                    view.use(block)
                        return f"{label}: `{query[0]}`", ""
            return None, f"no {self.source.upper()} document has `{query[0]}`"

        return _tally(self.queries, find)


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

        @functions.signature({"types": ["string"]})
        def _func_names(self, text):
            return names(text)

    return jmespath.Options(custom_functions=TolerantFunctions())


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def names(text: str) -> list[str]:
    """The whole names in a string, in order (`names(@)` in a query): runs of letters, digits, `.`, `_` and `-`
    without a trailing dot. `'{job="cart-api-v2"}'` holds `cart-api-v2` and not `cart-api`."""
    return [name.rstrip(".") for name in _NAME.findall(text)]


def jmespath_function_table() -> dict:
    """The functions a query may call: JMESPath's own and `names`."""
    return type(_jmespath_options().custom_functions).FUNCTION_TABLE


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
        def find(pattern: tuple[str, str]) -> tuple[str | None, str]:
            for index, statement in enumerate(statements):
                if pattern[1] in statement[0] or pattern[1] in statement[1]:
                    view.use(view.artifacts.sql_blocks[index])
                    return f"SQL: `{_short(statement[1], 70)}`", ""
            return None, f"no parsed SQL statement has `{pattern[0]}`"

        return _tally(self.patterns, find)


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
        if value and len(name) == 2 and name[1] != "-" and (word == name + value or (
                word[:1] == "-" and word[1:2] != "-" and name[1] in _short_group(word) and words[at + 1:at + 2] == (value,))):
            return True  # -nprod, -sS URL
        if not value and len(name) == 2 and name[1] != "-" and word[:1] == "-" and word[1:2] != "-" \
                and name[1] in _short_group(word):
            return True  # -k inside -fsSLk, -z inside -zw3 (a flag asked with its value needs that value)
    return False


def _short_group(word: str) -> str:
    """The letters of a short-option group ("-fsSL" -> "fsSL", "-zw3" -> "zw")."""
    match = re.match(r"-([A-Za-z]+)", word)
    return match.group(1) if match else ""


def _has_words(words: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """The command is `wanted[0]` and the other wanted words follow in order (flags may sit between); both
    in lower case (`redis-cli INFO` is `redis-cli info`). A name may be written with its kind (`deploy/web`
    for `web`)."""
    if not words or words[0].rsplit("/", 1)[-1] != wanted[0]:
        return False
    rest = iter(words[1:])
    return all(any(w == want or w.endswith("/" + want) for w in rest) for want in wanted[1:])


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
            if where is not None and best > 0:
                view.use_source(where.source)
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
        artifacts = view.artifacts

        def find(assertion: DockerAssertion) -> tuple[str | None, str]:
            for block, instructions in zip(artifacts.dockerfile_blocks, artifacts.dockerfiles):
                hit = _docker_hit(assertion, instructions)
                if hit:
                    view.use(block)
                    return hit, ""
            return None, f"no Dockerfile has `{assertion.raw}`"

        return _tally(self.assertions, find)


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
class RelationCheck(_Check):
    """A named predicate of core.rewards.rubric.relations (selectors that match the workload's pods, a rollout
    that can progress, a PodDisruptionBudget that allows a disruption, ...) over the parsed artifacts."""

    name: str
    function: Any
    arguments: dict[str, Any]

    def run(self, view: _View) -> Outcome:
        score, evidence = self.function(view.artifacts, **self.arguments)
        if score > 0 and not view.in_forbid:
            view.artifacts.mark_labels(evidence)
        return Outcome(max(0.0, min(1.0, float(score))), [f"{self.name}: {e}" for e in evidence])


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


@dataclass
class RunCheck(_Check):
    """An executed check (core.rewards.engines): the engine runs the answer's artifact in the task's scenario;
    all or nothing, since an engine answers exactly (the alert fires in time or it does not)."""

    engine: str
    scenario: dict[str, Any]

    def run(self, view: _View) -> Outcome:
        from core.rewards.engines import ENGINES, run_engine

        artifact = ENGINES[self.engine].artifact(view.artifacts, self.scenario)
        if artifact is None:
            return Outcome(0.0, [f"{self.engine}: the answer has nothing this engine runs"])
        result = run_engine(self.engine, artifact.text, self.scenario)
        if result.passed and not view.in_forbid:
            for block in artifact.blocks:
                view.use(block)
        return Outcome(1.0 if result.passed else 0.0, [f"{self.engine}: {line}" for line in result.evidence])
