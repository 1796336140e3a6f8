"""Torch's module test configurations of the 3-D layers: exact on split blocks or refused.

Every 5-D configuration torch's ``module_db`` tests (constructor arguments,
training and eval, empty batches), and a few it lacks that once failed, run
through ``parallelize`` on 2 gloo ranks (``make test``) and on width and
depth x height meshes (the slow tests): float64 against one device within
:func:`~sciml.spatial_parallel.testing.compare_parallel`'s derived bounds, or
refused with an error naming the layer or op.
"""

from __future__ import annotations

import pytest

from sciml.distributed import spawn

pytest.importorskip("expecttest")  # torch.testing._internal imports it

from tests.spatial_parallel.module_db_workers import (  # noqa: E402
    compare_module_db,
    configuration_keys,
)

#: Configurations that must be computed, not refused (the regressions among them).
COMPUTED = (
    "Conv3d[0:train]",
    "ConvTranspose3d[0:train]",
    "BatchNorm3d[1:train]",  # momentum=None
    "BatchNorm3d[5:train]",  # an empty batch
    "BatchNorm3d(momentum=None)[3 steps]",
    "Upsample(size=12)[empty]",
    "ConstantPad3d[0:train]",
    "ReplicationPad3d[0:train]",
    "AdaptiveAvgPool3d[2:train]",  # output_size (3, 4, 5)
    "AdaptiveAvgPool3d[3:train]",  # output_size (None, 4, 5)
    *(f"AdaptiveMaxPool3d[{i}:{mode}]" for i in (0, 2, 3, 4, 5) for mode in ("train", "eval")),
)


def _check(mesh: dict[str, int], ranks: int) -> None:
    keys = configuration_keys()
    results = spawn(compare_module_db, ranks, mesh, keys, timeout=600)
    for rank, outcome in enumerate(results):
        wrong = {k: v for k, v in outcome.items() if v != "exact" and not v.startswith("refused:")}
        assert not wrong, (rank, wrong)
        refused = {k: v for k, v in outcome.items() if k in COMPUTED and v != "exact"}
        assert not refused, (rank, refused)
        for key, message in outcome.items():
            if message.startswith("refused:"):
                layer = key.split("[")[0].split("(")[0]
                assert layer in message or "spatial_parallel: F." in message, (key, message)


def test_module_db_on_two_ranks_along_depth() -> None:
    _check(dict(depth=2), 2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mesh", "ranks"), [(dict(width=2), 2), (dict(depth=2, height=2), 4)], ids=["w2", "d2h2"]
)
def test_module_db_on_other_meshes(mesh: dict[str, int], ranks: int) -> None:
    _check(mesh, ranks)
