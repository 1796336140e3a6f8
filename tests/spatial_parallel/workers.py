"""Rank functions for the multi-process tests (module level, so that spawn can import them).

Each rank builds the same model from the same seed, runs the single-device
reference on the whole global batch itself, runs the parallel model on its
block, and returns the largest relative differences of everything the
design promises: outputs, input gradients, parameter gradients and running
statistics.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh, gradient_sync, parallelize, shard, unshard


def build(spec: tuple[str, dict[str, Any]]) -> nn.Module:
    """A module from ``(name, kwargs)``: a ``torch.nn`` class, a sciml model or ``Seq``."""
    name, kwargs = spec
    if name == "Seq":
        return nn.Sequential(*(build(s) for s in kwargs["layers"]))
    if name in ("UNet", "CosmoFlow"):
        import sciml.models

        return getattr(sciml.models, name)(**kwargs)
    return getattr(nn, name)(**kwargs)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference relative to the largest reference magnitude."""
    if a.shape != b.shape:
        raise AssertionError(f"shape {tuple(a.shape)} != reference {tuple(b.shape)}")
    if b.numel() == 0:
        return 0.0
    scale = max(float(b.abs().max()), 1e-30)
    return float((a - b).abs().max()) / scale


def compare(
    mesh: SpatialMesh, spec: tuple[str, dict[str, Any]], shape: tuple[int, ...], *,
    dtype: torch.dtype = torch.float64, seed: int = 0, train: bool = True, steps: int = 1,
    overlap: bool = True, sync: bool = True, evaluate: bool = False,
) -> dict[str, float]:  # fmt: skip
    """Errors of one parallel model against the single-device model on this rank."""
    torch.manual_seed(seed)
    model = build(spec).to(dtype)
    model.train(train)
    pmodel = parallelize(model, mesh, overlap=overlap)
    gradient_sync(pmodel).enabled = sync
    errors: dict[str, float] = {}
    for step in range(steps):
        x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed + step))
        xr = x.clone().requires_grad_()
        state = torch.get_rng_state()
        y = model(xr)
        torch.set_rng_state(state)
        w = torch.randn(y.shape, dtype=dtype, generator=torch.Generator().manual_seed(99 + step))
        (y * w).sum().backward()
        xl = shard(x, mesh).requires_grad_()
        yl = pmodel(xl)
        wl = shard(w, mesh) if y.dim() == 5 else w[mesh.block([w.shape[0], 1, 1, 1, 1])[0]]
        (yl * wl).sum().backward()
        ref_y = shard(y.detach(), mesh) if y.dim() == 5 else y.detach()[mesh.block(
            [y.shape[0], 1, 1, 1, 1])[0]]  # fmt: skip
        errors[f"out{step}"] = rel(yl.detach(), ref_y)
        errors[f"unshard{step}"] = rel(unshard(yl.detach(), mesh), y.detach())
        errors[f"xgrad{step}"] = rel(xl.grad, shard(xr.grad, mesh))
    if evaluate:  # then an eval-mode pass: running statistics, no dropout
        model.eval()
        pmodel.eval()
        x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed + 50))
        y = model(x)
        yl = pmodel(shard(x, mesh))
        errors["eval"] = rel(unshard(yl.detach(), mesh), y.detach())
    for (name, p), q in zip(model.named_parameters(), pmodel.parameters(), strict=True):
        errors[f"grad:{name}"] = rel(q.grad, p.grad / mesh.data)
    for (name, b), c in zip(model.named_buffers(), pmodel.buffers(), strict=True):
        errors[f"buffer:{name}"] = rel(c.to(b.dtype), b)
    assert list(pmodel.state_dict()) == list(model.state_dict())
    return errors


