"""The answer's artifacts, parsed with real parsers: YAML/JSON documents, HCL (python-hcl2), SQL statements
(sqlglot), shell commands and pipelines (bashlex) and Dockerfile instructions; each parsed once, on first use.

The rubric's structural checks and the danger and secret checks read them from one `Artifacts` per answer.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from core.rewards.parse.code_blocks import BlockReport, dockerfile_instructions, yaml_documents
from core.rewards.parse.commands import (
    Command,
    _add_command,
    _yaml_scripts,
    console_script,
    fixed_variables,
    parse_shell,
    resolve_variables,
)
from core.rewards.parse.text import Analysis, tokens

log = logging.getLogger(__name__)

_SQL_SPACES = re.compile(r"\s*([(),=;])\s*")


def _unquote(value: Any) -> Any:
    """python-hcl2 keeps HCL's quotes ('"x"') and marks blocks with `__is_block__`: plain data instead."""
    if isinstance(value, str):
        return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items() if k != "__is_block__"}
    return value


def _merge(into: dict, other: dict) -> None:
    """Deep-merge mappings (two `resource "aws_s3_bucket"` blocks end up side by side under one type).
    Nested mappings of `other` are copied, never shared: `other` may be a cached parse of another answer."""
    for key, value in other.items():
        if isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value)
        else:
            into[key] = value


# Top-level blocks without labels that a module repeats (`import {}` per adopted resource): a list, one item
# each, so they stay countable (`length(import)`, `import[].to`); labelled blocks merge by type and name.
REPEATED_HCL_BLOCKS = frozenset({"import", "moved", "removed"})


@lru_cache(maxsize=1024)
def hcl_loads(body: str) -> tuple[dict | None, str]:
    """python-hcl2's reading of an HCL block, or None and the first line of its error: read once for both the
    artifacts and the python-hcl2 validator (it is the costliest parser here, ~5 ms a block). Cached and
    shared: callers must not modify it. ImportError when python-hcl2 is not installed."""
    import hcl2

    try:
        return hcl2.loads(body), ""
    except Exception as exc:  # lark raises many error types on bad input
        message = str(exc).strip()
        return None, message.splitlines()[0] if message else type(exc).__name__


@lru_cache(maxsize=1024)
def parse_hcl(body: str) -> dict | None:
    """An HCL block as plain data: `{"resource": {"aws_s3_bucket": {"logs": {...}}}, "variable": {...},
    "import": [{...}, {...}]}` (labelled top-level blocks merged by type and name; `import`, `moved` and
    `removed` blocks and repeated nested blocks such as `ingress` stay lists). None when it does not parse;
    ImportError when python-hcl2 is not installed."""
    raw, _ = hcl_loads(body)
    if raw is None:
        return None
    doc: dict = {}
    for key, value in _unquote(raw).items():
        if key in REPEATED_HCL_BLOCKS and isinstance(value, list):
            doc[key] = value
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
            merged: dict = {}
            for item in value:
                _merge(merged, item)
            doc[key] = merged
        else:
            doc[key] = value
    return doc


class _DebugLevel(logging.Filter):
    """Turns a record into a DEBUG one: it reaches the log file, never the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


@lru_cache(maxsize=1)
def quiet_sqlglot() -> None:
    """sqlglot warns about every statement it reads as a generic Command ("contains unsupported syntax"):
    expected for answers in many dialects, so its messages go to the log file as DEBUG, not to stderr."""
    logging.getLogger("sqlglot").addFilter(_DebugLevel())


def normalise_sql(text: str) -> str:
    """Upper case, single spaces, no spaces around punctuation: how SQL statements and patterns compare."""
    return _SQL_SPACES.sub(r"\1", " ".join(text.upper().split())).rstrip(";")


@lru_cache(maxsize=1024)
def parse_sql(body: str) -> tuple[tuple[str, str], ...]:
    """Each statement of a SQL block as (sqlglot's rendering, the statement as written), both normalised.
    Statements no dialect parses are left out; psql meta-commands (`\\d`) are ignored."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    quiet_sqlglot()
    script = "\n".join(ln for ln in body.splitlines() if not ln.lstrip().startswith("\\"))
    script = "\n".join(ln.split("--", 1)[0] if "--" in ln and "'" not in ln else ln for ln in script.splitlines())
    out = []
    for raw in (s for s in script.split(";") if s.strip()):
        for dialect in ("postgres", "mysql", None):
            try:
                parsed = [e for e in sqlglot.parse(raw, read=dialect) if e is not None]
            except (SqlglotError, RecursionError, ValueError):
                continue
            if parsed:
                out.append((normalise_sql(parsed[0].sql(dialect=dialect)), normalise_sql(raw)))
                break
    return tuple(out)


def _yaml11_keys(doc: Any) -> Any:
    """YAML 1.1 reads a GitHub Actions `on:` key as the boolean True: give it back its name."""
    if isinstance(doc, dict) and True in doc:
        return {("on" if key is True else key): value for key, value in doc.items()}
    return doc


def doc_label(doc: Any, block: BlockReport) -> str:
    """`Deployment/cart-api` for a Kubernetes object, else the block's kind and line."""
    if isinstance(doc, dict) and isinstance(doc.get("kind"), str):
        meta = doc.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return f"{doc['kind']}/{name}" if name else str(doc["kind"])
    return f"{block.kind} block at line {block.line}"


# Code blocks that are artifacts the answer hands over (configuration, code, commands); `text` blocks
# (logs, output, timelines) are not.
ARTIFACT_KINDS = frozenset({"yaml", "json", "hcl", "sql", "shell", "console", "dockerfile", "python", "other"})
_DOCUMENT_START = re.compile(r"^---", re.M)


@dataclass
class Unit:
    """One artifact of the answer, the grain of precision: a YAML/JSON document or another code block."""

    label: str
    block: BlockReport
    start: int  # where it lies in the block's body
    end: int
    lines: int  # non-blank, non-comment lines: its size

    @property
    def text(self) -> str:
        return self.block.body[self.start:self.end]

    @cached_property
    def joined(self) -> str:
        """Its tokens joined by spaces, with a space at each end (how phrases are looked up)."""
        return " " + " ".join(tokens(self.text)) + " "


def _content_lines(text: str) -> int:
    return sum(1 for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "//", "-- ")))


