"""The answer's artifacts, parsed with real parsers: YAML/JSON documents, HCL (python-hcl2), SQL statements
(sqlglot), shell commands and pipelines (bashlex) and Dockerfile instructions; each parsed once, on first use.

The rubric's structural checks and the danger and secret checks read them from one `Artifacts` per answer.
"""

from __future__ import annotations

import logging
import re
from functools import cached_property, lru_cache
from typing import Any

from core.rewards.parse.code_blocks import BlockReport, dockerfile_instructions, yaml_documents
from core.rewards.parse.commands import Command, _add_command, _yaml_scripts, console_script, parse_shell
from core.rewards.parse.text import Analysis

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


class Artifacts:
    """The parsed artifacts of one answer, each parsed on first use."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.missing: set[str] = set()  # parsers that are not installed (the checks needing them are skipped)

    @cached_property
    def valid_blocks(self) -> list[BlockReport]:
        return [b for b in self.analysis.blocks if b.valid and b.body.strip()]

    @cached_property
    def documents(self) -> list[tuple[str, Any]]:
        """(label, document) for every YAML/JSON document; items of a top-level list count one by one too."""
        out: list[tuple[str, Any]] = []
        for block in self.valid_blocks:
            if block.kind not in ("yaml", "json"):
                continue
            for doc in map(_yaml11_keys, yaml_documents(block.body)):
                out.append((doc_label(doc, block), doc))
                items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else doc
                if isinstance(items, list):
                    out.extend((doc_label(item, block), item) for item in items if isinstance(item, dict))
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
        for block in self.valid_blocks:
            if block.kind == "sql":
                try:
                    out.extend(parse_sql(block.body))
                except ImportError:
                    self.missing.add("sqlglot")
                    return []
        return out

    @cached_property
    def dockerfiles(self) -> list[list[tuple[str, str]]]:
        """Each Dockerfile as (INSTRUCTION, arguments) pairs, continuation lines joined."""
        return [list(dockerfile_instructions(b.body)) for b in self.valid_blocks if b.kind == "dockerfile"]

    @cached_property
    def scripts(self) -> list[tuple[str, str]]:
        """(source, shell text): shell and console blocks, CLI commands in inline code, CI `run:`/`script:`
        steps of YAML documents and Dockerfile RUN instructions."""
        out: list[tuple[str, str]] = []
        for block in self.valid_blocks:
            if block.kind == "shell":
                out.append((f"shell block at line {block.line}", block.body))
            elif block.kind == "console":
                out.append((f"console block at line {block.line}", console_script(block.body)))
        for segment in self.analysis.segments:
            if segment.kind == "inline_code":
                out.append(("inline command", segment.text))
        for label, doc in self.documents:
            found: list[str] = []
            _yaml_scripts(doc, found)
            out.extend((f"{label} script", text) for text in found)
        for instructions in self.dockerfiles:
            out.extend(("Dockerfile RUN", args) for word, args in instructions if word == "RUN" and not args.startswith("["))
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
            for words in commands:
                _add_command(out, words, source, text, depth=0)
        return out

    @cached_property
    def pipelines(self) -> list[tuple[str, tuple[tuple[str, ...], ...], str]]:
        """(source, pipeline, the script it came from) for every pipeline of two or more commands."""
        return [(source, pipeline, text) for source, text, _, pipelines in self._parsed_scripts for pipeline in pipelines]

    @cached_property
    def code_texts(self) -> list[tuple[str, str]]:
        """(label, body) of every valid code block, for pattern checks."""
        return [(f"{b.kind} block at line {b.line}", b.body) for b in self.valid_blocks]
