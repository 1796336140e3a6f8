"""``sciml info``: versions, devices and distributed backends of this machine."""

from __future__ import annotations

import importlib.metadata
import platform

import torch
import torch.distributed as dist

import sciml

#: Packages whose versions the report lists after sciml's own.
PACKAGES = (
    "torch",
    "numpy",
    "xarray",
    "dask",
    "distributed",
    "netCDF4",
    "zarr",
    "rasterio",
    "geopandas",
    "shapely",
    "pyproj",
    "osmnx",
    "pyrosm",
    "matplotlib",
)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment_report() -> str:
    """Return a plain-text report of versions, devices and distributed backends."""
    lines = [f"python        {platform.python_version()} ({platform.platform()})"]
    lines.append(f"{'sciml':<13} {sciml.__version__}")
    lines += [f"{name:<13} {_version(name)}" for name in PACKAGES]
    lines.append(f"cpu threads   {torch.get_num_threads()}")
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            lines.append(f"cuda:{index:<8} {props.name}, {props.total_memory / 2**30:.0f} GiB")
    else:
        lines.append("cuda          not available")
    backends = {
        "gloo": dist.is_gloo_available(),
        "nccl": dist.is_nccl_available(),
        "mpi": dist.is_mpi_available(),
    }
    lines.append(
        "distributed   " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in backends.items())
    )
    return "\n".join(lines)