def _units_of(block: BlockReport, docs: tuple) -> list[Unit]:
    """A YAML block's documents as units when its `---` pieces pair up with them; else the block as one."""
    body = block.body
    if block.kind == "yaml" and len(docs) > 1:
        cuts = [0, *(m.start() for m in _DOCUMENT_START.finditer(body)), len(body)]
        pieces = [(a, b) for a, b in zip(cuts, cuts[1:]) if _content_lines(body[a:b].replace("---", "", 1))]
        if len(pieces) == len(docs):
            return [Unit(doc_label(doc, block), block, a, b, _content_lines(body[a:b].replace("---", "", 1)))
                    for doc, (a, b) in zip(docs, pieces)]
    label = doc_label(docs[0], block) if len(docs) == 1 else f"{block.kind} block at line {block.line}"
    return [Unit(label, block, 0, len(body), _content_lines(body))]


class Present(dict):
    """An empty mapping that stands for a key written without a value: JMESPath reads it as `{}` (so `!x` and
    `x == `{}`` behave as for an empty value), the rubric's "does the query select something" counts it."""

    __slots__ = ()


def _present(node: Any, depth: int = 0) -> Any:
    """The document with every null mapping value replaced by `Present()`; the same object when it has none."""
    if depth > 40:
        return node
    if isinstance(node, dict):
        items = {key: (Present() if value is None else _present(value, depth + 1)) for key, value in node.items()}
        return node if all(items[key] is value for key, value in node.items()) else items
    if isinstance(node, list):
        items = [_present(value, depth + 1) for value in node]
        return node if all(a is b for a, b in zip(items, node)) else items
    return node


_JSON_START = ("{", "[{")
# a key line with no value (or null, ~), followed by a line that is not deeper nor a list item under it, or by the end
_EMPTY_KEY = re.compile(r"^([ \t]*)(?:- )?[^\s#][^\n]*:[ \t]*(?:null|~|\"\"|'')?[ \t]*$(?!\n\1[ \t]|\n\1- )", re.M)


