"""Criteria derived from a task's reference answer, for a task with a reference and no rubric: the kinds and
names of its YAML documents, the values the question fixes, and the commands and flags of its shell blocks.

They are rubric criteria as a writer would write them (`yaml` and `shell` checks), so they score, print and
explain like a rubric; a hand-written rubric always wins. A YAML value whose line ends with the free mark
`# *` (CloudEval-YAML's) is left open. docs/tasks.md, "Tasks without a rubric: checks derived from the reference".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from core.errors import UserError
from core.rewards.parse.text import tokens
from core.rewards.rubric.checks import names

FREE_MARK = "# *"
_FREE_MARK = re.compile(r"(?:^|\s)#\s?\*\s*$")
IDENTITY_WEIGHT = 1.0
VALUES_WEIGHT = 2.0
COMMANDS_WEIGHT = 2.0
MAX_VALUES = 16  # value checks per document
MAX_NAMES = 4  # names the question writes, checked inside one longer value
MAX_COMMANDS = 12  # command patterns per shell block
LONG_VALUE = 400  # a longer string (a script) is not one value the question fixes
# Shell glue: present in every script, it says nothing about this task.
GLUE_COMMANDS = frozenset("""echo printf sleep cd set export true false exit read test [ [[ local source . return
shift wait trap unset eval awk sed grep egrep cut tr head tail sort uniq wc xargs tee cat jq yq date mkdir rm cp
mv chmod chown touch ls pwd seq basename dirname env let declare readonly""".split())
SCRIPT_SOURCES = ("shell block", "console block", "Dockerfile RUN")  # and `<document> script` (CI steps)
_IDENTITY_KEYS = frozenset({"kind", "apiVersion"})
_QUESTION_TERM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@=+-]*[A-Za-z0-9]|[A-Za-z0-9]")
_VALUE_PARTS = re.compile(r"[:/@=,]+")
_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9-]*$")
_PROGRAM = re.compile(r"^[a-z][a-z0-9._+-]*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class FreeMarkError(UserError):
    """A free mark (`# *`) on a line that holds no value to leave open."""


@dataclass(frozen=True)
class Leaf:
    """One scalar of a YAML document: where it sits (keys, with None for a list item), its value and line."""

    path: tuple[str | None, ...]
    value: Any
    line: int  # in the reference answer, 1-based
    free: bool


# ---- what the question fixes ------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def question_terms(desc: str) -> frozenset[str]:
    """The question's terms in lower case (`cart-api`, `3000`, `nginx:1.25`) and their parts split at `:/@=,`."""
    out: set[str] = set()
    for match in _QUESTION_TERM.finditer(desc):
        term = match.group(0).lower()
        out.add(term)
        out.update(part for part in _VALUE_PARTS.split(term) if part)
    return frozenset(out | _quoted(desc))


@lru_cache(maxsize=256)
def _question_words(desc: str) -> frozenset[str]:
    return frozenset(tokens(desc))


@lru_cache(maxsize=256)
def _quoted(desc: str) -> frozenset[str]:
    """What the question writes as code (`code`, `/var`), in lower case: a name however short."""
    return frozenset(span.strip().lower() for span in re.findall(r"`([^`\n]{2,60})`", desc))


def _name_like(part: str, desc: str) -> bool:
    """A part of a value that names something (`cart-api`, `v2`, `payments`, a `code` the question writes as
    code), not a common short word."""
    return (len(part) >= 3 and (bool(re.search(r"[-_\d.]", part)) or len(part) >= 5)) or part.lower() in _quoted(desc)


def fixed_predicates(leaf_key: str | None, value: Any, desc: str) -> list[tuple[str, str, int]]:
    """(JMESPath predicate on `@`, how it reads, times) for each way the question fixes this value; empty when it
    does not. `times` is 0 for a predicate on the whole value, else how often a name stands in the value (the
    predicate then applies to its whole names, `names(@)`).

    A number or string the question writes (`3000`, `cart-api`, `Ingress`) must be equal; a name the question
    writes inside a longer value (`cart-api` in an image, twice in a PromQL expression) must stand there as a whole
    name as often (`cart-api-v2` is another name); a boolean whose key the question names in words
    (`readOnlyRootFilesystem`: "read-only root filesystem") must be the same boolean."""
    terms = question_terms(desc)
    if isinstance(value, bool):
        words = tokens(_CAMEL.sub(" ", leaf_key or ""))
        if len(words) >= 2 and set(words) <= _question_words(desc):
            literal = "true" if value else "false"
            return [(f"@ == `{literal}`", literal, 0)]
        return []
    if isinstance(value, (int, float)):
        text = str(value)
        return [(f"@ == `{text}` || @ == {_string(text)}", text, 0)] if text.lower() in terms else []
    if not isinstance(value, str):
        return []
    text = value.strip()
    if not text or len(text) > LONG_VALUE:
        return []
    if text.lower() in terms:
        return [(f"@ == {_string(text)}", repr(text), 0)]
    within = names(text)
    return [(f"@ == {_string(part)}", f"has the name {part!r}", within.count(part))
            for part in dict.fromkeys(within) if part.lower() in terms and _name_like(part, desc)][:MAX_NAMES]


def _string(text: str) -> str:
    """A JMESPath raw string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _path(path: tuple[str | None, ...]) -> str:
    """`spec.template.spec.containers[].image`: keys (quoted when not identifiers), `[]` for list items."""
    out = ""
    for key in path:
        if key is None:
            out += "[]"
        else:
            name = key if _IDENTIFIER.match(key) else json.dumps(key)
            out += ("." if out else "") + name
    return out


def value_query(path: tuple[str | None, ...], predicate: str, count: int = 1, within: bool = False) -> str:
    """A query that holds when `count` values at `path` meet the predicate (a list path flattens its items), or
    (`within`) `count` of the whole names in the strings there."""
    selected = _path(path) if None in path else f"[{_path(path)}]"
    if within:
        selected += " | [].names(@)[]"
    return f"length({selected} | [?{predicate}]) >= `{count}`"


# ---- reading the reference ----------------------------------------------------------------------------------


def _leaves(node: Any, path: tuple, constructor: Any, first_line: int, marked: set[int], top: bool) -> Iterator[Leaf]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = _construct(constructor, key_node)
            if key is True and top:
                key = "on"  # YAML 1.1 reads GitHub Actions' `on:` as true (as the artifacts do)
            if isinstance(key, str) and key != "<<":
                yield from _leaves(value_node, (*path, key), constructor, first_line, marked, False)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _leaves(item, (*path, None), constructor, first_line, marked, False)
    elif isinstance(node, yaml.ScalarNode) and path:
        line = first_line + node.start_mark.line
        yield Leaf(path, _construct(constructor, node), line, line in marked)


def _construct(constructor: Any, node: Any) -> Any:
    """A scalar node's value (None for a merge key `<<`, a tag nothing constructs, or a collection)."""
    import yaml

    if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:merge":
        return None
    try:
        return constructor.construct_object(node)
    except (yaml.YAMLError, ValueError):
        return None


def _document_leaves(body: str, first_line: int, marked: set[int]) -> list[list[Leaf]]:
    """The leaves of each document of a YAML block, with the composer's lines (comments are not data)."""
    import yaml

    from core.rewards.parse.code_blocks import yaml_loader

    loader = yaml_loader()
    constructor = loader("")
    try:
        nodes = [n for n in yaml.compose_all(body, Loader=loader) if n is not None]
    except (yaml.YAMLError, RecursionError, ValueError):
        return []
    return [list(_leaves(node, (), constructor, first_line, marked, True)) for node in nodes]


def _marked_lines(body: str, first_line: int) -> dict[int, str]:
    return {first_line + at: line.strip() for at, line in enumerate(body.splitlines()) if _FREE_MARK.search(line)}


def free_mark_problems(reference: str) -> list[str]:
    """Why a free mark of the reference cannot be honoured (empty when all can): a mark outside a YAML block, in a
    YAML block that does not parse, on a line without a value, or on `kind`/`apiVersion` (what the object is)."""
    from core.rewards.parse.text import analyse

    problems = []
    for block in analyse(reference).blocks:
        first = block.line + 1
        marked = _marked_lines(block.body, first)
        if not marked:
            continue
        if block.kind not in ("yaml", "json"):
            line = min(marked)
            problems.append(f"line {line} of the reference: the free mark `{FREE_MARK}` is read on YAML values only; "
                            f"this is a {block.kind} block (remove the mark)")
            continue
        documents = _document_leaves(block.body, first, set(marked)) if block.valid else []
        if not documents:
            problems.append(f"line {min(marked)} of the reference: `{FREE_MARK}` in a YAML block that does not parse")
            continue
        leaves = [leaf for doc in documents for leaf in doc]
        with_value = {leaf.line for leaf in leaves}
        for line, text in sorted(marked.items()):
            if line not in with_value:
                problems.append(f"line {line} of the reference: `{FREE_MARK}` marks a free value, but `{text}` holds "
                                f"no value (mark the line of the value itself)")
            elif any(leaf.line == line and leaf.path[-1] in _IDENTITY_KEYS and len(leaf.path) == 1 for leaf in leaves):
                problems.append(f"line {line} of the reference: `{text}` says what the object is and cannot be free")
    return problems


# ---- the criteria -------------------------------------------------------------------------------------------


def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "doc"


def _document_criteria(leaves: list[Leaf], desc: str, where: str) -> list[dict[str, Any]]:
    """Identity (kind and name, or the top-level keys) and the values the question fixes, of one YAML document."""
    by_path = {leaf.path: leaf for leaf in leaves}
    kind = by_path.get(("kind",))
    name = by_path.get(("metadata", "name"))
    criteria: list[dict[str, Any]] = []
    scope = ""
    if kind is not None and isinstance(kind.value, str):
        scope = f"kind == {_string(kind.value)} && "
        label = kind.value
        queries = [f"kind == {_string(kind.value)}"]
        if name is not None and not name.free and isinstance(name.value, str):
            label = f"{kind.value}/{name.value}"
            scope = f"kind == {_string(kind.value)} && metadata.name == {_string(name.value)} && "
            queries.append(scope[:-4])
        described = f"a {kind.value}" + (f" named {name.value}" if len(queries) > 1 else "")
    else:
        tops = list(dict.fromkeys(leaf.path[0] for leaf in leaves if leaf.path[0] is not None))[:8]
        if not tops:
            return []
        label = f"YAML document {where}"
        queries = [f"contains(keys(@), {_string(key)})" for key in tops]
        described = "a YAML document with " + ", ".join(tops)
    slug = _slug(label)
    criteria.append({"id": f"{slug}-present", "description": f"The answer has {described} (as the reference).",
                     "weight": IDENTITY_WEIGHT, "check": {"yaml": queries}})
    checked = [(leaf.path, leaf.value) for leaf in leaves if not leaf.free and leaf.path != ("metadata", "name")
               and not (len(leaf.path) == 1 and leaf.path[0] in _IDENTITY_KEYS)]
    values = {scope + query: reads for query, reads in _value_queries(checked, desc).items()}
    if values:
        shown = list(values.values())[:4]
        criteria.append({"id": f"{slug}-values",
                         "description": f"{label} sets the values the question fixes: " + "; ".join(shown) +
                                        ("; ..." if len(values) > 4 else ""),
                         "weight": VALUES_WEIGHT, "check": {"yaml": list(values)[:MAX_VALUES]}})
    return criteria


def _data_leaves(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield from _data_leaves(value, (*path, key))
    elif isinstance(node, list):
        for item in node:
            yield from _data_leaves(item, (*path, None))
    elif path:
        yield path, node


HCL_NAMED_BLOCKS = ("resource", "data")  # two labels: type and name
HCL_LABELLED_BLOCKS = ("module", "variable", "output")  # one label


def _hcl_criteria(artifacts: Any, desc: str) -> list[dict[str, Any]]:
    """The HCL blocks merged (as the `hcl` checks read them): each resource, data source, module, variable and
    output by type and name, and the values the question fixes."""
    try:
        doc = artifacts.hcl
    except ImportError:
        return []
    if not isinstance(doc, dict):
        return []
    named = []
    for block in HCL_NAMED_BLOCKS:
        for kind, items in (doc.get(block) or {}).items() if isinstance(doc.get(block), dict) else ():
            named.extend((block, kind, name) for name in (items if isinstance(items, dict) else {}))
    for block in HCL_LABELLED_BLOCKS:
        named.extend((block, name) for name in (doc.get(block) if isinstance(doc.get(block), dict) else {}))
    criteria = []
    if named:
        criteria.append({"id": "hcl-blocks", "description": "The answer's HCL declares the reference's "
                         + ", ".join(".".join(n) for n in named[:4]) + (", ..." if len(named) > 4 else ""),
                         "weight": IDENTITY_WEIGHT, "check": {"hcl": [_path(n) for n in named[:MAX_VALUES]]}})
    values = _value_queries(list(_data_leaves(doc)), desc)
    if values:
        criteria.append({"id": "hcl-values", "description": "The HCL sets the values the question fixes: "
                         + "; ".join(list(values.values())[:4]) + ("; ..." if len(values) > 4 else ""),
                         "weight": VALUES_WEIGHT, "check": {"hcl": list(values)[:MAX_VALUES]}})
    return criteria


_WHOLE_BEFORE, _WHOLE_AFTER = r"(?<![\w.-])", r"(?![\w-])"  # a whole value: 8080 is not in 18080
DOCKERFILE_KEPT = ("USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD", "WORKDIR")


def _dockerfile_criteria(artifacts: Any, desc: str) -> list[dict[str, Any]]:
    """Each Dockerfile's stages and base images, the instructions that shape the image (USER, EXPOSE, ...) and
    the instructions whose arguments hold a value the question fixes."""
    criteria = []
    for at, instructions in enumerate(artifacts.dockerfiles):
        assertions: list[str] = []
        stages = sum(word == "FROM" for word, _ in instructions)
        if stages > 1:
            assertions.append(f"stages >= {stages}")
        for word, args in instructions:
            image = args.split()[0].split("@")[0].rsplit(":", 1)[0] if word == "FROM" and args.split() else ""
            if image:
                assertions.append(f"FROM {re.escape(image)}")
            elif word in DOCKERFILE_KEPT:
                assertions.append(word)
            for value in args.split():
                if _fixed_word(value, desc) and not value.startswith("$"):
                    assertions.append(f"{word} {_WHOLE_BEFORE}{re.escape(value)}{_WHOLE_AFTER}")
        assertions = list(dict.fromkeys(assertions))
        if assertions:
            criteria.append({"id": f"dockerfile-{at + 1}", "description": "The answer's Dockerfile builds as the "
                             f"reference's: {', '.join(assertions[:4])}" + (", ..." if len(assertions) > 4 else ""),
                             "weight": COMMANDS_WEIGHT, "check": {"dockerfile": assertions[:MAX_VALUES]}})
    return criteria


def _value_queries(leaves: list[tuple[tuple, Any]], desc: str) -> dict[str, str]:
    """query -> how it reads, for the values the question fixes; a value that several items of one list path hold
    must be held as many times (one of three ports changed is a change), and a name as many times as it stands in
    the strings there."""
    counts: dict[tuple[tuple, str, bool], int] = {}
    reads: dict[tuple[tuple, str, bool], str] = {}
    for path, value in leaves:
        key = next((k for k in reversed(path) if k is not None), None)
        for predicate, text, times in fixed_predicates(key, value, desc):
            slot = (path, predicate, times > 0)
            counts[slot] = counts.get(slot, 0) + max(1, times)
            reads.setdefault(slot, f"{_path(path)} {text}")
    return {value_query(path, predicate, count, within): reads[(path, predicate, within)]
            for (path, predicate, within), count in counts.items()}


def _fixed_word(word: str, desc: str) -> bool:
    terms = question_terms(desc)
    return word.lower() in terms or any(p.lower() in terms and _name_like(p, desc) for p in _VALUE_PARTS.split(word) if p)


def command_pattern(words: tuple[str, ...], desc: str) -> str | None:
    """A rubric shell pattern for one command of the reference: the program and its subcommands, each flag (with
    its value when the question fixes it) and the arguments the question fixes; None for glue (echo, grep, ...)."""
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if not _PROGRAM.match(program) or program in GLUE_COMMANDS:
        return None
    parts, flags = [program], []
    seen_flag, open_flag = False, None
    for word in words[1:]:
        if word == "--":
            break
        if any(c.isspace() for c in word) or not word:
            open_flag = None
            continue
        if word.startswith("-") and len(word) > 1:
            seen_flag = True
            name, eq, value = word.partition("=")
            flags.append(word if eq and _fixed_word(value, desc) else name)
            open_flag = None if eq else len(flags) - 1
            continue
        if open_flag is not None and _fixed_word(word, desc) and not word.startswith("-") and \
                (flags[open_flag].startswith("--") or len(flags[open_flag]) == 2):
            flags[open_flag] += "=" + word  # `-n prod`: the flag with its value, wherever it stands
        elif _fixed_word(word, desc) or (not seen_flag and len(parts) < 3 and _SUBCOMMAND.match(word)):
            parts.append(word)
        open_flag = None
    return " ".join([*parts, *dict.fromkeys(flags)])


def _shell_criteria(artifacts: Any, desc: str) -> list[dict[str, Any]]:
    by_source: dict[str, list[str]] = {}
    for command in artifacts.commands:
        if not command.source.startswith(SCRIPT_SOURCES) and not command.source.endswith(" script"):
            continue  # inline commands in prose are examples, not the artifact
        pattern = command_pattern(command.words, desc)
        if pattern is None:
            continue
        patterns = by_source.setdefault(command.source, [])
        if pattern not in patterns:
            patterns.append(pattern)
    criteria = []
    for source, patterns in by_source.items():
        programs = list(dict.fromkeys(p.split()[0] for p in patterns))
        criteria.append({"id": "commands-" + _slug(source.replace(" block at", "").replace(" script", "")),
                         "description": f"The answer runs the commands of the reference's {source} "
                                        f"({', '.join(programs[:5])}) with their flags.",
                         "weight": COMMANDS_WEIGHT, "check": {"shell": patterns[:MAX_COMMANDS]}})
    return criteria


@lru_cache(maxsize=256)
def _derive(reference: str, desc: str) -> str:
    from core.rewards.parse.artifacts import Artifacts
    from core.rewards.parse.text import analyse

    problems = free_mark_problems(reference)
    if problems:
        raise FreeMarkError(problems[0])
    analysis = analyse(reference)
    criteria: list[dict[str, Any]] = []
    for block in analysis.blocks:
        if block.kind not in ("yaml", "json") or not block.valid or not block.body.strip():
            continue
        first = block.line + 1
        documents = _document_leaves(block.body, first, set(_marked_lines(block.body, first)))
        for at, leaves in enumerate(documents):
            where = f"at line {block.line}" + (f" #{at + 1}" if len(documents) > 1 else "")
            criteria.extend(_document_criteria(leaves, desc, where))
    artifacts = Artifacts(analysis)
    criteria.extend(_hcl_criteria(artifacts, desc))
    criteria.extend(_dockerfile_criteria(artifacts, desc))
    criteria.extend(_shell_criteria(artifacts, desc))
    seen: dict[str, int] = {}
    for criterion in criteria:  # two documents of one kind and name keep distinct ids
        count = seen.get(criterion["id"], 0)
        seen[criterion["id"]] = count + 1
        if count:
            criterion["id"] = f"{criterion['id']}-{count + 1}"
    return json.dumps(criteria)


def derive_rubric(reference: str | None, desc: str) -> list[dict[str, Any]]:
    """The criteria derived from a reference answer, as rubric mappings (id, description, weight, check); empty
    when it has no YAML document or shell command to check. FreeMarkError for a free mark that cannot be honoured."""
    if not reference or not reference.strip():
        return []
    return json.loads(_derive(reference, desc))


@lru_cache(maxsize=256)
def _compiled(reference: str, desc: str) -> tuple:
    from core.rewards.rubric.compile import Criterion, compile_check

    return tuple(Criterion(c["id"], c["description"], float(c["weight"]), compile_check(c["check"], f"derived '{c['id']}'"))
                 for c in derive_rubric(reference, desc))


def derived_criteria(reference: str | None, desc: str) -> tuple:
    """`derive_rubric`'s criteria compiled, once per (reference, question)."""
    if not reference or not reference.strip():
        return ()
    return _compiled(reference, desc)
