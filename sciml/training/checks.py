"""Checks the configuration dataclasses share: a field is refused by name, with what was expected.

Each workflow's configuration (weather, spread, geo, volumes) checks its fields in
``__post_init__`` with these predicates, so a value is judged the same way everywhere
(a ``bool`` is never a number, ``nan`` never a rate).
"""

from __future__ import annotations

import math

__all__ = ["is_count", "is_fraction", "is_names", "is_number", "is_rate", "require"]


def require(config: object, name: str, ok: bool, expected: str) -> None:
    """Raise ``ValueError`` naming ``config``'s field ``name`` and ``expected`` unless ``ok``.

    Raises:
        ValueError: ``ok`` is false.
    """
    if not ok:
        value = getattr(config, name)
        raise ValueError(f"{type(config).__name__}.{name} must be {expected}, got {value!r}")


def is_count(value: object, minimum: int) -> bool:
    """Whether ``value`` is an integer (not a bool) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def is_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value)  # type: ignore[arg-type]


def is_fraction(value: object, *, zero: bool = False) -> bool:
    """Whether ``value`` is a number in (0, 1) (``[0, 1)`` with ``zero``)."""
    return is_number(value) and (value >= 0 if zero else value > 0) and value < 1  # type: ignore[operator]


def is_rate(value: object) -> bool:
    """Whether ``value`` is a finite number > 0."""
    return is_number(value) and value > 0  # type: ignore[operator]


def is_names(value: object) -> bool:
    """Whether ``value`` is a non-empty tuple of non-empty strings."""
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, str) and v for v in value)
