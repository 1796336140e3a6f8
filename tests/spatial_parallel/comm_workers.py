"""Rank functions that record what the parallel layers send (module level, for spawn)."""

from __future__ import annotations

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.audit import CommLog


def halo_model() -> nn.Module:
    """Convolutions and pooling whose halos need edges, corners and a circular wrap."""
    return nn.Sequential(
        nn.Conv3d(2, 3, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool3d(3, stride=2, padding=1),
        nn.Conv3d(3, 2, 3, padding=1, padding_mode="circular"),
    )


def posted_messages(mesh_kwargs: dict[str, int]) -> dict[str, CommLog]:
    """The messages of one forward and backward pass, with and without overlap."""
    mesh = SpatialMesh(**mesh_kwargs)
    logs = {}
    for overlap in (True, False):
        torch.manual_seed(0)
        pmodel = parallelize(halo_model(), mesh, overlap=overlap)
        x = shard(torch.randn(2, 2, 7, 6, 5), mesh).requires_grad_()
        with CommLog() as log:
            pmodel(x).square().sum().backward()
        logs[f"overlap={overlap}"] = log
    return logs
