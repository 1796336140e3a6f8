"""What every ``sciml`` subcommand module shares: the subparsers type and validating number types.

The workflow ``cli`` modules import these, never :mod:`sciml.cli` (which
imports the workflows), so the command line has no import cycle.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

__all__ = [
    "Register",
    "Subparsers",
    "finite_float",
    "fraction",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "runs_and_test_data",
]

#: What a workflow's ``register`` receives: the ``sciml`` parser's subcommands.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: The type of every workflow's ``register(subparsers)``.
Register: TypeAlias = Callable[[Subparsers], None]


def _number(kind: type, test: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type converting to ``kind`` and rejecting values failing ``test``."""

    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    convert.__name__ = expected  # argparse names the type in its messages
    return convert


#: Validating argparse types for numeric options.
positive_int = _number(int, lambda v: v > 0, "an integer >= 1")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: v > 0, "a finite number > 0")
non_negative_float = _number(float, lambda v: v >= 0, "a finite number >= 0")
finite_float = _number(float, lambda v: True, "a finite number")
fraction = _number(float, lambda v: 0 < v < 1, "a fraction between 0 and 1, exclusive")


def runs_and_test_data(
    runs: list[str], data: list[str], *, marker: str
) -> tuple[list[str], list[str]]:
    """Run folders and test files; ``--run-dir R1 R2 TEST`` puts TEST among the runs.

    Without positional test data, the trailing paths of ``--run-dir`` that are not run
    folders (no ``marker`` file in them) are the test data.

    Raises:
        ValueError: No test data in either place, or no run folder.
    """
    if data:
        return runs, data
    count = len(runs)
    while count and not (Path(runs[count - 1]) / marker).exists():
        count -= 1
    if count == len(runs):
        raise ValueError("no test data given: name the test file(s) after the run folders")
    if count == 0:
        raise ValueError(f"no run folder among --run-dir {runs} (none holds {marker})")
    return runs[:count], runs[count:]
