"""What only a GPU can show, in one command of about 8 minutes: tests, step times, planner, sizes.

Usage: python benchmarks/gpu_check.py OUTDIR [--dry-run] [--budget SECONDS] [--only NAME ...]

(``make gpu-check OUT=OUTDIR``; from a copy of the repository with nothing
installed, ``PYTHONPATH=.``: the check needs torch, numpy and pytest only.)

Sections, each in a process of its own with a time budget (:data:`BUDGETS`,
and what is left of :data:`TOTAL`), so that one that fails, hangs or exhausts
the device loses none of the others:

* ``environment``: device, driver, torch, CUDA, cuDNN and NCCL versions, and
  which of the workflows' optional packages are missing;
* ``cuda_tests``: ``pytest tests/spatial_parallel/test_cuda.py``, one row per test;
* ``conv_stack``: CosmoFlow's conv blocks forward and backward in float32 and
  bfloat16 autocast, NCDHW and channels-last, through the parallel layers on
  one rank against the plain stack (cuDNN) on the same volume, and the plain
  stack on a half-depth and a half-width block against the whole volume;
* ``training``: CosmoFlow and the 3D U-Net at 4x4x128^3 on one device from
  in-memory data: samples/s (CosmoFlow against MLPerf HPC v3.0's about 200
  per H100) and peak memory;
* ``zarr_training``: CosmoFlow from a Zarr store on local disk through a
  ``DataLoader`` with workers: samples/s against the in-memory rate, and the
  share of a step spent waiting for data (needs zarr and dask: ``make
  gpu-wheels`` downloads their wheels into ``gpu_wheels/``, which the check
  installs for its sections when that folder is carried; without them the
  section says so and skips);
* ``planner``: ``sciml spatial plan --calibrate --device cuda`` measures this
  GPU's constants, with which the planner prices both models on one rank:
  predicted against measured step time and memory;
* ``largest``: CosmoFlow at batch 1 on cubes of 256 to 768 voxels a side
  (bfloat16, then float32, each until its first failure): the planner's peak
  memory against a real run, out-of-memory reported as such;
* ``fused_sweeps``: K weather post-processors (MLP, pooled) trained as one,
  batched and one after another, against K separate runs
  (``benchmarks/_gpu_fused.py``).

``OUTDIR/gpu_check.json`` (through ``benchmarks/_report.write_report``) and
``OUTDIR/gpu_check.md`` are rewritten, atomically, after every section: a run
stopped from outside still leaves the sections it finished. A section's rows
are kept even when it fails or runs out of time. ``--dry-run`` runs every
section at tiny sizes on the CPU (the test suite does, so the script cannot
rot between GPU loans). The exit status is 0 when every section finished.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _gpu_fused import fused_sweeps
from _gpu_planner import largest, planner
from _gpu_probe import cuda_tests, environment
from _gpu_report import Part, read_part, write_markdown
from _gpu_workloads import conv_stack, training
from _gpu_zarr import missing, zarr_training
from _report import write_report

REPO = Path(__file__).resolve().parents[1]
#: Sections in the order they run, with their budgets in seconds on one H100/H200.
BUDGETS: dict[str, float] = {
    "environment": 25,
    "cuda_tests": 135,
    "conv_stack": 55,
    "training": 70,
    "zarr_training": 40,
    "planner": 70,
    "largest": 65,
    "fused_sweeps": 35,
}
#: Seconds of the whole check by default: about 8 minutes with a stopped section's grace.
TOTAL = 495.0
SECTIONS: dict[str, Callable[[Part], None]] = {
    "environment": environment,
    "cuda_tests": cuda_tests,
    "conv_stack": conv_stack,
    "training": training,
    "zarr_training": zarr_training,
    "planner": planner,
    "largest": largest,
    "fused_sweeps": fused_sweeps,
}
#: Seconds a stopped section's process gets beyond its budget before it is killed.
GRACE = 5.0
#: A section with fewer seconds left of the whole budget is not started.
LEAST = 10.0
#: Characters of a failed section's output kept in the report.
LOG_CHARS = 3000
#: Wheels ``make gpu-wheels`` downloads for the GPU machine (carried with the tree).
WHEELS = REPO / "gpu_wheels"


def _child_env() -> dict[str, str]:
    """This environment, the repository first on ``PYTHONPATH`` (sciml need not be installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def install_carried_wheels(target: Path, env: dict[str, str]) -> dict[str, Any]:
    """Install the wheels of :data:`WHEELS` into ``target`` for the sections, if needed.

    Only where something of :data:`_gpu_zarr.NEEDS` is missing and wheels were
    carried: ``pip install --no-index --no-deps --target`` (no package index
    is needed or reached), then ``target`` goes first on the sections'
    ``PYTHONPATH``. What happened is returned for the report, never raised:
    the Zarr section then says what it still misses.
    """
    absent = missing()
    wheels = sorted(WHEELS.glob("*.whl"))
    record: dict[str, Any] = {"missing": absent, "carried": len(wheels)}
    if not absent or not wheels:
        return record
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet"]
    command += ["--target", str(target), *map(str, wheels)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode:
        record["install_error"] = done.stderr[-LOG_CHARS:]
        return record
    env["PYTHONPATH"] = os.pathsep.join((str(target), env["PYTHONPATH"]))
    record["installed"] = [wheel.name for wheel in wheels]
    return record


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_CHARS:] if path.exists() else ""


def run_section(
    name: str,
    budget: float,
    scratch: Path,
    report: dict[str, Any],
    *,
    dry_run: bool,
    env: dict[str, str],
) -> dict[str, Any]:
    """Run one section in its own process, stopped after ``budget`` seconds; its record.

    The record holds the status (``ok``, ``failed`` or ``timeout``), the
    seconds it took, its rows and notes (those it finished, whatever the
    status) and, unless ``ok``, the end of its output.
    """
    part, log = scratch / f"{name}.json", scratch / f"{name}.log"
    (scratch / "report.json").write_text(json.dumps(report["sections"]))
    command = [sys.executable, str(Path(__file__).resolve()), "--section", name]
    command += ["--part", str(part), "--scratch", str(scratch)]
    command += ["--deadline", str(time.time() + budget)] + (["--dry-run"] if dry_run else [])
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
        )
        try:
            code = proc.wait(timeout=budget + GRACE)
            status = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the section and any process it started
            proc.wait()
            status = "timeout"
    record: dict[str, Any] = {"status": status, "seconds": time.time() - start, "budget_s": budget}
    record |= read_part(part)
    if status != "ok":
        record["error"] = _tail(log)
    return record


