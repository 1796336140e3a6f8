"""Rank functions for notebooks, the demo and the benchmarks (importable by ``spawn``).

Each runs on every rank of an initialised process group, e.g.::

    from sciml.distributed import spawn
    from sciml.spatial_parallel.examples import check_model
    results = spawn(check_model, 2, {"depth": 2}, (1, 2, 16, 16, 16))
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from sciml.spatial_parallel import halo
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.parallelize import parallelize
from sciml.spatial_parallel.sharding import shard, unshard


def _small_unet() -> nn.Module:
    from sciml.models import UNet

    return UNet(2, 2, base_channels=4, depth=2)


def check_model(
    mesh_shape: dict[str, Any], shape: tuple[int, ...], *, seed: int = 0, slices: bool = False
) -> dict[str, Any]:
    """Run a small 3D U-Net split over ``mesh_shape`` and on one device; compare.

    Returns this rank's block bounds, the output's and gradients' largest
    relative differences, and the parallel forward+backward time; with
    ``slices``, also the middle width slice of channel 0 of the gathered
    parallel output and of the single-device output (NumPy arrays).
    """
    mesh = SpatialMesh(**mesh_shape)
    torch.manual_seed(seed)
    model = _small_unet().double()
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    reference = x.clone().requires_grad_()
    y = model(reference)
    y.square().sum().backward()
    pmodel = parallelize(model, mesh)
    local = shard(x, mesh).requires_grad_()
    dist.barrier()
    start = time.perf_counter()
    y_local = pmodel(local)
    y_local.square().sum().backward()
    elapsed = time.perf_counter() - start
    y_all = unshard(y_local.detach(), mesh)

    def rel(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
        assert a is not None and b is not None
        return float((a - b).abs().max() / b.abs().max())

    grads = [
        rel(q.grad, p.grad) for p, q in zip(model.parameters(), pmodel.parameters(), strict=True)
    ]
    extra = {}
    if slices:
        middle = shape[-1] // 2
        extra = {
            "parallel_slice": y_all[0, 0, :, :, middle].numpy(),
            "single_slice": y.detach()[0, 0, :, :, middle].numpy(),
        }
    return extra | {
        "rank": mesh.rank,
        "coords": mesh.coords,
        "block": [(s.start, s.stop) for s in mesh.block(shape)[2:]],
        "output": rel(y_all, y.detach()),
        "input_grad": rel(local.grad, shard(reference.grad, mesh)),  # type: ignore[arg-type]
        "param_grad": max(grads),
        "seconds": elapsed,
    }


def conv_stack(channels: int, layers: int, *, explicit_depth_padding: bool = False) -> nn.Module:
    """``layers`` x (Conv3d(k=3, 'same') + ReLU), the benchmark network.

    ``explicit_depth_padding`` pads depth with ``ConstantPad3d`` before each
    convolution instead of inside it: the same function, but oneDNN's CPU
    convolution is much faster without padding along depth.
    """
    stack: list[nn.Module] = []
    for _ in range(layers):
        if explicit_depth_padding:
            stack += [nn.ConstantPad3d((0, 0, 0, 0, 1, 1), 0.0),
                      nn.Conv3d(channels, channels, 3, padding=(0, 1, 1))]  # fmt: skip
        else:
            stack.append(nn.Conv3d(channels, channels, 3, padding=1))
        stack.append(nn.ReLU())
    return nn.Sequential(*stack)


def time_conv_stack(
    mesh_shape: dict[str, Any] | None,
    size: int,
    *,
    channels: int = 16,
    layers: int = 4,
    repeats: int = 5,
    overlap: bool = True,
    explicit_depth_padding: bool = False,
) -> dict[str, float]:
    """Median and best forward+backward seconds of :func:`conv_stack` on a ``size``^3 volume.

    ``mesh_shape=None`` times the plain single-device model on this rank. Also
    returns the median seconds per iteration spent waiting for halo messages.
    """
    torch.manual_seed(0)
    model = conv_stack(channels, layers, explicit_depth_padding=explicit_depth_padding)
    x = torch.randn(1, channels, size, size, size)
    if mesh_shape is not None:
        mesh = SpatialMesh(**mesh_shape)
        model = parallelize(model, mesh, overlap=overlap)
        x = shard(x, mesh)
    x.requires_grad_()
    times, waits = [], []
    for _ in range(repeats + 1):
        x.grad = None
        if dist.is_initialized():
            dist.barrier()
        halo.STATS.clear()
        start = time.perf_counter()
        model(x).sum().backward()
        times.append(time.perf_counter() - start)
        waits.append(sum(halo.STATS.values()))
    return {
        "seconds": statistics.median(times[1:]),
        "best": min(times[1:]),
        "halo_wait": statistics.median(waits[1:]),
    }


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_memory(
    mesh_shape: dict[str, Any] | None, size: int, *, base_filters: int = 32, n_conv: int = 5
) -> dict[str, float]:
    """Peak resident memory growth (MiB) of a CosmoFlow forward+backward on this rank.

    One warm-up iteration first (communication buffers, allocator pools), then
    the high-water mark is reset (Linux ``/proc/self/clear_refs``) and the
    growth of the resident set over a second iteration is measured.
    """
    from sciml.models import CosmoFlow

    torch.manual_seed(0)
    model: nn.Module = CosmoFlow(4, 4, base_filters=base_filters, n_conv=n_conv)
    x = torch.randn(1, 4, size, size, size)
    if mesh_shape is not None:
        mesh = SpatialMesh(**mesh_shape)
        model = parallelize(model, mesh)
        x = shard(x, mesh)
    model(x).sum().backward()
    model.zero_grad(set_to_none=False)
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = _status_mib("VmRSS")
    model(x).sum().backward()
    return {"peak_mib": _status_mib("VmHWM") - before, "input_mib": x.numel() * 4 / 2**20}
