"""Shared test settings: small, deterministic, one thread per process."""

import os

# Notebooks and demos read this to pick their small parameters.
os.environ.setdefault("SCIML_QUICK", "1")
# Multi-process tests start several ranks on 2 cores: keep each single-threaded.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# The ranks of spawn() fork from a server that imports these once per test process,
# instead of once per rank (MONAI's networks alone take 6 s of CPU to import).
os.environ.setdefault("SCIML_SPAWN_PRELOAD", "xarray,dask.array,zarr,monai.networks.nets")

import torch  # noqa: E402

torch.set_num_threads(1)

from hypothesis import settings  # noqa: E402

# CI runs the same examples every time; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
