"""A model's own forward code on split blocks: exact against one device, or refused by name.

User modules call reductions, pads, slices, concatenations, reshapes and
shape branches on the output of a split convolution; MONAI's BasicUNet on a
40-deep volume pads in its ``UpCat`` where the levels have odd sizes. Each
runs on 2 and 4 gloo processes in float64 and must match the single-device
model to 1e-9 (outputs, input and parameter gradients: the float64
rounding of these small problems is below 1e-13), or raise naming the op,
the split dim and the calling line.
"""

from __future__ import annotations

import pytest

from sciml.distributed import spawn
from tests.spatial_parallel.functional_workers import (
    CASES,
    ONE_AXIS_CASES,
    REFUSED,
    compare_basic_unet,
    compare_cases,
    refused_messages,
)

MESHES = [dict(depth=2), dict(depth=2, height=2)]
IDS = ["1x2x1x1", "1x2x2x1"]
SHAPE = (2, 2, 7, 6, 5)
EXACT = 1e-9


def _ranks(mesh: dict[str, int]) -> int:
    return mesh.get("depth", 1) * mesh.get("height", 1)


@pytest.mark.parametrize("mesh", MESHES, ids=IDS)
def test_user_forward_code_exact(mesh: dict[str, int]) -> None:
    cases = list(CASES) + (list(ONE_AXIS_CASES) if len(mesh) == 1 else [])
    results = spawn(compare_cases, _ranks(mesh), mesh, SHAPE, cases, timeout=300)
    bad = {r: {k: v for k, v in res.items() if not v < EXACT} for r, res in enumerate(results)}
    assert not any(bad.values()), bad


#: Cases whose code needs a volume's shape (a diagonal of two equal dims).
VOLUME_ONLY = ("einsum_crossed_and_diagonal",)


@pytest.mark.slow
def test_user_forward_code_on_folded_blocks() -> None:
    """The same code on ``y.flatten(2, 3).unflatten(3, (3, -1))``, whose dim 2 merges depth
    and height (a folded block on 2 x 2): exact, on the blocks or gathered whole."""
    cases = [case for case in CASES if case not in VOLUME_ONLY]
    mesh = MESHES[1]
    results = spawn(compare_cases, 4, mesh, (2, 2, 7, 6, 6), cases, True, timeout=900)
    bad = {r: {k: v for k, v in res.items() if not v < EXACT} for r, res in enumerate(results)}
    assert not any(bad.values()), bad


@pytest.mark.parametrize("mesh", MESHES, ids=IDS)
def test_unsupported_ops_refused_by_name(mesh: dict[str, int]) -> None:
    results = spawn(refused_messages, _ranks(mesh), mesh, SHAPE, timeout=300)
    for messages in results:
        for case, (_, op) in REFUSED.items():
            message = messages[case]
            assert op in message, (case, message)
            assert "depth (dim 2)" in message, (case, message)
            assert "functional_workers.py:" in message, (case, message)


@pytest.mark.parametrize("mesh", MESHES, ids=IDS)
def test_monai_basic_unet_odd_levels(mesh: dict[str, int]) -> None:
    """40 deep: its levels are 40, 20, 10, 5, 2, so two UpCats pad along the split depth."""
    results = spawn(compare_basic_unet, _ranks(mesh), mesh, (1, 1, 40, 16, 16), timeout=600)
    for errors in results:
        assert max(errors.values()) < EXACT, errors
