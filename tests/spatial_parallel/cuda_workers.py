"""Rank functions for the CUDA tests (module level, for spawn): this rank's GPU."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.audit import CommLog
from sciml.spatial_parallel.testing import Comparison
from tests.spatial_parallel.comm_workers import head_model
from tests.spatial_parallel.workers import compare


def device() -> torch.device:
    """This rank's GPU (the one init_distributed bound under NCCL, else the first)."""
    return torch.device("cuda", torch.cuda.current_device())


def run_cases_on_gpu(mesh_kwargs: dict[str, int], cases: list[dict[str, Any]]) -> list[Comparison]:
    """Every case with the parallel model on this rank's GPU (references on the CPU)."""
    mesh = SpatialMesh(**mesh_kwargs)
    return [compare(mesh, **case, device=device()) for case in cases]


def step_audit(mesh_kwargs: dict[str, int], overlap: bool | None) -> dict[str, Any]:
    """Devices of every collective in a training step, and whether the step syncs the host.

    The first step traces the shapes and builds the halo plans; the second runs
    under ``torch.cuda.set_sync_debug_mode("error")``.
    """
    mesh = SpatialMesh(**mesh_kwargs)
    torch.manual_seed(0)
    model: nn.Module = head_model()
    pmodel = parallelize(model, mesh, overlap=overlap, device=device())
    x = shard(torch.randn(2, 2, 8, 6, 6, device=device()), mesh)
    pmodel(x).square().sum().backward()
    torch.cuda.synchronize()
    result: dict[str, Any] = {}
    with CommLog() as log:
        torch.cuda.set_sync_debug_mode("error")
        try:
            pmodel(x).square().sum().backward()
        except RuntimeError as err:
            result["sync"] = str(err)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    result["devices"] = sorted(log.devices())
    return result
