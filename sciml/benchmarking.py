"""What every benchmark report records about the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import torch

from sciml.io_utils import atomic_write_text


def machine_info() -> dict[str, Any]:
    """Platform, CPU count, torch version, GPU name (if any) and load average now."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "load_avg": os.getloadavg(),
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
