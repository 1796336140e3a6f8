"""The one JSON writer of the benchmarks, with the machine they ran on.

Every script in ``benchmarks/`` writes its report through :func:`write_report`
(run as scripts, the scripts find this module next to them)::

    {"benchmark": name, **extra, "machine": machine_info(), "rows": [...]}
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sciml.io_utils import atomic_write_text

__all__ = ["cpu_times", "machine_info", "steal_fraction", "write_report"]


def machine_info() -> dict[str, Any]:
    """Platform, Python, CPU count, numpy and torch versions, GPU (if any), load and time now."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "load_avg": os.getloadavg(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def cpu_times(*, stat: Path | str = "/proc/stat") -> tuple[int, int] | None:
    """Clock ticks of every CPU so far: ``(stolen, total)``, from the ``cpu`` line of ``stat``.

    Stolen ticks are those a virtual machine's CPUs were ready to run but the
    host ran something else (Linux's ``steal`` column). ``None`` where the file
    cannot be read (not Linux).
    """
    try:
        with open(stat) as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        raise ValueError(f"{stat}: expected a 'cpu' line with at least 8 counters, got {fields}")
    ticks = [int(value) for value in fields[1:]]
    # guest and guest_nice (the 9th and 10th counters) are already counted in user and nice
    return ticks[7], sum(ticks[:8])


def steal_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the CPU ticks between two :func:`cpu_times` readings that the host took.

    ``None`` when either reading is unknown, or no tick passed between them.
    """
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def write_report(path: Path | str, name: str, rows: list[dict[str, Any]], **extra: Any) -> Path:
    """Write a benchmark's rows and the machine it ran on as JSON, atomically, and say where."""
    report = {"benchmark": name, **extra, "machine": machine_info(), "rows": rows}
    atomic_write_text(path, json.dumps(report, indent=1))
    print(f"wrote {path}")
    return Path(path)
