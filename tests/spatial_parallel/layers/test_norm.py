"""InstanceNorm3d, LayerNorm, PReLU and subclasses of the split layers, on 2 and 4 gloo ranks.

Every case is checked by :func:`sciml.spatial_parallel.testing.compare_parallel`
against the float64 single-device model: output blocks, gathered outputs,
input gradient blocks, every parameter gradient after the built-in reduction,
running statistics after two steps and the eval-mode output, within the
derived bounds.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sciml.distributed import spawn
from sciml.spatial_parallel.testing import Comparison
from tests.spatial_parallel.layer_workers import norm_errors, run

#: Cases with running statistics take two steps and compare an eval-mode pass too.
RUNNING: dict[str, Any] = dict(steps=2, evaluate=True)


def conv(out: int = 3) -> tuple[str, dict[str, Any]]:
    """A Conv3d spec with 2 input channels (and a bias, whose gradient the norms cancel)."""
    return ("Conv3d", dict(in_channels=2, out_channels=out, kernel_size=3, padding=1))


def seq(*layers: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A Sequential spec."""
    return ("Seq", dict(layers=list(layers)))


#: Keyword arguments of :func:`layer_workers.run` (float64).
CASES: list[dict[str, Any]] = [
    dict(spec=("InstanceNorm3d", dict(num_features=2)), shape=(2, 2, 7, 5, 3)),
    dict(
        spec=seq(conv(), ("InstanceNorm3d", dict(num_features=3, affine=True))),
        shape=(3, 2, 7, 5, 3),
    ),
    dict(
        spec=seq(
            conv(),
            ("InstanceNorm3d", dict(num_features=3, track_running_stats=True, momentum=0.3)),
        ),
        shape=(3, 2, 5, 6, 3),
        **RUNNING,
    ),
    dict(
        spec=(
            "InstanceNorm3d",
            dict(num_features=2, affine=True, track_running_stats=True, momentum=None, eps=1e-3),
        ),
        shape=(2, 2, 5, 4, 3),
        **RUNNING,
    ),
    dict(spec=seq(conv(), ("PReLU", {})), shape=(2, 2, 5, 4, 3)),
    dict(spec=seq(conv(), ("PReLU", dict(num_parameters=3, init=0.1))), shape=(2, 2, 5, 4, 3)),
    dict(spec=("ChannelsLast", {}), shape=(2, 2, 5, 4, 3)),  # LayerNorm, PReLU channels last
    dict(spec=("dense_head", {}), shape=(3, 2, 5, 4, 3)),  # LayerNorm, PReLU replicated
    dict(spec=("dense_head", dict(prelu=4)), shape=(3, 2, 5, 4, 3)),
    dict(
        spec=seq(
            ("Conv3DSimple", dict(in_planes=2, out_planes=3)),
            ("MyInstanceNorm", dict(num_features=3, affine=True, track_running_stats=True)),
        ),
        shape=(2, 2, 5, 4, 3),
        **RUNNING,
    ),
]

#: LayerNorm over the last dim (width in (N, C, D, H, W)): local unless width is split.
WIDTH_NORM = dict(spec=seq(conv(), ("LayerNorm", dict(normalized_shape=3))), shape=(2, 2, 5, 4, 3))


def check(mesh: dict[str, int], entries: list[dict[str, Any]]) -> None:
    """Spawn ``mesh``, compare every entry and fail listing every quantity above its bound."""
    nprocs = 1
    for size in mesh.values():
        nprocs *= size
    results = spawn(run, nprocs, mesh, [dict(e, dtype=torch.float64) for e in entries])
    failures = []
    for rank, comparisons in enumerate(results):
        for entry, result in zip(entries, comparisons, strict=True):
            assert isinstance(result, Comparison), (entry, result)
            if not result.ok:
                failures.append(f"{entry} rank {rank}: {result.failures()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "mesh",
    [dict(depth=2), dict(height=2, width=2), dict(data=2, depth=2)],
    ids=["1x2x1x1", "1x1x2x2", "2x2x1x1"],
)
def test_norms_prelu_and_subclasses_match_one_device(mesh: dict[str, int]) -> None:
    check(mesh, [*CASES, WIDTH_NORM] if "width" not in mesh else CASES)


def test_odd_blocks_on_four_ranks_along_depth() -> None:
    """Depth 7 over 4 ranks: blocks of 2, 2, 2 and 1."""
    check(dict(depth=4), CASES[1:4] + CASES[6:8])


def test_refusals_say_why() -> None:
    messages = spawn(norm_errors, 2, {"width": 2})[0]
    assert "more than 1 spatial element per sample" in messages["one_voxel"]
    assert "(1, 1, 1)" in messages["one_voxel"]
    assert "empty global batch" in messages["empty_batch"]
    assert "expected 3 channels" in messages["channels"]
    assert "normalised dims [4] of the input" in messages["layer_norm_width"]
    assert "normalised dims [3]" in messages["channels_last_split"]
    assert "norm (LayerNorm): normalised dims [3]" in messages["channels_last_split"]
    assert (
        "'0' (ScaledConv3d) subclasses Conv3d but overrides ScaledConv3d.forward"
        in (messages["forward"])
    )
    assert "its forward is not the one the split layer replaces" in messages["forward"]
    assert "overrides StandardisedConv3d._conv_forward" in messages["conv_forward"]
