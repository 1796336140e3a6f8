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

from sciml.spatial_parallel import SpatialMesh, parallelize, shard, unshard
from sciml.spatial_parallel.halo.autograd import halo_extend
from sciml.spatial_parallel.testing import Comparison, compare_parallel
from sciml.spatial_parallel.testing import relative_error as rel


def build(spec: tuple[str, dict[str, Any]]) -> nn.Module:
    """A module from ``(name, kwargs)``: a ``torch.nn`` class, a sciml model or ``Seq``."""
    name, kwargs = spec
    if name == "Seq":
        return nn.Sequential(*(build(s) for s in kwargs["layers"]))
    if name in ("UNet", "CosmoFlow"):
        import sciml.models

        return getattr(sciml.models, name)(**kwargs)
    return getattr(nn, name)(**kwargs)


def compare(
    mesh: SpatialMesh,
    spec: tuple[str, dict[str, Any]],
    shape: tuple[int, ...],
    *,
    seed: int = 0,
    overlap: bool | None = True,
    **options: Any,
) -> Comparison:
    """One parallel model against the single-device model on this rank."""
    torch.manual_seed(seed)
    return compare_parallel(build(spec), mesh, shape, seed=seed, overlap=overlap, **options)


def run_cases(mesh_kwargs: dict[str, int], cases: list[dict[str, Any]]) -> list[Comparison]:
    """Run :func:`compare` for every case on one mesh; returns this rank's comparisons."""
    mesh = SpatialMesh(**mesh_kwargs)
    out = []
    for case in cases:
        if os.environ.get("SCIML_TEST_TRACE"):
            print(mesh.rank, case, flush=True)
        out.append(compare(mesh, **case))
    return out


