"""The GPU check's machine facts and its CUDA tests (sections ``environment``, ``cuda_tests``)."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import torch
from _gpu_report import Part, Row

#: Packages the workflows use that a bare GPU machine may lack; none is needed by the check.
OPTIONAL = ("zarr", "dask", "netCDF4", "geopandas", "rasterio", "xarray", "pandas", "scipy")
CUDA_TESTS = "tests/spatial_parallel/test_cuda.py"
#: A finished test's line in ``pytest -v`` output: its name and outcome.
_VERBOSE = re.compile(r"^\S+::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)", re.MULTILINE)
#: Characters of a failing test's message kept in the report.
MESSAGE_CHARS = 600


def importable(name: str) -> bool:
    """Whether this Python can import ``name`` (a finder that refuses it counts as absent)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder that refuses the name
        return False


def driver_version() -> str:
    """The NVIDIA driver's version (``nvidia-smi``, else ``/proc/driver/nvidia/version``)."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
        done = subprocess.run(query, capture_output=True, text=True, timeout=30)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    proc = Path("/proc/driver/nvidia/version")
    if proc.exists():
        return proc.read_text().splitlines()[0]
    return "unknown (no nvidia-smi, no /proc/driver/nvidia/version)"


def _nccl_version() -> str:
    """NCCL's version (torch gives a tuple, or an int in older releases)."""
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def environment(part: Part) -> None:
    """The device, driver, torch, CUDA and cuDNN versions, and the optional packages present."""
    row: Row = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        row |= {
            "device": props.name,
            "devices": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": props.total_memory / 2**30,
            "driver": driver_version(),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "nccl": _nccl_version(),
            "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
    else:
        row["device"] = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs)"
    row["missing_packages"] = [name for name in OPTIONAL if not importable(name)]
    part.add(row)
    if not part.dry_run and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: run the GPU check with --dry-run on a CPU")


def _outcome(case: ET.Element) -> tuple[str, str]:
    for kind in ("failure", "error", "skipped"):
        found = case.find(kind)
        if found is not None:
            text = found.get("message") or found.text or ""
            return {"failure": "failed", "error": "error"}.get(kind, kind), text[:MESSAGE_CHARS]
    return "passed", ""


def finished_tests(log: str) -> list[tuple[str, str]]:
    """``(test, outcome)`` of every test a ``pytest -v`` log reports as finished."""
    return [(m.group(1), m.group(2).lower()) for m in _VERBOSE.finditer(log)]


def cuda_tests(part: Part) -> None:
    """``pytest tests/spatial_parallel/test_cuda.py``: one row per test, from its JUnit XML.

    Stopped at the section's budget, the tests ``pytest -v`` reported as
    finished are kept (without their times).
    """
    junit = part.scratch / "cuda_tests.xml"
    command = [sys.executable, "-m", "pytest", CUDA_TESTS, "-v", "-p", "no:cacheprovider"]
    command.append(f"--junitxml={junit}")
    log = part.scratch / "cuda_tests.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=max(part.left() - 5, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for test, outcome in finished_tests(log.read_text(errors="replace")):
                part.add({"test": test, "outcome": outcome})
            part.note(f"pytest stopped at the section's budget; its last lines: {_tail(log)}")
            raise
    if not junit.exists():
        raise RuntimeError(f"pytest exited {code} without a JUnit report: {_tail(log)}")
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = _outcome(case)
        row: Row = {"test": case.get("name", "?"), "outcome": outcome}
        row["seconds"] = float(case.get("time", 0))
        part.add(row | ({"message": message} if message else {}))
    part.note(f"pytest exit code {code}: {_tail(log, lines=1)}")
    if code not in (0, 5):  # 5: nothing collected
        raise RuntimeError(f"pytest {CUDA_TESTS} failed (exit code {code})")


def _tail(path: Path, *, lines: int = 5) -> str:
    return " / ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
