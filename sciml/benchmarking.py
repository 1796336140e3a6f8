"""What every benchmark report records about the machine it ran on."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch


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
