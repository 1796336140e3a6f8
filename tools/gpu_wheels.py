"""Download the wheels the GPU check's Zarr section needs, for the GPU machine's Python.

Usage: python tools/gpu_wheels.py [--dest gpu_wheels] [--python-version 3.12]
       (``make gpu-wheels``)

A lent GPU machine reaches no package index, and its Python (3.12, with torch,
numpy, scipy, pandas, xarray, pytest and a few more) has no zarr or dask. This
downloads, from a machine that reaches the index, the wheels of :data:`ROOTS`
and of everything they require that the GPU machine lacks, at the versions
installed here (those the test suite ran), built for that Python on x86-64
Linux. Carry the folder with the working tree (the device tool's ``carry``);
``benchmarks/gpu_check.py`` installs them for its sections with ``pip install
--no-index --no-deps --target``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: What the Zarr section imports beyond the GPU machine's packages.
ROOTS = ("zarr", "dask")
#: Distributions the GPU machine's Python has already (torch's and pytest's included).
ON_THE_GPU_MACHINE = frozenset(
    canonicalize_name(name)
    for name in (
        "torch",
        "numpy",
        "scipy",
        "pandas",
        "xarray",
        "tqdm",
        "matplotlib",
        "h5py",
        "numba",
        "pytest",
        "pytest-xdist",
        "hypothesis",
        "packaging",
        "typing-extensions",
        "fsspec",
        "filelock",
        "jinja2",
        "networkx",
        "sympy",
        "python-dateutil",
        "pytz",
        "tzdata",
        "six",
    )
)
#: Platform tags of the GPU machine's wheels (x86-64 Linux, glibc 2.17 or newer).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def needed(roots: tuple[str, ...] = ROOTS, *, python_version: str = "3.12") -> dict[str, str]:
    """Each distribution :data:`ROOTS` require (transitively) that the GPU machine lacks.

    Versions are those installed in this environment; requirements are read
    from their metadata, with markers evaluated for ``python_version``.

    Raises:
        PackageNotFoundError: A root or a requirement is not installed here.
    """
    versions: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in versions or name in ON_THE_GPU_MACHINE:
            continue
        dist = distribution(name)
        versions[name] = dist.version
        for text in dist.requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or marker.evaluate({"extra": "", "python_version": python_version}):
                todo.append(requirement.name)
    return dict(sorted(versions.items()))


def download(versions: dict[str, str], dest: Path, *, python_version: str) -> None:
    """``pip download`` each pinned wheel, without its requirements, into ``dest``."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python_version, "--implementation", "cp", "--dest", str(dest)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += [f"{name}=={version}" for name, version in versions.items()]
    subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> int:
    """Download the wheels and list them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path("gpu_wheels"))
    parser.add_argument("--python-version", default="3.12")
    args = parser.parse_args(argv)
    try:
        versions = needed(python_version=args.python_version)
    except PackageNotFoundError as err:
        parser.error(f"{err.name} is not installed here; run `make install` first")
    args.dest.mkdir(parents=True, exist_ok=True)
    download(versions, args.dest, python_version=args.python_version)
    wheels = sorted(args.dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {args.dest}: carry this folder")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