def run_cases(mesh_kwargs: dict[str, int], cases: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Run :func:`compare` for every case on one mesh; returns this rank's errors."""
    mesh = SpatialMesh(**mesh_kwargs)
    out = []
    for case in cases:
        if os.environ.get("SCIML_TEST_TRACE"):
            print(mesh.rank, case, flush=True)
        out.append(compare(mesh, **case))
    return out


def expect_errors(mesh_kwargs: dict[str, int]) -> dict[str, str]:
    """Messages of the errors that bad meshes, layers and blocks must raise."""
    messages = {}

    def catch(key: str, fn: Any) -> None:
        try:
            fn()
        except (ValueError, RuntimeError) as err:
            messages[key] = str(err)

    world = 1
    for size in mesh_kwargs.values():
        world *= size
    catch("mesh_product", lambda: SpatialMesh(depth=world + 1))
    catch("mesh_negative", lambda: SpatialMesh(depth=0, height=world))
    mesh = SpatialMesh(**mesh_kwargs)
    conv2d = nn.Sequential(nn.Conv3d(1, 2, 3), nn.Sequential(nn.Conv2d(2, 2, 3)))
    catch("conv2d", lambda: parallelize(conv2d, mesh))
    catch("adaptive", lambda: parallelize(nn.AdaptiveAvgPool3d(2), mesh))
    catch("bilinear", lambda: parallelize(nn.Upsample(scale_factor=2, mode="bilinear"), mesh))
    dense = parallelize(nn.Sequential(nn.Conv3d(1, 2, 1), nn.Linear(4, 2)), mesh)
    catch("linear_on_split", lambda: dense(shard(torch.randn(1, 1, 8, 4, 4), mesh)))
    conv5 = parallelize(nn.Conv3d(1, 1, 5, padding=2), mesh)
    catch("halo", lambda: conv5(shard(torch.randn(1, 1, 4, 8, 8), mesh)))
    catch("not_5d", lambda: conv5(torch.randn(1, 8, 8)))
    bad_block = torch.randn(1, 1, 3 + mesh.rank, 8, 8)
    catch("bad_block", lambda: conv5(bad_block))
    return messages


def sharding_and_losses(mesh_kwargs: dict[str, int]) -> dict[str, float]:
    """shard/unshard round trips and the loss helpers against whole-tensor values."""
    from sciml.spatial_parallel import global_loss, mse_loss, spatial_mean

    mesh = SpatialMesh(**mesh_kwargs)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 7, 5, 4, dtype=torch.float64, generator=g)
    t = torch.randn(3, 2, 7, 5, 4, dtype=torch.float64, generator=g)
    local = shard(x, mesh)
    mine = x[mesh.block(x.shape)[0]]  # this replica's part of the batch
    term = spatial_mean(local, mesh)
    total = term.detach().clone()
    torch.distributed.all_reduce(total, group=mesh.spatial_group)
    mse = mse_loss(local, shard(t, mesh), mesh).detach().clone()
    torch.distributed.all_reduce(mse, group=mesh.spatial_group)
    replica_mse = (mine - t[mesh.block(x.shape)[0]]).square().mean() if len(mine) else 0.0
    batch_means = [x[s].mean() for s in torch.tensor_split(torch.arange(3), mesh.data)]
    return {
        "unshard": rel(unshard(local, mesh), x),
        "head_unshard": rel(unshard(local.sum((2, 3, 4)), mesh), x.sum((2, 3, 4)))
        if mesh.spatial_size == 1
        else 0.0,
        "spatial_mean": abs(float(total) - float(mine.mean())) if len(mine) else 0.0,
        "mse": abs(float(mse) - float(replica_mse)),
        "global_loss": abs(global_loss(term, mesh) - float(sum(batch_means) / mesh.data)),
    }


def sharded_read(mesh_kwargs: dict[str, int], path: str) -> float:
    """read_block of a netCDF variable (through Dask-backed xarray) against shard()."""
    import xarray as xr

    from sciml.spatial_parallel.io import read_block

    mesh = SpatialMesh(**mesh_kwargs)
    with xr.open_dataset(path, chunks={"d": 2}) as dataset:
        lazy = dataset["density"]
        block = read_block(lazy, mesh)
        whole = torch.from_numpy(lazy.values)
    return rel(block, shard(whole, mesh))


def overlap_paths(mesh_kwargs: dict[str, int]) -> dict[str, str]:
    """The autograd node that produces a split conv's output for each overlap setting."""
    mesh = SpatialMesh(**mesh_kwargs)
    x = shard(torch.randn(1, 2, 8, 8, 8), mesh).requires_grad_()
    nodes = {}
    for key, overlap in (("default", None), ("on", True), ("off", False)):
        conv = parallelize(nn.Conv3d(2, 2, 3, padding=1), mesh, overlap=overlap)
        nodes[key] = type(conv(x).grad_fn).__name__
    return nodes
