"""Small text helpers every terminal view uses."""

from __future__ import annotations


def or_dash(value: float | None, spec: str, unit: str = "") -> str:
    """``value`` formatted with ``spec`` and ``unit`` appended, or ``-`` when there is none."""
    return "-" if value is None else f"{value:{spec}}{unit}"


def gib(nbytes: float | None) -> float | None:
    """Bytes in GiB (None stays None)."""
    return None if nbytes is None else nbytes / 2**30
