"""usable_cores: the affinity mask, the cgroup quota and Slurm's allotment bound the count."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sciml.distributed.cores import usable_cores


def _cgroup(root: Path, cpu_max: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    root.mkdir()
    if cpu_max is not None:
        (root / "cpu.max").write_text(cpu_max + "\n")
    if v1 is not None:
        (root / "cpu").mkdir()
        (root / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (root / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return root


def test_usable_cores_takes_the_smallest_of_affinity_quota_and_slurm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.cpu_count() ignores all three limits: each one alone must bound the count."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    none = _cgroup(tmp_path / "none")
    assert usable_cores(cgroup_root=none, environ={}) == 6
    unlimited = _cgroup(tmp_path / "max", "max 100000")
    assert usable_cores(cgroup_root=unlimited, environ={}) == 6
    v2 = _cgroup(tmp_path / "v2", "250000 100000")  # 2.5 cores: a third core is partly usable
    assert usable_cores(cgroup_root=v2, environ={}) == 3
    v1 = _cgroup(tmp_path / "v1", v1=("50000", "100000"))
    assert usable_cores(cgroup_root=v1, environ={}) == 1
    assert (
        usable_cores(cgroup_root=_cgroup(tmp_path / "v1off", v1=("-1", "100000")), environ={}) == 6
    )
    assert usable_cores(cgroup_root=none, environ={"SLURM_CPUS_PER_TASK": "4"}) == 4
    assert usable_cores(cgroup_root=v2, environ={"SLURM_CPUS_PER_TASK": "4"}) == 3
    for bad in ("0", "two", "-1", ""):
        with pytest.raises(ValueError, match="SLURM_CPUS_PER_TASK must be a positive integer"):
            usable_cores(cgroup_root=none, environ={"SLURM_CPUS_PER_TASK": bad})


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_usable_cores_follows_taskset() -> None:
    """A process pinned to one CPU (as taskset or Slurm's binding does) counts one."""
    code = "from sciml.distributed.cores import usable_cores; print(usable_cores())"
    pinned = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
    )
    assert pinned.stdout.strip() == "1"
