"""The CPU cores this process may compute on.

``os.cpu_count()`` counts the whole machine; under Slurm, taskset, MPI binding or a
container's CPU quota a process may use fewer. :func:`usable_cores` is the count the
spine (calibration, thread pools) and the workflows (the weather kernels' threads)
size their work by. No torch import: NumPy-only code can call it cheaply.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["usable_cores"]


def _cgroup_quota(root: Path) -> int | None:
    """Cores a cgroup CPU quota allows (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); ``None``: none."""
    try:
        if (root / "cpu.max").exists():
            quota, period = (root / "cpu.max").read_text().split()[:2]
        else:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        if quota in ("max", "-1"):
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        return None  # no readable quota: none known


def usable_cores(
    *, cgroup_root: Path | str = "/sys/fs/cgroup", environ: Mapping[str, str] | None = None
) -> int:
    """CPU cores this process may compute on (``os.cpu_count()`` counts the whole machine).

    The smallest of: the CPUs of its affinity mask (``taskset``, Slurm's and
    MPI's binding), the cgroup CPU quota rounded up (containers'
    ``--cpus``), and ``SLURM_CPUS_PER_TASK`` when set (Slurm without binding).

    Args:
        cgroup_root: Where the process's cgroup files are mounted.
        environ: The environment to read (default: ``os.environ``).

    Raises:
        ValueError: If ``SLURM_CPUS_PER_TASK`` is set but not a positive integer.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(Path(cgroup_root))
    if quota is not None:
        cores = min(cores, quota)
    slurm = (os.environ if environ is None else environ).get("SLURM_CPUS_PER_TASK")
    if slurm is not None:
        if not slurm.strip().isdigit() or int(slurm) < 1:
            raise ValueError(f"SLURM_CPUS_PER_TASK must be a positive integer, got {slurm!r}")
        cores = min(cores, int(slurm))
    return max(1, cores)
