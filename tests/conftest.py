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

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from hypothesis import settings  # noqa: E402

# CI runs the same examples every time; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


#: The tests whose ``xdist_group`` ``--dist loadgroup`` does not keep together.
UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the grouped tests that ``--dist loadgroup`` would not keep together.

    The tests of an ``xdist_group`` share a module fixture (a trained run, the docs
    build) or a resource used one at a time (Slurm, timings); split across workers they
    build it twice and race. pytest-xdist groups a test by an ``@group`` suffix on its
    node id, which some pytest releases drop (pytest-xdist#1386).
    """
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid.split("::")[-1]:
            item.stash[UNGROUPED] = (
                f"--dist loadgroup does not keep this test's xdist_group together: pytest "
                f"{pytest.__version__} drops pytest-xdist's group suffix (pytest-xdist#1386); "
                "install the dev extra's pytest"
            )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a grouped test that runs outside its group, before it builds anything."""
    if UNGROUPED in item.stash:
        pytest.fail(item.stash[UNGROUPED], pytrace=False)
