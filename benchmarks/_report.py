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

__all__ = ["machine_info", "write_report"]


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


def write_report(path: Path | str, name: str, rows: list[dict[str, Any]], **extra: Any) -> Path:
    """Write a benchmark's rows and the machine it ran on as JSON, atomically, and say where."""
    report = {"benchmark": name, **extra, "machine": machine_info(), "rows": rows}
    atomic_write_text(path, json.dumps(report, indent=1))
    print(f"wrote {path}")
    return Path(path)