def _json_arguments(words: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(flag, parsed value) for each JSON object given as a command argument (`--policy '{"Statement": ...}'`)."""
    import json

    out = []
    for at, word in enumerate(words[1:], 1):
        if not word.startswith(_JSON_START) or len(word) > 100_000:
            continue
        flag = words[at - 1] if words[at - 1].startswith("-") else ""
        if not flag and "=" in word:
            continue
        try:
            value = json.loads(word)
        except ValueError:
            continue
        if isinstance(value, (dict, list)):
            out.append((flag or "argument", value))
    for word in words[1:]:  # --flag='{...}'
        name, _, value_text = word.partition("=")
        if name.startswith("--") and value_text.startswith(_JSON_START):
            try:
                value = json.loads(value_text)
            except ValueError:
                continue
            if isinstance(value, (dict, list)):
                out.append((name, value))
    return out


class Artifacts:
    """The parsed artifacts of one answer, each parsed on first use; the rubric's checks `mark` the units
    whose content earned a criterion something (precision: what no criterion asks for is extra)."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.missing: set[str] = set()  # parsers that are not installed (the checks needing them are skipped)
        self.used: set[int] = set()  # indexes into `units` that a criterion drew on

    @cached_property
    def valid_blocks(self) -> list[BlockReport]:
        return [b for b in self.analysis.blocks if b.valid and b.body.strip()]

    @cached_property
    def units(self) -> list[Unit]:
        """Every artifact: each document of a YAML block, each other code block of an artifact kind."""
        out: list[Unit] = []
        for block in self.valid_blocks:
            if block.kind in ARTIFACT_KINDS:
                docs = yaml_documents(block.body) if block.kind in ("yaml", "json") else ()
                out.extend(_units_of(block, docs) if docs else [Unit(f"{block.kind} block at line {block.line}",
                                                                     block, 0, len(block.body), _content_lines(block.body))])
        return out

    @cached_property
    def _units_by_block(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for index, unit in enumerate(self.units):
            out.setdefault(id(unit.block), []).append(index)
        return out

    def mark(self, block: BlockReport | None, at: int | None = None) -> None:
        """A criterion drew on this block: on the unit at offset `at` of its body, or on all its units."""
        indexes = self._units_by_block.get(id(block), ()) if block is not None else ()
        if len(indexes) == 1 or at is None:
            self.used.update(indexes)
            return
        units = self.units
        for index in indexes:
            unit = units[index]
            if unit.start <= at < unit.end or unit.end == at == len(block.body):
                self.used.add(index)

    def mark_phrase(self, block: BlockReport, needle: str) -> None:
        """Mark the first unit of the block whose tokens hold the phrase (" readiness prob ")."""
        indexes = self._units_by_block.get(id(block), ())
        if len(indexes) == 1:
            self.used.add(indexes[0])
            return
        for index in indexes:
            if needle in self.joined(index):
                self.used.add(index)
                return

    def joined(self, index: int) -> str:
        """A unit's tokens joined by spaces (with a space at each end): the code segment's own when the unit is its
        whole block, else tokenised here."""
        unit = self.units[index]
        if len(self._units_by_block[id(unit.block)]) == 1:
            segment = self._code_segments.get(id(unit.block))
            if segment is not None:
                if segment.joined is None:
                    segment.joined = " " + " ".join(segment.tokens) + " "
                return segment.joined
        return unit.joined

    @cached_property
    def _code_segments(self) -> dict[int, Any]:
        return {id(s.block): s for s in self.analysis.segments if s.kind == "code" and s.block is not None}

    def mark_document(self, index: int) -> None:
        if self.documents:
            block, at = self._document_places[index]
            self.mark(block, at)

    def mark_source(self, source: str) -> None:
        """Mark where a command was found (`shell block at line 12`, `Deployment/x script`)."""
        if self.scripts:
            self.mark(*self._script_places.get(source, (None, None)))

    def mark_labels(self, texts: list[str]) -> None:
        """Mark the units whose label (`Deployment/cart-api`) a relation check's evidence names."""
        for index, unit in enumerate(self.units):
            if "/" in unit.label and any(unit.label in text for text in texts):
                self.used.add(index)

    @cached_property
    def documents(self) -> list[tuple[str, Any]]:
        """(label, document) for every YAML/JSON document, items of a top-level list one by one too, then the
        JSON arguments of commands (`aws s3api put-bucket-lifecycle-configuration --lifecycle-configuration
        '{...}'`, `--policy '{...}'`), labelled with the command and flag."""
        out = list(self._block_documents)
        places = list(self._document_places)
        for command in self.commands:
            if "{" not in command.origin:
                continue
            for flag, doc in _json_arguments(command.words):
                out.append((f"{' '.join(command.words[:3])} {flag} JSON", doc))
                places.append(self._script_places.get(command.source, (None, None)))
        self._document_places = places
        return out

    @cached_property
    def yaml_text(self) -> str:
        """The YAML and JSON blocks and JSON command arguments as written (a cheap "is this key anywhere")."""
        return "\n".join([b.body for b in self.valid_blocks if b.kind in ("yaml", "json")] +
                         [c.origin for c in self.commands if "{" in c.origin])

    @cached_property
    def has_empty_keys(self) -> bool:
        """Might a YAML/JSON document have a key written without a value (`pull_request:` followed by a line that
        is not deeper)? A cheap look at the text before `query_documents` walks the documents."""
        return _EMPTY_KEY.search(self.yaml_text) is not None

    @cached_property
    def query_documents(self) -> list[tuple[str, Any]]:
        """`documents` as the rubric's YAML queries read them: a key written with no value (`on: pull_request:`,
        the idiomatic GitHub Actions trigger) holds an empty `Present` mapping instead of null, so it is there."""
        return [(label, _present(doc)) for label, doc in self.documents]

    @cached_property
    def _block_documents(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        places: list[tuple[BlockReport, int | None]] = []
        for block in self.valid_blocks:
            if block.kind not in ("yaml", "json"):
                continue
            parsed = yaml_documents(block.body)
            units = [u for u in self.units if u.block is block]
            split = len(units) == len(parsed) > 1
            for at, doc in enumerate(map(_yaml11_keys, parsed)):
                place = (block, units[at].start if split else None)
                out.append((doc_label(doc, block), doc))
                places.append(place)
                items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else doc
                if isinstance(items, list):
                    listed = [item for item in items if isinstance(item, dict)]
                    out.extend((doc_label(item, block), item) for item in listed)
                    places.extend([place] * len(listed))
        self._document_places = places
        return out

    @cached_property
    def hcl(self) -> dict | None:
        """Every HCL block of the answer merged into one document (a module is spread over files)."""
        merged: dict = {}
        found = False
        for block in self.valid_blocks:
            if block.kind != "hcl":
                continue
            try:
                doc = parse_hcl(block.body)
            except ImportError:
                self.missing.add("python-hcl2")
                return None
            if doc is not None:
                repeated = {key: doc[key] for key in REPEATED_HCL_BLOCKS if key in doc}
                _merge(merged, {key: value for key, value in doc.items() if key not in repeated})
                for key, blocks in repeated.items():
                    merged[key] = [*merged.get(key, []), *blocks]
                found = True
        return merged if found else None

    @cached_property
    def sql(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        self.sql_blocks: list[BlockReport] = []  # the block of each statement
        for block in self.valid_blocks:
            if block.kind == "sql":
                try:
                    statements = parse_sql(block.body)
                except ImportError:
                    self.missing.add("sqlglot")
                    return []
                out.extend(statements)
                self.sql_blocks.extend([block] * len(statements))
        return out

    @cached_property
    def dockerfile_blocks(self) -> list[BlockReport]:
        """The block of each of `dockerfiles`."""
        return [b for b in self.valid_blocks if b.kind == "dockerfile"]

    @cached_property
    def dockerfiles(self) -> list[list[tuple[str, str]]]:
        """Each Dockerfile as (INSTRUCTION, arguments) pairs, continuation lines joined."""
        return [list(dockerfile_instructions(b.body)) for b in self.valid_blocks if b.kind == "dockerfile"]

    @cached_property
    def scripts(self) -> list[tuple[str, str]]:
        """(source, shell text): shell and console blocks, CLI commands in inline code, CI `run:`/`script:`
        steps of YAML documents and Dockerfile RUN instructions."""
        out: list[tuple[str, str]] = []
        places: dict[str, tuple[BlockReport, int | None]] = {}  # source -> where it is (for `mark_source`)
        for block in self.valid_blocks:
            if block.kind in ("shell", "console"):
                source = f"{block.kind} block at line {block.line}"
                out.append((source, block.body if block.kind == "shell" else console_script(block.body)))
                places[source] = (block, None)
        for segment in self.analysis.segments:
            if segment.kind == "inline_code":
                out.append(("inline command", segment.text))
        for index, (label, doc) in enumerate(self._block_documents):
            found: list[str] = []
            _yaml_scripts(doc, found)
            out.extend((f"{label} script", text) for text in found)
            if found:
                places.setdefault(f"{label} script", self._document_places[index])
        for block, instructions in zip(self.dockerfile_blocks, self.dockerfiles):
            runs = [args for word, args in instructions if word == "RUN" and not args.startswith("[")]
            out.extend(("Dockerfile RUN", args) for args in runs)
            if runs:
                places.setdefault("Dockerfile RUN", (block, None))
        self._script_places = places
        return out

    @cached_property
    def _parsed_scripts(self) -> list[tuple[str, str, tuple, tuple]]:
        try:
            return [(source, text, *parse_shell(text)) for source, text in self.scripts]
        except ImportError:
            self.missing.add("bashlex")
            return []

    @cached_property
    def commands(self) -> list[Command]:
        out: list[Command] = []
        for source, text, commands, _ in self._parsed_scripts:
            fixed = fixed_variables(text)  # `NS=prod` then `kubectl -n "$NS"`: the command reads `-n prod`
            for words in commands:
                _add_command(out, resolve_variables(words, fixed), source, text, depth=0)
        return out

    @cached_property
    def pipelines(self) -> list[tuple[str, tuple[tuple[str, ...], ...], str]]:
        """(source, pipeline, the script it came from) for every pipeline of two or more commands."""
        return [(source, pipeline, text) for source, text, _, pipelines in self._parsed_scripts for pipeline in pipelines]

    @cached_property
    def code_texts(self) -> list[tuple[str, str]]:
        """(label, body) of every valid code block, for pattern checks."""
        return [(f"{b.kind} block at line {b.line}", b.body) for b in self.valid_blocks]
