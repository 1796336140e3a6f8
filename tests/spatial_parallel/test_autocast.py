"""torch.autocast (bfloat16) on the parallel layers: the single-device autocast result.

Both the single-device and the parallel model run under CPU autocast and are
compared with the float64 single-device reference. The parallel error may be
the single-device error plus one bfloat16 rounding, scaled by the package's
FACTOR (:func:`sciml.spatial_parallel.testing.error_bound` with ``size=1``: the
operators accumulate in float32 on both sides, so rounding differences come
from the bfloat16 results, not from long sums). BatchNorm statistics stay
float32.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallelize, shard, unshard
from sciml.spatial_parallel.testing import error_bound, relative_error


def _model() -> nn.Module:
    return nn.Sequential(
        nn.Conv3d(2, 4, 3, padding=1, bias=False),  # a bias before BatchNorm has no gradient
        nn.BatchNorm3d(4),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.Conv3d(4, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.Upsample(scale_factor=2, mode="trilinear"),
        nn.ConvTranspose3d(4, 2, 3, padding=1),
        nn.AdaptiveAvgPool3d(1),
    )


def _run(model: nn.Module, x: torch.Tensor, *, autocast: bool) -> dict[str, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = model(x)
    weights = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)
    (y.double() * weights).sum().backward()
    assert x.grad is not None
    out = {"out": y.detach(), "xgrad": x.grad}
    out |= {f"grad:{n}": p.grad for n, p in model.named_parameters() if p.grad is not None}
    return out | {f"buffer:{n}": b.detach().clone() for n, b in model.named_buffers()}


def autocast_errors(mesh_kwargs: dict[str, int]) -> dict[bool, dict[str, Any]]:
    """:func:`_errors` with overlap on and off."""
    mesh = SpatialMesh(**mesh_kwargs)
    return {overlap: _errors(mesh, overlap) for overlap in (False, True)}


def _errors(mesh: SpatialMesh, overlap: bool) -> dict[str, Any]:
    """Relative errors of the single-device and parallel autocast runs against float64."""
    torch.manual_seed(0)
    model = _model()
    x = torch.randn(2, 2, 8, 8, 6)
    reference = _run(copy.deepcopy(model).double(), x.double(), autocast=False)
    single = _run(copy.deepcopy(model), x, autocast=True)
    pmodel = parallelize(model, mesh, overlap=overlap)
    local = shard(x, mesh)
    par = _run(pmodel, local, autocast=True)
    par["xgrad"] = unshard(par["xgrad"], mesh)
    dtypes = {k: (str(single[k].dtype), str(par[k].dtype)) for k in single}
    return {
        "single": {k: relative_error(single[k], v) for k, v in reference.items()},
        "parallel": {k: relative_error(par[k], v) for k, v in reference.items()},
        "dtypes": dtypes,
    }


def test_bfloat16_autocast_matches_single_device_autocast() -> None:
    for by_overlap in spawn(autocast_errors, 2, {"height": 2}):
        for overlap, result in by_overlap.items():
            for key, error in result["parallel"].items():
                bound = error_bound(result["single"][key], dtype=torch.bfloat16, size=1)
                assert error <= bound, (overlap, key, error, bound)
            for key, (single, parallel) in result["dtypes"].items():
                assert single == parallel, key
            assert result["dtypes"]["buffer:1.running_mean"] == ("torch.float32",) * 2
