"""Rank functions for the norm, PReLU, LayerNorm, subclass and MONAI tests.

Module level, so that :func:`sciml.distributed.spawn` can import them. Models
are built from ``(name, kwargs)`` specs as in :mod:`tests.spatial_parallel.workers`,
with the names below added: user modules that permute to channels last, pool
to a dense head, or subclass a supported layer, and MONAI's 3-D networks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.testing import Comparison, compare_parallel
from tests.spatial_parallel import workers


class Conv3DSimple(nn.Conv3d):
    """As torchvision's video ResNet block: a Conv3d subclass that only sets options."""

    def __init__(self, in_planes: int, out_planes: int) -> None:
        super().__init__(in_planes, out_planes, kernel_size=3, padding=1, bias=False)


class ScaledConv3d(nn.Conv3d):
    """A Conv3d subclass that changes the computation: refused."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input) * 2


class StandardisedConv3d(nn.Conv3d):
    """Weight standardisation through ``_conv_forward``: refused too."""

    def _conv_forward(
        self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        weight = (weight - weight.mean()) / weight.std()
        return super()._conv_forward(input, weight, bias)


class MyInstanceNorm(nn.InstanceNorm3d):
    """An InstanceNorm3d subclass that keeps the parent's forward."""

    def extra_repr(self) -> str:
        return "mine"


class ChannelsLast(nn.Module):
    """Conv, LayerNorm over channels in ``(N, D, H, W, C)`` layout, PReLU, conv."""

    def __init__(self, channels: int = 3, shape: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv3d(2, channels, 3, padding=1)
        self.norm = nn.LayerNorm(shape or channels)
        self.act = nn.PReLU(channels)
        self.out = nn.Conv3d(channels, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x).permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
        return self.out(self.act(y))


def dense_head(prelu: int = 1) -> nn.Module:
    """Conv, global pooling, then LayerNorm and PReLU on the replicated dense tensor."""
    return nn.Sequential(
        nn.Conv3d(2, 4, 3, padding=1),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.LayerNorm(4),
        nn.PReLU(prelu),
        nn.Linear(4, 3),
    )


def monai(name: str, **kwargs: Any) -> nn.Module:
    """A MONAI network by class name."""
    import monai.networks.nets

    return getattr(monai.networks.nets, name)(**kwargs)


BUILDERS: dict[str, Any] = {
    "Conv3DSimple": Conv3DSimple,
    "ScaledConv3d": ScaledConv3d,
    "StandardisedConv3d": StandardisedConv3d,
    "MyInstanceNorm": MyInstanceNorm,
    "ChannelsLast": ChannelsLast,
    "dense_head": dense_head,
    "monai": monai,
}


def build(spec: tuple[str, dict[str, Any]]) -> nn.Module:
    """A module from ``(name, kwargs)``: the names above, else :func:`workers.build`."""
    name, kwargs = spec
    if name == "Seq":
        return nn.Sequential(*(build(s) for s in kwargs["layers"]))
    if name in BUILDERS:
        return BUILDERS[name](**kwargs)
    return workers.build(spec)


def run(mesh_kwargs: dict[str, int], cases: list[dict[str, Any]]) -> list[Comparison | str]:
    """Compare every case on one mesh; a case that ``parallelize`` refuses gives its message."""
    mesh = SpatialMesh(**mesh_kwargs)
    out: list[Comparison | str] = []
    for case in cases:
        options = dict(case)
        spec, shape, seed = options.pop("spec"), options.pop("shape"), options.pop("seed", 0)
        torch.manual_seed(seed)
        try:
            out.append(compare_parallel(build(spec), mesh, shape, seed=seed, **options))
        except ValueError as err:
            out.append(f"ValueError: {err}")
    return out


def norm_errors(mesh_kwargs: dict[str, int]) -> dict[str, str]:
    """Messages of the split layers and of ``parallelize`` for what they refuse."""
    mesh = SpatialMesh(**mesh_kwargs)
    calls: dict[str, Any] = {
        "one_voxel": lambda: parallelize(nn.InstanceNorm3d(2), mesh)(
            shard(torch.randn(2, 2, 1, 1, 1), mesh)
        ),
        "empty_batch": lambda: parallelize(nn.InstanceNorm3d(2, track_running_stats=True), mesh)(
            shard(torch.randn(0, 2, 4, 4, 4), mesh)
        ),
        "channels": lambda: parallelize(nn.InstanceNorm3d(3, affine=True), mesh)(
            shard(torch.randn(1, 2, 4, 4, 4), mesh)
        ),
        "layer_norm_width": lambda: parallelize(nn.LayerNorm(4), mesh)(
            shard(torch.randn(1, 2, 4, 4, 4), mesh)
        ),
        "channels_last_split": lambda: parallelize(ChannelsLast(shape=(3, 3)), mesh)(
            shard(torch.randn(1, 2, 4, 4, 3), mesh)
        ),
        "forward": lambda: parallelize(nn.Sequential(ScaledConv3d(1, 1, 1)), mesh),
        "conv_forward": lambda: parallelize(nn.Sequential(StandardisedConv3d(1, 1, 1)), mesh),
    }
    messages = {}
    for key, call in calls.items():
        try:
            call()
            messages[key] = ""
        except ValueError as err:
            messages[key] = str(err)
    return messages


def local_statistics(mesh_kwargs: dict[str, int], cases: list[dict[str, Any]]) -> list[Any]:
    """:func:`run` with normalisation statistics of each rank's block only (no all-reduce)."""
    from sciml.spatial_parallel.layers import norm

    original = norm.all_reduce_sum
    norm.all_reduce_sum = lambda x, group: x  # type: ignore[assignment]
    try:
        return run(mesh_kwargs, cases)
    finally:
        norm.all_reduce_sum = original
