"""YAML read safely and with line numbers: the one parser for task files and training configs.

PyYAML's safe loader builds the node tree and the data in one pass, so every mapping key has a line, a key
written twice in one mapping is found, and a syntax error (or an unsafe tag) names its line. Aliases are
counted before anything is built: a file whose aliases would expand past `MAX_ALIAS_NODES` (an "anchor bomb")
or refer to themselves is refused, wherever in the file they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.errors import UserError, shorten

# Values that aliases may add to a document once expanded. Real configs and task files reuse a block or two
# (hundreds of values); a billion-laughs document adds billions, and every reader after the parser (pydantic,
# YAML export, the cockpit) would expand them again.
MAX_ALIAS_NODES = 10_000


class YamlSyntaxError(UserError):
    """The text is not YAML at all (as opposed to YAML that is refused: a bomb, an unsafe tag's value, a huge number)."""


@dataclass(frozen=True)
class YamlDocument:
    """One parsed YAML text: its data, its node tree (None when the text is empty) and where it came from."""

    source: str
    data: Any
    node: Any

    def _keys(self) -> Iterator[tuple[str, int, bool]]:
        """(dotted key, 1-based line, seen before in the same mapping) over the nested mappings from the root."""
        import yaml

        def walk(node, prefix: str):
            if not isinstance(node, yaml.MappingNode):
                return
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                yield f"{prefix}{key}", key_node.start_mark.line + 1, key in seen
                seen.add(key)
                yield from walk(value_node, f"{prefix}{key}.")

        yield from walk(self.node, "")

    def key_lines(self) -> dict[str, int]:
        """Dotted key -> the line it is first written on."""
        lines: dict[str, int] = {}
        for dotted, line, _ in self._keys():
            lines.setdefault(dotted, line)
        return lines

    def duplicate_keys(self) -> list[tuple[str, int, int]]:
        """(dotted key, first line, repeated line) of every key written again in a mapping that already has it
        (YAML would keep the last)."""
        first: dict[str, int] = {}
        found = []
        for dotted, line, again in self._keys():
            if again:
                found.append((dotted, first[dotted], line))
            first.setdefault(dotted, line)
        return found


def _expanded_size(root, source: str) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded) of a node graph; UserError for an alias that contains
    itself. Sizes are memoised per node, so a bomb is measured without being expanded."""
    import yaml

    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def children(node) -> list:
        if isinstance(node, yaml.MappingNode):
            return [part for pair in node.value for part in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children(node))
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children(node):
            if id(child) in on_path:
                raise UserError(f"{shorten(source)}:{child.start_mark.line + 1}: a YAML alias refers to the block "
                                "that contains it; write the values out")
            if id(child) not in sizes:
                stack.append((child, False))
    return len(sizes), sizes[id(root)]


def _line_of_longest_scalar(root) -> int:
    """The 1-based line of the longest plain value in the document (what a constructor's size limit tripped on)."""
    import yaml

    best, line, stack, seen = -1, 1, [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if len(node.value) > best:
                best, line = len(node.value), node.start_mark.line + 1
        elif isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        else:
            stack.extend(node.value)
    return line


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse one YAML document with the safe loader; a syntax error, an unsafe tag, an alias bomb or a value no reader
    can hold (a 5,000-digit number) is a UserError naming `source:line`."""
    import yaml

    # libyaml's parser when PyYAML was built with it (8x faster on the task files, same marks), with the same safe
    # constructor either way.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            distinct, expanded = _expanded_size(node, source)
            if expanded - distinct > MAX_ALIAS_NODES:
                raise UserError(f"{shorten(source)}: YAML aliases would expand to {expanded:,} values (more than "
                                f"{MAX_ALIAS_NODES:,} added by aliases: an anchor bomb?); write the values out")
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shorten(source)}:{mark.line + 1}" if mark is not None else shorten(source)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlSyntaxError(f"{where}: YAML syntax error: {problem}; fix the indentation or quoting there") from None
    except ValueError as exc:  # a constructor's own limit, e.g. Python's 4,300 digits for an integer
        raise UserError(f"{shorten(source)}:{_line_of_longest_scalar(node)}: a value cannot be read "
                        f"({shorten(exc, 60)}); shorten it") from None
    finally:
        loader.dispose()
    return YamlDocument(source, data, node)
