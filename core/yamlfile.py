"""YAML read safely and with line numbers: the one parser for task files and training configs.

PyYAML's SafeLoader builds the node tree and the data in one pass, so every mapping key has a line, a key
written twice in one mapping is found, and a syntax error (or an unsafe tag) names its line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.errors import UserError


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

    def duplicate_keys(self) -> list[tuple[str, int]]:
        """(dotted key, line) of every key written again in the mapping that already has it (YAML keeps the last)."""
        return [(dotted, line) for dotted, line, again in self._keys() if again]


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse one YAML document with the safe loader; a syntax error or unsafe tag is a UserError naming `source:line`."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: YAML syntax error: {problem}; fix the indentation or quoting there") from None
    finally:
        loader.dispose()
    return YamlDocument(source, data, node)