def _summary(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"section": name, "status": s["status"], "seconds": s["seconds"]}
        for name, s in report["sections"].items()
    ]


def write_outputs(out: Path, report: dict[str, Any]) -> None:
    """Rewrite ``gpu_check.json`` and ``gpu_check.md`` in ``out`` (each atomically)."""
    write_report(out / "gpu_check.json", "gpu_check", _summary(report), **report)
    write_markdown(out / "gpu_check.md", report)


def run_check(out: Path, names: list[str], *, budget: float, dry_run: bool) -> dict[str, Any]:
    """Every section of ``names`` in turn within ``budget`` seconds, writing after each."""
    env = _child_env()
    # this process holds no CUDA context: the whole device is the sections'
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    start = time.time()
    report: dict[str, Any] = {
        "dry_run": dry_run,
        "budget_s": budget,
        "elapsed_s": 0.0,
        "environment": {},
        "sections": {},
    }
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(out, report)
    with tempfile.TemporaryDirectory(prefix="sciml-gpu-check-") as folder:
        report["wheels"] = install_carried_wheels(Path(folder) / "site", env)
        for name in names:
            left = budget - (time.time() - start)
            if left < LEAST:
                note = f"not started: {left:.0f} s left of the check's {budget:.0f} s"
                record: dict[str, Any] = {"status": "not run", "seconds": 0.0}
                record |= {"rows": [], "notes": [note]}
            else:
                section_budget = min(BUDGETS[name], left)
                record = run_section(
                    name, section_budget, Path(folder), report, dry_run=dry_run, env=env
                )
            report["sections"][name] = record
            if name == "environment" and record["rows"]:
                report["environment"] = record["rows"][0]
            report["elapsed_s"] = time.time() - start
            print(f"== {name}: {record['status']} in {record['seconds']:.1f} s", flush=True)
            if record["status"] != "ok":
                print(record.get("error", "")[-1500:], flush=True)
            write_outputs(out, report)
    return report


def _section(args: argparse.Namespace) -> int:
    """Child mode: run one section, recording into its part file."""
    scratch = Path(args.scratch)
    part = Part(
        Path(args.part),
        args.deadline,
        args.dry_run,
        scratch,
        report=json.loads((scratch / "report.json").read_text()),
    )
    SECTIONS[args.section](part)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the check (or, with the internal ``--section``, one section of it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--budget", type=float, default=TOTAL, help="seconds for the whole check")
    parser.add_argument(
        "--only", action="append", choices=list(BUDGETS), help="run only this section (repeatable)"
    )
    for internal in ("--section", "--part", "--scratch"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.section is not None:
        return _section(args)
    if args.outdir is None:
        parser.error("give OUTDIR, the folder for gpu_check.json and gpu_check.md")
    if not args.budget > 0:
        parser.error(f"--budget must be positive seconds, got {args.budget}")
    names = [name for name in BUDGETS if args.only is None or name in args.only]
    report = run_check(Path(args.outdir), names, budget=args.budget, dry_run=args.dry_run)
    return 0 if all(s["status"] == "ok" for s in report["sections"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
