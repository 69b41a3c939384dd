"""Does JSON data fit a dataclass's field types? For the files ppexec reads back (``run.json``, the
ranks' event files), so that a damaged or foreign file is named when read, not met deep inside as a
TypeError. Knows the types those files use: bool, int, float, str, None, Any, unions, list, tuple, dict.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields
from typing import Any


def fits(value: Any, hint: Any) -> bool:
    """Whether a value read from JSON (tuples arrive as lists) fits the type ``hint``."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args))
        return all(fits(v, args[0]) for v in value) if args else True
    if origin is dict:
        return isinstance(value, dict) and all(fits(k, args[0]) and fits(v, args[1]) for k, v in value.items())
    if hint is bool:
        return isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a type this checker does not know: the reader checks it itself


def misfits(cls: type, data: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """The fields of dataclass ``cls`` that ``data`` lacks (without a default) or gives a wrong type."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.name in skip:
            continue
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                out.append(f"{f.name} (missing)")
        elif not fits(data[f.name], hints[f.name]):
            out.append(f"{f.name} ({type(data[f.name]).__name__})")
    return out
