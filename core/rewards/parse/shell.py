"""A fast splitter for the compound shell scripts most answers hold (simple commands, if/elif/else, while/until
and for-in loops, `$(...)`): the commands bashlex would give, about fifty times faster; the rest is left to bashlex.

Held to bashlex's output on the task set's scripts and on seeded random scripts (tests/test_rewards.py).
"""

from __future__ import annotations

import re

# What this splitter leaves to bashlex: backticks, here-documents, process substitution, arithmetic commands,
# [[ ]], ANSI-C quotes, |&, case (;;) and a command substitution inside ${...}.
_BASHLEX_ONLY = re.compile(r"`|<<|<\(|>\(|\(\(|\[\[|\$'|\|&|;;|\$\{[^}]*\$\(")
_REDIRECT = re.compile(r"\d*(?:>>|>&|<&|>\||<>|>|<)|&>>?")
# Words that make bashlex read what follows differently: left to it.
_BASHLEX_WORDS = frozenset({"case", "esac", "select", "function", "coproc", "!", "time", "[[", "]]", "in"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_OPERATORS = ("&&", "||", ";", "&", "|")
# reserved word -> (the states of the innermost construct it may follow, the state it leaves)
_TRANSITIONS = {"then": (("if-cond",), "if-body"), "elif": (("if-body",), "if-cond"), "else": (("if-body",), "if-else"),
                "do": (("loop-cond", "for-head"), "loop-body")}
_CLOSERS = {"fi": ("if-body", "if-else"), "done": ("loop-body",)}

Token = tuple[str, str, tuple[str, ...]]  # (kind: word | op | redirect, value, scripts of its $(...) substitutions)


class Unsupported(Exception):
    """The script uses a construct this splitter leaves to bashlex."""


def split(text: str) -> tuple[list[list[str]], list[list[list[str]]]]:
    """(commands, pipelines) of a script, each command as its words (quotes removed, leading assignments and
    redirections left out), exactly as bashlex's tree read by `commands._walk_bash` gives them; raises
    Unsupported for what it leaves to bashlex."""
    commands: list[list[str]] = []
    pipelines: list[list[list[str]]] = []
    _statements(_tokens(text), commands, pipelines)
    return commands, pipelines


def _tokens(text: str) -> list[Token]:
    if _BASHLEX_ONLY.search(text):
        raise Unsupported
    tokens: list[Token] = []
    at, n = 0, len(text)
    while at < n:
        char = text[at]
        if char in " \t":
            at += 1
        elif char == "\n":
            tokens.append(("op", ";", ()))
            at += 1
        elif char == "#" and (at == 0 or text[at - 1] in " \t\n;&|"):
            raise Unsupported  # a comment can swallow the reserved word a construct needs
        elif (char in "<>" or char.isdigit() or text.startswith("&>", at)) and _REDIRECT.match(text, at):
            match = _REDIRECT.match(text, at)
            tokens.append(("redirect", match.group(0), ()))
            at = match.end()
        elif text.startswith(_OPERATORS, at):
            operator = next(op for op in _OPERATORS if text.startswith(op, at))
            tokens.append(("op", operator, ()))
            at += len(operator)
        elif char in "()":
            raise Unsupported  # a subshell or a function
        else:
            end, value, inner = _word(text, at)
            if end == at or value in ("{", "}"):  # bashlex reads the words after a brace as a new command
                raise Unsupported
            tokens.append(("word", value, tuple(inner)))
            at = end
    if not any(kind == "word" for kind, _, _ in tokens):
        raise Unsupported
    return tokens


def _word(text: str, at: int) -> tuple[int, str, list[str]]:
    """(where the word ends, its value with quotes removed, the scripts of its `$(...)` substitutions)."""
    out: list[str] = []
    inner: list[str] = []
    n = len(text)
    while at < n:
        char = text[at]
        if char in " \t\n;&|<>()":
            break
        if char == "'":
            end = text.find("'", at + 1)
            if end < 0 or "\\" in text[at + 1:end]:  # bashlex reads a backslash in single quotes its own way
                raise Unsupported
            out.append(text[at + 1:end])
            at = end + 1
        elif text.startswith("${", at):
            end = _brace_end(text, at + 1)
            out.append(text[at:end])
            at = end
        elif char == '"':
            end = _double_quoted_end(text, at)
            at += 1
            while at < end:
                if text[at] == "\\" and at + 1 < end and text[at + 1] in '"\\$`':
                    out.append(text[at + 1])
                    at += 2
                elif text.startswith("$(", at):
                    at = _substitution(text, at, out, inner)
                else:
                    out.append(text[at])
                    at += 1
            at = end + 1
        elif char == "\\":
            if at + 1 >= n:
                raise Unsupported
            out.append(text[at + 1])
            at += 2
        elif text.startswith("$(", at):
            at = _substitution(text, at, out, inner)
        else:
            out.append(char)
            at += 1
    return at, "".join(out), inner


def _substitution(text: str, at: int, out: list[str], inner: list[str]) -> int:
    """The `$(...)` at `at`: kept whole in the word, its command noted for its own check; returns where it ends."""
    close = _dollar_paren(text, at)
    out.append(text[at:close])
    inner.append(text[at + 2:close - 1])
    return close


def _dollar_paren(text: str, at: int) -> int:
    """Where the `$(` at text[at] is closed (just past its `)`), quotes and nested parentheses respected."""
    depth, at, n = 0, at + 1, len(text)
    while at < n:
        char = text[at]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return at + 1
        elif char == "'":
            at = text.find("'", at + 1)
            if at < 0:
                raise Unsupported
        elif char == '"':
            at = _double_quoted_end(text, at)
        elif char == "\\":
            at += 1
        at += 1
    raise Unsupported


def _double_quoted_end(text: str, at: int) -> int:
    """Where the double-quoted string opened at text[at] ends (its closing quote)."""
    at, n = at + 1, len(text)
    while at < n:
        char = text[at]
        if char == "\\":
            at += 2
        elif char == '"':
            return at
        elif text.startswith("$(", at):
            at = _dollar_paren(text, at)
        else:
            at += 1
    raise Unsupported


def _brace_end(text: str, at: int) -> int:
    """Just past the `}` closing the `{` at text[at]: a `${...}` expansion may hold spaces (`${{ github.sha }}`)."""
    depth = 0
    for end in range(at, len(text)):
        char = text[end]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return end + 1
        elif char in "'\"\\\n":
            raise Unsupported
    raise Unsupported


def _statements(tokens: list[Token], commands: list, pipelines: list, nested: bool = False) -> None:
    """Read a script's statements (`nested`: the script of a `$(...)`, where bashlex accepts no &&, || or &)."""
    at, n = 0, len(tokens)
    stack: list[list] = []  # per open construct: [its state, whether a command was read since its last reserved word]
    pipeline: list[list[str]] = []
    start = 0  # where the pipeline being read goes in `pipelines` (before those of its substitutions)

    def flush() -> None:
        if len(pipeline) > 1:
            pipelines.insert(start, list(pipeline))
        pipeline.clear()

    while at < n:
        kind, value, _ = tokens[at]
        if kind == "op":
            if nested and value in ("&&", "||", "&"):
                raise Unsupported
            if value != "|":
                flush()
            elif not pipeline:
                raise Unsupported
            if value in ("&&", "||", "|") and (at + 1 >= n or tokens[at + 1][0] != "word"):
                raise Unsupported  # an operator with no command after it
            at += 1
        elif kind == "word" and value in _BASHLEX_WORDS:
            raise Unsupported
        elif kind == "word" and value in ("if", "while", "until", *_TRANSITIONS, *_CLOSERS):
            if pipeline or (stack and not stack[-1][1] and value not in ("if", "while", "until")):
                raise Unsupported  # a reserved word inside a pipeline, or an empty condition or body
            at = _reserved(value, stack, tokens, at)
        elif kind == "word" and value == "for":
            if pipeline or at + 2 >= n or tokens[at + 1][0] != "word" or not _NAME.match(tokens[at + 1][1]) \
                    or tokens[at + 2][1] != "in":
                raise Unsupported
            at += 3
            header: list[str] = []
            while at < n and tokens[at][0] == "word":
                header.extend(tokens[at][2])
                at += 1
            if at >= n or tokens[at] != ("op", ";", ()):
                raise Unsupported
            for script in header:
                _statements(_tokens(script), commands, pipelines, nested=True)
            stack.append(["for-head", True])
        else:
            if not pipeline:
                start = len(pipelines)
            at = _command(tokens, at, commands, pipelines, pipeline)
            if stack:
                stack[-1][1] = True
    flush()
    if stack:
        raise Unsupported


def _command(tokens: list[Token], at: int, commands: list, pipelines: list, pipeline: list) -> int:
    """Read one simple command (its words up to the next operator, without redirections and leading
    assignments), then the commands of its substitutions; returns where reading goes on."""
    words: list[str] = []
    inner: list[str] = []
    assigning = True
    while at < len(tokens) and tokens[at][0] != "op":
        kind, value, scripts = tokens[at]
        at += 1
        if kind == "redirect":  # bashlex does not read the substitutions of a redirection's target
            if at < len(tokens) and tokens[at][0] == "word":
                at += 1
            continue
        if assigning and _ASSIGNMENT.match(value):
            inner.extend(scripts)
            continue
        assigning = False
        words.append(value)
        inner.extend(scripts)
    commands.append(words)
    pipeline.append(words)
    for script in inner:
        _statements(_tokens(script), commands, pipelines, nested=True)
    return at


def _reserved(word: str, stack: list[list], tokens: list[Token], at: int) -> int:
    """Apply a reserved word to the open constructs; returns where reading goes on."""
    if word in ("if", "while", "until"):
        stack.append(["if-cond" if word == "if" else "loop-cond", False])
        return at + 1
    if word in _TRANSITIONS:
        before, after = _TRANSITIONS[word]
        if not stack or stack[-1][0] not in before:
            raise Unsupported
        stack[-1] = [after, False]
        return at + 1
    if not stack or stack[-1][0] not in _CLOSERS[word]:
        raise Unsupported
    stack.pop()
    if stack:
        stack[-1][1] = True
    at += 1
    while at < len(tokens) and tokens[at][0] == "redirect":  # `done < nodes.txt`
        at += 2 if at + 1 < len(tokens) and tokens[at + 1][0] == "word" else 1
    if at < len(tokens) and not (tokens[at][0] == "op" and tokens[at][1] in (";", "&&", "||", "&")):
        raise Unsupported  # `done | tee log`: a loop inside a pipeline
    return at
