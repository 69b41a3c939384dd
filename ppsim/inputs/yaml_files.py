"""Reading the YAML files users write, strictly: a key given twice in one mapping is an error
naming the key and both lines (PyYAML would silently keep the last), and a document nested too
deeply to read is an error, not a RecursionError."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError

#: libyaml's parser where PyYAML was built with it (ten times faster on the device catalogue),
#: else PyYAML's own; the constructor, and so every check below, is the same Python either way
_SAFE_LOADER: type[yaml.CSafeLoader | yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SAFE_LOADER):  # type: ignore[misc, valid-type]  # a base chosen at import time
    """SafeLoader that refuses a mapping with a repeated key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error says so below
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConstructorError(None, None, f"key {key!r} appears twice (lines {first} and {line}); keep one",
                                       key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """The YAML document in ``text``; yaml.YAMLError for malformed YAML, a repeated key or nesting
    too deep to read (each with its problem and, where known, its line)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise yaml.YAMLError(TOO_DEEP) from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own limit (1,000 levels)
            raise yaml.YAMLError(TOO_DEEP) from None
        raise


TOO_DEEP = "nested too deeply to read (thousands of levels); flatten the file"


def problem(exc: yaml.YAMLError) -> str:
    """What is wrong, and where, in a YAML error: 'at line L, column C: problem'."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = getattr(exc, "problem", None) or (str(exc) if type(exc) is yaml.YAMLError else "malformed YAML")
    return f"{where}: {what}"
