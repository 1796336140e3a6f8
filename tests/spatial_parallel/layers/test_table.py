"""The layer table: a new spatial layer is one class and one entry, read by every reader."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sciml.distributed import init_distributed
from sciml.spatial_parallel import SpatialMesh, parallelize
from sciml.spatial_parallel.layers.conv import SpatialConv3d
from sciml.spatial_parallel.layers.table import (
    LAYERS,
    LayerSpec,
    readme_list,
    register,
    unregister,
)
from sciml.spatial_parallel.planner.graph import trace


class ScaledConv3d(nn.Conv3d):
    """A toy layer of a user's model: a convolution whose output is doubled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Twice the convolution."""
        return 2 * super().forward(x)


class SpatialScaledConv3d(SpatialConv3d, ScaledConv3d):
    """Its split version: the split convolution, doubled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Twice the split convolution of this rank's block."""
        return 2 * SpatialConv3d.forward(self, x)


@pytest.fixture
def registered() -> object:
    register(LayerSpec(ScaledConv3d, "swap", "Conv3d", SpatialScaledConv3d, overlap=True))
    yield
    unregister(ScaledConv3d)


@pytest.mark.usefixtures("registered")
def test_a_registered_layer_is_swapped_and_priced() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(ScaledConv3d(1, 2, 3, padding=1), nn.ReLU())
    x = torch.randn(1, 1, 6, 6, 6)
    with init_distributed():
        pmodel = parallelize(model, SpatialMesh(depth=1), overlap=False)
        assert type(pmodel[0]) is SpatialScaledConv3d and pmodel[0].overlap is False
        torch.testing.assert_close(pmodel(x), model(x))
    conv = trace(model, (1, 1, 6, 6, 6)).layers[0]
    plain = trace(nn.Conv3d(1, 2, 3, padding=1), (1, 1, 6, 6, 6)).layers[0]
    assert (conv.kind, conv.cost) == ("ScaledConv3d", "Conv3d")
    assert (conv.flops, conv.windows) == (plain.flops, plain.windows)
    assert "`ScaledConv3d`" in readme_list()


def test_an_unregistered_layer_is_refused_by_both() -> None:
    assert ScaledConv3d not in LAYERS
    model = nn.Sequential(ScaledConv3d(1, 2, 3, padding=1))
    with init_distributed(), pytest.raises(ValueError, match="overrides ScaledConv3d.forward"):
        parallelize(model, SpatialMesh(depth=1))
    with pytest.raises(ValueError, match="overrides ScaledConv3d.forward"):
        trace(model, (1, 1, 6, 6, 6))


def test_an_entry_is_checked() -> None:
    with pytest.raises(ValueError, match="must subclass it"):
        LayerSpec(nn.MaxPool3d, "swap", "MaxPool3d", SpatialConv3d)
    with pytest.raises(ValueError, match="only for it"):
        LayerSpec(nn.ReLU, "elementwise", parallel=SpatialConv3d)
    with pytest.raises(ValueError, match="already has Conv3d"):
        register(LayerSpec(nn.Conv3d, "swap", "Conv3d", SpatialConv3d))
