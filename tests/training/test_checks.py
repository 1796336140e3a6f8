"""The shared configuration checks: bools are not numbers, nan and inf are not rates."""

import math
from dataclasses import dataclass

import pytest

from sciml.training.checks import is_count, is_fraction, is_names, is_number, is_rate, require


def test_predicates_refuse_bools_and_non_finite_numbers() -> None:
    assert is_count(3, 1) and not is_count(True, 0) and not is_count(2.0, 1) and not is_count(0, 1)
    assert is_number(0.5) and not is_number(True) and not is_number(math.nan)
    assert is_rate(1e-3) and not any(is_rate(v) for v in (0, -1, math.inf, math.nan, True))
    assert is_fraction(0.2) and not is_fraction(0) and is_fraction(0, zero=True)
    assert not any(is_fraction(v) for v in (1, 1.5, math.nan, True))
    assert is_names(("t", "z")) and not any(is_names(v) for v in ((), ("",), ["t"], ("t", 1)))


def test_require_names_the_class_field_expectation_and_value() -> None:
    @dataclass
    class Run:
        lr: float = -1.0

    require(Run(), "lr", True, "a finite number > 0")
    with pytest.raises(ValueError, match=r"^Run\.lr must be a finite number > 0, got -1\.0$"):
        require(Run(), "lr", is_rate(Run().lr), "a finite number > 0")
