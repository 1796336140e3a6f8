"""Packages that import their public names on first use keep the same names."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from tests.test_cli import HEAVY_LIBRARIES

LAZY_PACKAGES = ("sciml.spatial_parallel", "sciml.volumes", "sciml.geo")

# Imports the lazy packages, prints the heavy libraries that took, then imports the
# submodule ``parallelize`` before reading the public name it shares.
_PROBE = """
import json, sys, types
for name in json.loads(sys.argv[1]):
    __import__(name)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
import sciml.spatial_parallel.parallelize
from sciml.spatial_parallel import parallelize
print(json.dumps({"heavy": heavy, "function": isinstance(parallelize, types.FunctionType)}))
"""


def test_importing_a_lazy_package_imports_no_heavy_library() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(LAZY_PACKAGES), json.dumps(HEAVY_LIBRARIES)],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"heavy": [], "function": True}


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_public_name_is_its_home_modules(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        home = importlib.import_module(f"{package}.{module._HOMES[name]}")
        assert getattr(module, name) is getattr(home, name)
        assert name in dir(module)
    assert sorted(module.__all__) == sorted(module._HOMES)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        module.nope  # noqa: B018
