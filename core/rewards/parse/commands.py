"""Shell commands and pipelines of an answer's scripts (shell and console blocks, inline commands, CI steps,
Dockerfile RUN): split directly, by `core.rewards.parse.shell`, or by bashlex; wrappers such as `sudo -E` peeled off.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from core.rewards.parse import shell
from core.rewards.parse.code_blocks import ARITHMETIC

# Wrappers that run the real command: `sudo -E bash`, `env FOO=1 kubectl ...`, `time terraform plan`.
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "exec", "command", "doas", "nice", "stdbuf"})
_SUDO_OPTIONS_WITH_VALUE = frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "--user", "--group"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# YAML keys whose string values are shell scripts: GitHub Actions `run`, GitLab CI `script`, Helm hooks...
_SCRIPT_KEYS = frozenset({"run", "script", "before_script", "after_script", "pre_script", "commands"})



@dataclass(frozen=True)
class Command:
    """One simple command: its words with wrappers (sudo, env) removed, and where it was found."""

    words: tuple[str, ...]
    source: str
    raw: tuple[str, ...] = ()  # the words as written, wrappers included (sudo -E matters to the danger checks)
    origin: str = ""  # the script or inline span it was parsed from

    @property
    def name(self) -> str:
        return self.words[0].rsplit("/", 1)[-1] if self.words else ""

    @cached_property
    def lowered(self) -> tuple[str, ...]:
        """The words in lower case (the rubric's shell patterns match subcommands in any case)."""
        return tuple(word.lower() for word in self.words)


def _strip_wrappers(words: list[str]) -> list[str]:
    """`sudo -E env A=1 time kubectl x` -> `kubectl x`."""
    i = 0
    while i < len(words):
        word = words[i]
        base = word.rsplit("/", 1)[-1]
        if _ASSIGNMENT.match(word):
            i += 1
        elif base in _WRAPPERS:
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in _SUDO_OPTIONS_WITH_VALUE else 1
        else:
            break
    return words[i:]


def _walk_bash(node: Any, commands: list[list[str]], pipelines: list[list[list[str]]]) -> None:
    kind = getattr(node, "kind", "")
    if kind == "command":
        commands.append([p.word for p in node.parts if getattr(p, "kind", "") == "word"])
    elif kind == "pipeline":
        pipelines.append([[p.word for p in part.parts if getattr(p, "kind", "") == "word"]
                          for part in node.parts if getattr(part, "kind", "") == "command"])
    for child in (*getattr(node, "parts", ()), *getattr(node, "list", ())):
        _walk_bash(child, commands, pipelines)
    inner = getattr(node, "command", None)
    if inner is not None and not isinstance(inner, str):
        _walk_bash(inner, commands, pipelines)


# Commands that run another command given as their arguments: `kubectl exec pod -- nc -z db 5432`,
# `ssh host 'sudo systemctl reboot'`, `sh -c '...'`, `xargs kubectl delete`, `watch kubectl get pods`.
_SCRIPT_ARGUMENT = frozenset({"sh", "bash", "zsh", "dash"})


def _add_command(out: list[Command], words: tuple[str, ...], source: str, origin: str, depth: int) -> None:
    stripped = tuple(_strip_wrappers(list(words)))
    if not stripped:
        return
    out.append(Command(stripped, source, words, origin))
    if depth >= 2:
        return
    name = stripped[0].rsplit("/", 1)[-1]
    nested: list[tuple[str, ...]] = []
    if "--" in stripped[1:]:
        nested.append(stripped[stripped.index("--", 1) + 1:])
    if name in _SCRIPT_ARGUMENT and "-c" in stripped[1:-1]:
        script = stripped[stripped.index("-c", 1) + 1]
        nested.extend(parse_shell(script)[0])
    elif name == "ssh" and len(stripped) > 2 and " " in stripped[-1]:
        nested.extend(parse_shell(stripped[-1])[0])
    elif name in ("xargs", "watch") and len(stripped) > 1:
        nested.append(tuple(w for w in stripped[1:] if not w.startswith("-")))
    for inner in nested:
        if inner:
            _add_command(out, inner, source, origin, depth + 1)


def _logical_lines(script: str) -> list[str]:
    return [ln for ln in re.sub(r"\\\n", " ", script).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _shlex_commands(line: str) -> tuple[list[list[str]], list[list[list[str]]]]:
    """A fallback for what bashlex cannot parse: split the line on |, &&, || and ; with shlex."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return [], []
    commands: list[list[str]] = [[]]
    pipeline: list[list[str]] = []
    pipelines: list[list[list[str]]] = []
    for token in tokens:
        if token in ("|", "&&", "||", ";", "&", ";;"):
            if token == "|":
                pipeline.append(commands[-1])
            elif pipeline:
                pipelines.append([*pipeline, commands[-1]])
                pipeline = []
            commands.append([])
        else:
            commands[-1].append(token)
    if pipeline:
        pipelines.append([*pipeline, commands[-1]])
    return [c for c in commands if c], pipelines


# What only a real bash parser gets right; everything else is simple commands joined by | && || ;
_COMPOUND = re.compile(r"(?:^|[\s;&|(])(?:if|for|while|until|case|function|select)\s|\$\(|`|<<|\(\)|\{\s|<\(")
_OPERATORS = re.compile(r"\s*(\|\||&&|\||;|&)\s*")


def _simple_commands(line: str) -> tuple[list[list[str]], list[list[list[str]]]]:
    """A line of simple commands: split on operators (quotes kept together by shlex when there are any)."""
    if "'" in line or '"' in line or "\\" in line:
        return _shlex_commands(line)
    commands: list[list[str]] = []
    pipelines: list[list[list[str]]] = []
    pipeline: list[list[str]] = []
    parts = _OPERATORS.split(line)
    for at in range(0, len(parts), 2):
        words = parts[at].split()
        operator = parts[at + 1] if at + 1 < len(parts) else ""
        if words:
            commands.append(words)
            pipeline.append(words)
        if operator != "|":
            if len(pipeline) > 1:
                pipelines.append(pipeline)
            pipeline = []
    return commands, pipelines


@lru_cache(maxsize=2048)
def parse_shell(script: str) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[tuple[str, ...], ...], ...]]:
    """(commands, pipelines) of a shell script: each command as its words (wrappers kept), each pipeline
    as its commands. bashlex parses the script (comments dropped, `$((...))`, which it does not implement,
    read as a number); what it cannot parse is split line by line with shlex."""
    lines = _logical_lines(script)
    if not _COMPOUND.search("\n".join(lines)):
        # no loops, conditions, functions, substitutions or here-documents: a line splits as bash would
        return _line_by_line(lines, _simple_commands)
    text = ARITHMETIC.sub("0", "\n".join(lines))
    try:
        return _frozen(*shell.split(text))  # if/for/while and $(...): split as bashlex would, fifty times faster
    except shell.Unsupported:
        pass
    import bashlex

    commands: list[list[str]] = []
    pipelines: list[list[list[str]]] = []
    try:
        for node in bashlex.parse(text):
            _walk_bash(node, commands, pipelines)
    except Exception:  # bashlex raises its own errors and others on odd input
        return _line_by_line(lines, _shlex_commands)
    return _frozen(commands, pipelines)


def _line_by_line(lines: list[str], split) -> tuple:
    commands: list[list[str]] = []
    pipelines: list[list[list[str]]] = []
    for line in lines:
        more_commands, more_pipelines = split(line)
        commands.extend(more_commands)
        pipelines.extend(more_pipelines)
    return _frozen(commands, pipelines)


def _frozen(commands: list[list[str]], pipelines: list[list[list[str]]]) -> tuple:
    """Hashable (commands, pipelines of two or more commands), as `parse_shell` caches them."""
    return (tuple(tuple(c) for c in commands if c),
            tuple(tuple(tuple(c) for c in p) for p in pipelines if len(p) > 1))


# `NS=prod`, `export DEPLOY="orders-api"`: a whole line that gives a variable a fixed value (no `$`, no backtick)
_FIXED_ASSIGNMENT = re.compile(r"""^\s*(?:export\s+|readonly\s+|local\s+|declare\s+(?:-[A-Za-z]+\s+)?)?([A-Za-z_][A-Za-z0-9_]*)=
                               ('[^'\n]*'|"[^"$`\\\n]*"|[^\s"'$`;&|()<>\\]+)\s*(?:\#.*)?$""", re.X)
_ANY_ASSIGNMENT = re.compile(r"(?:^|[\s;&|(])([A-Za-z_][A-Za-z0-9_]*)\+?=|\b(?:for|read(?:\s+-\w+)*|select)\s+([A-Za-z_]\w*)")


@lru_cache(maxsize=2048)
def fixed_variables(script: str) -> tuple[tuple[str, str], ...]:
    """(name, value) of the script's variables set once, on a line of their own, to a fixed value: what
    `kubectl -n "$NS"` means after `NS=prod`. A variable set twice, in a loop or by `read` is left alone."""
    lines = _logical_lines(script)
    fixed = {}
    for line in lines:
        match = _FIXED_ASSIGNMENT.match(line)
        if match:
            value = match.group(2)
            fixed[match.group(1)] = value[1:-1] if value[:1] in "'\"" else value
    if not fixed:
        return ()
    times: dict[str, int] = {}
    for match in _ANY_ASSIGNMENT.finditer("\n".join(lines)):
        name = match.group(1) or match.group(2)
        times[name] = times.get(name, 0) + 1
    return tuple((name, value) for name, value in fixed.items() if times.get(name) == 1)


def resolve_variables(words: tuple[str, ...], fixed: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The words with `$NAME` and `${NAME}` of the fixed variables replaced by their values."""
    if not fixed or not any("$" in word for word in words):
        return words
    values = dict(fixed)
    pattern = re.compile(r"\$(?:\{(%s)\}|(%s)(?![A-Za-z0-9_]))" % (("|".join(map(re.escape, values)),) * 2))
    return tuple(pattern.sub(lambda m: values[m.group(1) or m.group(2)], word) for word in words)


def console_script(body: str) -> str:
    """The commands of a console transcript: the `$ ` lines (and their continuations), not the output."""
    lines = body.splitlines()
    if not any(ln.lstrip().startswith("$ ") for ln in lines):
        return body
    kept, continuing = [], False
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith("$ "):
            kept.append(stripped[2:])
            continuing = stripped.endswith("\\")
        elif continuing:
            kept.append(line)
            continuing = line.rstrip().endswith("\\")
    return "\n".join(kept)


def _yaml_scripts(doc: Any, out: list[str], depth: int = 0) -> None:
    """Strings under `run:` / `script:` keys (CI steps) anywhere in a document."""
    if depth > 12:
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in _SCRIPT_KEYS:
                if isinstance(value, str):
                    out.append(value)
                elif isinstance(value, list):
                    out.extend(v for v in value if isinstance(v, str))
            elif isinstance(value, (dict, list)):
                _yaml_scripts(value, out, depth + 1)
    elif isinstance(doc, list):
        for item in doc:
            _yaml_scripts(item, out, depth + 1)
