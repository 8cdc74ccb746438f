"""Where each key of a YAML text is: its mapping and line, for messages and for a key given
twice (which YAML itself silently keeps the last of)."""

from __future__ import annotations


def _keys(text: str):
    """(mapping id, dotted key, 1-based line) of every key in the YAML node tree, in file order."""
    import yaml

    stack = [(yaml.compose(text), "")]
    while stack:
        node, prefix = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                yield id(node), f"{prefix}{key.value}", key.start_mark.line + 1
                stack.append((value, f"{prefix}{key.value}."))


def key_lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line, from the YAML node tree."""
    import yaml

    try:
        return {name: line for _, name, line in _keys(text)}
    except yaml.YAMLError:
        return {}  # safe_load reports it with its own line
