"""benchmarks/gpu_check.py: its dry run on the CPU, on a Python without the workflows' extras.

The GPU machines the check is made for hold torch, numpy, scipy, pandas,
xarray, matplotlib, tqdm, h5py, numba and pytest, and none of the other
runtime dependencies: the dry run here runs with those refused at import
(a ``sitecustomize`` on ``PYTHONPATH``, in every process the check starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: The runtime dependencies (pyproject.toml) a bare GPU machine lacks, and monai.
ABSENT = (
    *("zarr", "dask", "distributed", "netCDF4", "geopandas", "rasterio", "shapely"),
    *("pyproj", "pyogrio", "osmnx", "pyrosm", "monai"),
)
_BLOCKER = f"""
import importlib.abc, importlib.util, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {ABSENT!r}:
            raise ImportError(f"{{name}} is not installed on the GPU machine")
        return None

_find_spec = importlib.util.find_spec

def _absent_find_spec(name, package=None):
    # as for a package not installed: no spec (xarray asks so whether dask is there)
    return None if name.partition(".")[0] in {ABSENT!r} else _find_spec(name, package)

sys.meta_path.insert(0, _Absent())
importlib.util.find_spec = _absent_find_spec
"""
SECTIONS = [
    "environment",
    "cuda_tests",
    "conv_stack",
    "training",
    "zarr_training",
    "planner",
    "largest",
    "fused_sweeps",
]


def _check(out: Path, *args: str, blocker: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), str(REPO)]))
    command = [sys.executable, str(BENCHMARKS / "gpu_check.py"), str(out), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)


@pytest.fixture(scope="module")
def blocker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("absent")
    (folder / "sitecustomize.py").write_text(_BLOCKER)
    return folder


@pytest.mark.system
def test_the_dry_run_runs_every_section_without_the_absent_packages(
    tmp_path: Path, blocker: Path
) -> None:
    """One dry run (a minute of CPU): its JSON report, its figures and its Markdown."""
    done = _check(tmp_path, "--dry-run", blocker=blocker)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["benchmark"] == "gpu_check" and report["dry_run"] is True
    assert list(report["sections"]) == SECTIONS
    failed = {n: s.get("error") for n, s in report["sections"].items() if s["status"] != "ok"}
    assert failed == {}
    without_zarr = report["sections"].pop("zarr_training")  # skipped, saying why
    assert without_zarr["rows"] == [] and "make gpu-wheels" in without_zarr["notes"][0]
    assert all(s["rows"] for s in report["sections"].values())
    assert report["wheels"]["missing"] == ["zarr", "dask"]
    # every section's process saw the refusals
    assert {"zarr", "dask", "netCDF4", "geopandas", "rasterio"} <= set(
        report["environment"]["missing_packages"]
    )
    assert [r["section"] for r in report["rows"]] == SECTIONS
    report["sections"]["zarr_training"] = without_zarr
    _assert_the_figures(report["sections"])
    _assert_the_markdown((tmp_path / "gpu_check.md").read_text())


def _assert_the_figures(sections: dict[str, Any]) -> None:
    """Every section's rows, and the figures computed from others, as the check defines them."""
    outcomes = {r["outcome"] for r in sections["cuda_tests"]["rows"]}
    assert outcomes == {"skipped"}  # no CUDA here; on a GPU: passed
    stack = sections["conv_stack"]["rows"]
    assert {(r["precision"], r["layout"]) for r in stack} == {
        (p, layout) for p in ("fp32", "bf16") for layout in ("ncdhw", "channels_last_3d")
    }
    for row in stack:
        for key in ("parallel_whole", "plain_half_depth", "plain_half_width"):
            assert row[f"{key}_over_plain_whole"] == row[f"{key}_ms"] / row["plain_whole_ms"]
    training = sections["training"]["rows"]
    assert {r["model"] for r in training} == {"cosmoflow", "unet"}
    assert all(r["samples_per_s"] == r["shape"][0] / r["step_s"] for r in training)
    planner = {r["model"]: r for r in sections["planner"]["rows"]}
    assert set(planner) == {"cosmoflow", "unet"}
    for name, row in planner.items():
        assert row["time_ratio"] == row["measured_step_s"] / row["predicted_step_s"]
        trained = next(r for r in training if r["model"] == name and r["precision"] == "fp32")
        assert row["training_step_s"] == trained["step_s"]  # the training section's run
    failed = [r for r in stack + training if any(key.endswith("error") for key in r)]
    assert failed == []
    fused = sections["fused_sweeps"]["rows"]
    assert [(r["model"], r["copies"]) for r in fused] == [("mlp", 1), ("mlp", 2)]
    for row in fused:
        for label in ("vmap", "loop"):
            speedup = row[f"{label}_samples_per_s"] / row["separate_samples_per_s"]
            assert row[f"{label}_speedup"] == speedup > 0
    largest = sections["largest"]["rows"]
    assert {(r["precision"], r["outcome"]) for r in largest} == {
        ("bf16", "trained"),
        ("fp32", "trained"),
    }


def _assert_the_markdown(text: str) -> None:
    """The Markdown names the device and every section."""
    assert text.startswith("# GPU check (dry run on the CPU)\n")
    assert "- device: cpu" in text and "- torch: " in text
    for name in SECTIONS:
        assert f"\n## {name}: ok (" in text