class _DepthLast(nn.Module):
    """A Linear over the depth dim, moved last: a split dim, which it cannot transform."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv3d(1, 2, 1), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).transpose(2, 4)).transpose(2, 4)


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
    catch("bilinear", lambda: parallelize(nn.Upsample(scale_factor=2, mode="bilinear"), mesh))
    dense = parallelize(_DepthLast(), mesh)
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
    from sciml.spatial_parallel.replicated import mark_replicated

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
    # a replicated output (after global pooling): the local loss is the global loss
    pooled = mark_replicated(x.sum((2, 3, 4)))
    unmarked = mse_loss(local.clone(), shard(t, mesh).clone(), mesh)  # one collective
    return {
        "mse_replicated": abs(
            float(mse_loss(pooled, torch.zeros_like(pooled), mesh)) - float(pooled.square().mean())
        ),
        "mse_unmarked": abs(float(unmarked) - float(mse_loss(local, shard(t, mesh), mesh))),
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


def corrupted_halo(
    mesh_kwargs: dict[str, int], cases: list[dict[str, Any]], scale: float
) -> list[Comparison]:
    """:func:`run_cases` with the first plane of every assembled halo off by ``scale``."""
    from sciml.spatial_parallel.layers import conv_transpose, upsample, window

    modules = (window, conv_transpose, upsample)
    original = halo_extend

    def wrong(x: torch.Tensor, plan: Any) -> torch.Tensor:
        ext = original(x, plan)
        axis = plan.axes[0]
        rest = ext.narrow(axis, 1, ext.shape[axis] - 1)
        return torch.cat([ext.narrow(axis, 0, 1) * (1 + scale), rest], axis)

    for module in modules:
        module.halo_extend = wrong
    try:
        return run_cases(mesh_kwargs, cases)
    finally:
        for module in modules:
            module.halo_extend = original


def norm_edge_inputs(mesh_kwargs: dict[str, int]) -> dict[str, Any]:
    """BatchNorm state after an empty batch, eval mode and no_grad, against torch.nn."""
    mesh = SpatialMesh(**mesh_kwargs)
    out: dict[str, Any] = {}
    for momentum in (0.1, None):
        torch.manual_seed(0)
        reference = nn.BatchNorm3d(2, momentum=momentum).double()
        layer = parallelize(reference, mesh)
        empty = torch.zeros(0, 2, 4, 4, 4, dtype=torch.float64)
        reference(empty)
        layer(shard(empty, mesh))
        x = torch.randn(2, 2, 4, 4, 4, dtype=torch.float64)
        reference.eval()(x)  # eval: no update
        layer.eval()(shard(x, mesh))
        reference.train()
        layer.train()
        with torch.no_grad():  # no_grad still updates, as torch does
            reference(x)
            layer(shard(x, mesh))
        out[f"momentum={momentum}"] = {
            name: rel(b.to(torch.float64), a.to(torch.float64))
            for (name, a), b in zip(reference.named_buffers(), layer.buffers(), strict=True)
        }
    single_value = parallelize(nn.BatchNorm3d(2), mesh)
    try:
        single_value(shard(torch.randn(1, 2, 1, 1, 1), mesh))
    except ValueError as err:
        out["one_value"] = str(err)
    out["one_value_state"] = int(single_value.num_batches_tracked)  # type: ignore[arg-type]
    return out


def option_errors(mesh_kwargs: dict[str, int]) -> dict[str, str]:
    """Messages of parallelize for layer options it refuses, and of bad inputs."""
    mesh = SpatialMesh(**mesh_kwargs)
    refused = {
        "return_indices": nn.MaxPool3d(2, return_indices=True),
        "max_padding": nn.MaxPool3d(3, padding=2),
        "avg_padding": nn.AvgPool3d(3, padding=2),
        "output_padding": nn.ConvTranspose3d(1, 1, 3, stride=2, output_padding=2),
        "align_corners": nn.Upsample(scale_factor=2, align_corners=False),
        "no_size": nn.Upsample(),
        "area": nn.Upsample(scale_factor=2, mode="area"),
        "adaptive_max_indices": nn.AdaptiveMaxPool3d(1, return_indices=True),
        "lp_pool": nn.LPPool3d(2, 2),
        "flatten_batch": nn.Flatten(0),
        "lazy": nn.LazyConv3d(2, 3),
    }
    messages = {}
    for key, layer in refused.items():
        try:
            parallelize(nn.Sequential(layer), mesh)
        except ValueError as err:
            messages[key] = str(err)
    conv = parallelize(nn.Sequential(nn.Conv3d(2, 2, 3, padding=1)), mesh)
    norm = parallelize(nn.Sequential(nn.GroupNorm(2, 4)), mesh)
    for key, fn in {
        "channels": lambda: norm(shard(torch.randn(1, 2, 4, 4, 4), mesh)),
        "dtype": lambda: conv(shard(torch.randn(1, 2, 4, 4, 4, dtype=torch.float64), mesh)),
    }.items():
        try:
            fn()
        except (ValueError, RuntimeError) as err:
            messages[key] = str(err)
    return messages


def public_api_errors(mesh_kwargs: dict[str, int]) -> dict[str, str]:
    """Messages of the public functions for bad inputs (every rank raises alike)."""
    from sciml.spatial_parallel import global_loss, mse_loss
    from sciml.spatial_parallel.io import read_block

    mesh = SpatialMesh(**mesh_kwargs)
    x = torch.randn(2, 2, 6, 4, 4)
    wrong_block = shard(x, mesh)[:, :, : 3 - 2 * mesh.rank]  # rank 1 holds too little
    model = nn.Sequential(nn.Conv3d(2, 2, 3, padding=1))
    pmodel = parallelize(model, mesh)
    calls: dict[str, Any] = {
        "shard_numpy": lambda: shard(x.numpy(), mesh),  # type: ignore[arg-type]
        "shard_no_mesh": lambda: shard(x, None),  # type: ignore[arg-type]
        "unshard_wrong_block": lambda: unshard(wrong_block, mesh),
        "unshard_mixed": lambda: unshard(shard(x, mesh)[0] if mesh.rank else shard(x, mesh), mesh),
        "mse_broadcast": lambda: mse_loss(shard(x, mesh), shard(x[:, :1], mesh), mesh),
        "global_loss_vector": lambda: global_loss(torch.ones(3), mesh),
        "parallelize_type": lambda: parallelize("model", mesh),  # type: ignore[arg-type]
        "parallelize_mesh": lambda: parallelize(model, {"depth": 2}),  # type: ignore[arg-type]
        "bucket": lambda: parallelize(model, mesh, bucket_mb=0),
        "twice": lambda: parallelize(pmodel, mesh),
        "meta_params": lambda: parallelize(nn.Conv3d(2, 2, 3, device="meta"), mesh),
        "mixed_devices": lambda: parallelize(
            nn.Sequential(nn.Conv3d(2, 2, 3), nn.Conv3d(2, 2, 3, device="meta")), mesh
        ),
        "input_shape": lambda: parallelize(model, mesh, input_shape=(6, 4)),
        "declared_other": lambda: parallelize(model, mesh, input_shape=(9, 4, 4))(
            shard(x, mesh).clone()
        ),
        "read_block_mesh": lambda: read_block(x.numpy(), None),  # type: ignore[arg-type]
        "compare_shape": lambda: compare_parallel(model, mesh, (1, 2, 4, 4)),
        "compare_dtype": lambda: compare_parallel(model, mesh, (1, 2, 4, 4, 4), dtype=torch.int64),
    }
    messages = {}
    for key, call in calls.items():
        try:
            call()
        except (TypeError, ValueError) as err:
            messages[key] = f"{type(err).__name__}: {err}"
    return messages
