"""Gradients of gradients through a parallel model: first order exact, second refused."""

from __future__ import annotations

import torch

from sciml.distributed import spawn
from sciml.spatial_parallel import (
    SecondDerivativeError,
    SpatialMesh,
    parallelize,
    shard,
    unshard,
)
from sciml.spatial_parallel.testing import relative_error


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv3d(2, 3, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv3d(3, 2, 3, padding=1)
    ).double()


def _penalty(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dL/dx taken with create_graph=True, then d|dL/dx|^2/dx (a gradient penalty)."""
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(model(x).square().sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(grad_x.square().sum(), x)
    return grad_x.detach(), second


def _first_and_second(depth: int) -> tuple[float, str]:
    x = torch.randn(
        1, 2, depth, 6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    mesh = SpatialMesh(depth=2)
    model = _model()
    reference, _ = _penalty(model, x)
    parallel = parallelize(_model(), mesh)
    local = shard(x, mesh).detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(parallel(local).square().sum(), local, create_graph=True)
    error = relative_error(unshard(grad_x.detach(), mesh), reference)
    try:
        torch.autograd.grad(grad_x.square().sum(), local)
    except SecondDerivativeError as refused:
        return error, str(refused)
    return error, "not refused"


def test_a_gradient_penalty_is_refused_by_name_not_silently_wrong() -> None:
    # before, the second derivative through a halo exchange came out 45% off, silently
    for error, message in spawn(_first_and_second, 2, 9):
        assert error < 1e-9  # float64, as every exactness test
        assert "second derivative (create_graph=True) reached the backward of a halo" in message