@pytest.mark.system
def test_the_zarr_section_trains_from_a_store_where_zarr_is_installed(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, str(BENCHMARKS / "gpu_check.py"), str(tmp_path), "--dry-run"]
    done = subprocess.run(
        [*command, "--only", "zarr_training"], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (section,) = json.loads((tmp_path / "gpu_check.json").read_text())["sections"].values()
    rows = section["rows"]
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    for row in rows:
        assert "error" not in row and 0.0 <= row["loader_stall"] <= 1.0
        assert row["timed_samples"] == 4  # the second pass over 4 samples, in batches of 2
        assert row["over_mlperf_h100"] == row["samples_per_s"] / 200.0
        assert "over_in_memory" not in row  # the training section did not run


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel of a package ``name`` whose module holds ``VALUE = 42``."""
    import zipfile

    path = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{file},,\n" for file in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(file, text)
    return path


def test_carried_wheels_are_installed_for_the_sections_without_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = _module("gpu_check", monkeypatch)
    wheels = tmp_path / "gpu_wheels"
    wheels.mkdir()
    _wheel(wheels, "carried_probe")
    monkeypatch.setattr(check, "WHEELS", wheels)
    env = {"PYTHONPATH": str(REPO)}
    monkeypatch.setattr(check, "missing", lambda: [])
    assert check.install_carried_wheels(tmp_path / "site", env) == {"missing": [], "carried": 1}
    assert env == {"PYTHONPATH": str(REPO)}  # nothing missing: nothing installed
    monkeypatch.setattr(check, "missing", lambda: ["zarr"])
    record = check.install_carried_wheels(tmp_path / "site", env)
    assert record["installed"] == ["carried_probe-0.1-py3-none-any.whl"], record
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "site")
    code = "import carried_probe; print(carried_probe.VALUE)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "42", done.stderr


@pytest.mark.system
def test_without_a_gpu_each_section_fails_on_its_own_and_says_why(
    tmp_path: Path, blocker: Path
) -> None:
    done = _check(tmp_path, "--only", "environment", "--only", "largest", blocker=blocker)
    assert done.returncode == 1
    sections = json.loads((tmp_path / "gpu_check.json").read_text())["sections"]
    assert [s["status"] for s in sections.values()] == ["failed", "failed"]
    environment = sections["environment"]
    assert environment["rows"][0]["cuda_available"] is False  # the rows before the failure
    assert "no CUDA device: run the GPU check with --dry-run" in environment["error"]
    assert "gpu_check.md" in os.listdir(tmp_path)


def _module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import importlib

    return importlib.import_module(name)


def test_a_check_out_of_time_starts_no_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the check hides the GPU from itself
    check = _module("gpu_check", monkeypatch)
    assert check.main([str(tmp_path), "--dry-run", "--budget", "1"]) == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert {s["status"] for s in report["sections"].values()} == {"not run"}
    assert "not started: 1 s left of the check's 1 s" in report["sections"]["largest"]["notes"][0]


def test_a_stopped_pytest_keeps_the_tests_it_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _module("_gpu_probe", monkeypatch)
    log = (
        "tests/spatial_parallel/test_cuda.py::test_one_rank_nccl_matches_the_plain_model PASSED"
        " [ 16%]\n"
        "tests/spatial_parallel/test_cuda.py::test_two_processes_share_one_gpu_over_gloo[True] "
        "FAILED [ 33%]\n"
        "tests/spatial_parallel/test_cuda.py::test_two_processes_share_one_gpu_over_gloo[False] "
    )
    assert probe.finished_tests(log) == [
        ("test_one_rank_nccl_matches_the_plain_model", "passed"),
        ("test_two_processes_share_one_gpu_over_gloo[True]", "failed"),
    ]


def test_a_section_that_wrote_nothing_has_no_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _module("_gpu_report", monkeypatch)
    assert report.read_part(tmp_path / "absent.json") == {"rows": [], "notes": []}
    part = report.Part(tmp_path / "p.json", deadline=0.0, dry_run=True, scratch=tmp_path)
    assert part.enough(1, "the thing") is False
    assert report.read_part(tmp_path / "p.json")["notes"][0].startswith("skipped the thing: ")


def test_a_failed_run_is_recorded_by_its_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = _module("_gpu_workloads", monkeypatch).failure
    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB\nmore")
    assert failure(oom) == "out of memory: CUDA out of memory. Tried to allocate 8.00 GiB"
    assert failure(ValueError("bad size")) == "ValueError: bad size"
    assert failure(RuntimeError()) == "RuntimeError: "


def test_the_gpu_calibration_is_a_command_sciml_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one planner call a dry run cannot make (it calibrates the GPU) parses as meant."""
    from sciml.cli import build_parser

    arguments = _module("_gpu_planner", monkeypatch).calibration_arguments(tmp_path / "p.json")
    args = build_parser(["spatial"]).parse_args(arguments)
    assert (args.calibrate, args.device, args.cache, args.model) == (
        True,
        "cuda",
        str(tmp_path / "p.json"),
        None,  # calibrate and cache only: no grid is priced
    )
