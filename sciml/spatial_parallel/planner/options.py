"""The planner's command-line values, free of torch: model names and memory sizes.

``sciml spatial plan --help`` and ``sciml cosmoflow train --help`` list and
check them without importing the planner (which imports torch).
"""

from __future__ import annotations

import math
import re

__all__ = ["MODELS", "parse_memory"]

#: Models the command line knows by name.
MODELS = ("cosmoflow", "unet")
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_UNITS |= {f"{prefix}ib": 2.0 ** (10 * power) for power, prefix in enumerate("kmgt", 1)}


def parse_memory(text: str) -> float:
    """``"80GiB"`` -> bytes; units B, kB, MB, GB, TB (powers of 1000) and KiB..TiB (of 1024).

    The prefix may be of either case; the ``B`` must be upper case, since
    ``80Gb`` is 80 gigabits.

    Raises:
        ValueError: If ``text`` is not a positive number with a known unit, or
            its unit is in bits.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if match and match.group(2).endswith("b"):
        raise ValueError(
            f"memory must be in bytes (B), got {text!r}: a lower-case b means bits; "
            "write e.g. 80GB or 80GiB"
        )
    if not match or not match.group(2) or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"memory must be a number with a unit such as 80GiB, 40GB or 512MiB, got {text!r}"
        )
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"memory must be positive, got {text!r}")
    return value
