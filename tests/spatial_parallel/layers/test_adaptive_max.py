"""``AdaptiveMaxPool3d`` and ``F.adaptive_max_pool3d`` on split volumes, against one device.

The input has plateaus (values rounded, gradients kept), so most bins hold ties:
torch picks the first maximum in row-major order and sends the gradient there
alone, and the parallel layer must pick the same element on whichever rank holds
it. Float64, odd sizes, bins that straddle the blocks and outputs larger than the
input along a dim.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.split.op_names import SplitOpError
from sciml.spatial_parallel.testing import Comparison, check_parallel

SHAPE = (2, 1, 7, 6, 5)


class Plateaus(nn.Module):
    """A convolution whose output is rounded (ties, with the gradient passed straight
    through), then adaptive max pooling to ``out`` (the module or the function)."""

    def __init__(self, out: Any, functional: bool = False) -> None:
        super().__init__()
        self.out, self.functional = out, functional
        self.conv, self.pool = nn.Conv3d(1, 2, 3, padding=1), nn.AdaptiveMaxPool3d(out)
        self.head = nn.Linear(2, 3) if out == 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = y + (y.detach().round() - y.detach())
        pooled = F.adaptive_max_pool3d(y, self.out) if self.functional else self.pool(y)
        return pooled if self.head is None else self.head(pooled.flatten(1))


def _check(model: nn.Module, mesh: dict[str, int]) -> None:
    ranks = mesh.get("depth", 1) * mesh.get("height", 1) * mesh.get("width", 1)
    for rank, result in enumerate(spawn(check_parallel, ranks, mesh, model, SHAPE, timeout=600)):
        assert isinstance(result, Comparison)
        assert result.ok, (rank, result.failures())


@pytest.mark.parametrize(
    ("out", "functional", "mesh"),
    [
        ((3, 2, 5), False, dict(depth=2)),
        ((3, 2, 5), True, dict(depth=2, height=2)),
        (1, False, dict(depth=2, width=2)),  # global: replicated, then a dense head
        pytest.param((9, 4, 1), False, dict(depth=3), marks=pytest.mark.slow),
        pytest.param((None, 3, 2), True, dict(width=2), marks=pytest.mark.slow),
        pytest.param((2, 2, 2), False, dict(height=2, width=2), marks=pytest.mark.slow),
    ],
)
def test_ties_go_where_torch_sends_them(out: Any, functional: bool, mesh: dict[str, int]) -> None:
    torch.manual_seed(0)
    _check(Plateaus(out, functional), mesh)


def indices_refusals(mesh_kwargs: dict[str, int]) -> list[str]:
    """The errors of ``return_indices=True`` as a module and as a function."""
    mesh = SpatialMesh(**mesh_kwargs)
    messages = []
    try:
        parallelize(nn.Sequential(nn.AdaptiveMaxPool3d(2, return_indices=True)), mesh)
    except ValueError as err:
        messages.append(str(err))
    model = parallelize(Plateaus(2), mesh)
    model.forward = lambda x: F.adaptive_max_pool3d(x, 2, return_indices=True)  # type: ignore[method-assign]
    try:
        model(shard(torch.randn(SHAPE), mesh))
    except SplitOpError as err:
        messages.append(str(err))
    return messages


def test_indices_are_refused_by_name() -> None:
    for messages in spawn(indices_refusals, 2, dict(depth=2)):
        assert len(messages) == 2, messages
        assert "return_indices=True" in messages[0], messages
        assert "adaptive_max_pool3d" in messages[1] and "depth (dim 2)" in messages[1], messages
