"""tools/gpu_wheels.py: which wheels a GPU machine without a package index is given."""

import importlib.util
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gpu_wheels.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_wheels", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheels_to_carry_are_zarr_and_dask_with_what_the_gpu_machine_lacks() -> None:
    tool = _tool()
    versions = tool.needed()
    assert {"zarr", "numcodecs", "dask", "toolz", "cloudpickle", "partd"} <= set(versions)
    assert not set(versions) & tool.ON_THE_GPU_MACHINE  # numpy, torch, ... are there
    assert versions["zarr"] == version("zarr")  # the version the suite ran with
