"""Importing sciml changes no process-wide state a user or notebook relies on.

A library that switches the matplotlib backend at import turns off inline
figures in Jupyter; threads, warning filters, environment variables, dtypes
and logging are the caller's to set too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# Imports every third-party module of the second argument first (their own
# import-time settings are not sciml's), then every sciml module, and prints
# the process state before and after the sciml imports.
_PROBE = r"""
import importlib, json, logging, os, pkgutil, sys, warnings
import matplotlib
matplotlib.use("svg")
import numpy as np
import torch

def state():
    root = logging.getLogger()
    return {
        "matplotlib backend": matplotlib.get_backend(),
        "environment variables": dict(os.environ),
        "warnings filters": [repr(f) for f in warnings.filters],
        "torch threads": torch.get_num_threads(),
        "torch interop threads": torch.get_num_interop_threads(),
        "torch default dtype": str(torch.get_default_dtype()),
        "numpy error handling": np.geterr(),
        "root logger": [repr(h) for h in root.handlers] + [root.level],
    }

for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        pass
import sciml
before = state()
for info in pkgutil.walk_packages(sciml.__path__, "sciml."):
    if info.name != "sciml.__main__":  # the command itself, not a module to import
        importlib.import_module(info.name)
after = state()
others = [m for m in sys.modules if m.split(".")[0] != "sciml"]
print(json.dumps({"before": before, "after": after, "others": others}))
"""


def _probe(preload: list[str]) -> dict[str, Any]:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(preload)], capture_output=True, text=True
    )
    assert probe.returncode == 0, probe.stderr
    result: dict[str, Any] = json.loads(probe.stdout)
    return result


def test_importing_every_sciml_module_keeps_the_process_state() -> None:
    others = list(_probe([])["others"])
    state = _probe(others)
    changed = {
        key: (value, state["after"][key])
        for key, value in state["before"].items()
        if state["after"][key] != value
    }
    assert changed == {}
