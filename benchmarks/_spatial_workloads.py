"""The timed workloads of the spatial benchmarks (rank functions for ``spawn``).

Imported by ``benchmarks/spatial_*.py`` (run as scripts, so this folder is on
``sys.path``, in the spawned ranks too) and by notebook 01, with the interval
they give their per-round ratios (:func:`median_interval`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from sciml.models import CosmoFlow, UNet
from sciml.spatial_parallel.halo.exchange import HaloTimer
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.parallelize import parallelize
from sciml.spatial_parallel.sharding import shard


def conv_stack(channels: int, layers: int, *, explicit_depth_padding: bool = False) -> nn.Module:
    """``layers`` x (Conv3d(k=3, 'same') + ReLU), the benchmark network.

    ``explicit_depth_padding`` pads depth with ``ConstantPad3d`` before each
    convolution instead of inside it: the same function, but oneDNN's CPU
    convolution is much faster without padding along depth.
    """
    stack: list[nn.Module] = []
    for _ in range(layers):
        if explicit_depth_padding:
            stack += [
                nn.ConstantPad3d((0, 0, 0, 0, 1, 1), 0.0),
                nn.Conv3d(channels, channels, 3, padding=(0, 1, 1)),
            ]
        else:
            stack.append(nn.Conv3d(channels, channels, 3, padding=1))
        stack.append(nn.ReLU())
    return nn.Sequential(*stack)


def conv_pool_conv(channels: int) -> nn.Module:
    """Conv3d(k=3, 'same') + ReLU, MaxPool3d(2), Conv3d(k=3, 'same') + ReLU.

    The second convolution runs at half the input's edge.
    """
    return nn.Sequential(
        nn.Conv3d(channels, channels, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.Conv3d(channels, channels, 3, padding=1),
        nn.ReLU(),
    )


def time_conv_stack(
    mesh_shape: dict[str, Any] | None,
    size: int,
    *,
    channels: int = 16,
    layers: int = 4,
    repeats: int = 5,
    overlap: bool = True,
    explicit_depth_padding: bool = False,
    pooled: bool = False,
) -> dict[str, float]:
    """Median and best forward+backward seconds of :func:`conv_stack` on a ``size``^3 volume.

    ``pooled`` times :func:`conv_pool_conv` instead (``layers`` and
    ``explicit_depth_padding`` unused). ``mesh_shape=None`` times the plain
    single-device model on this rank. Also returns the median seconds per
    iteration of this thread's CPU time (the compute on one intra-op thread,
    which other processes on a loaded machine do not inflate) and spent
    waiting for halo messages.
    """
    torch.manual_seed(0)
    if pooled:
        model = conv_pool_conv(channels)
    else:
        model = conv_stack(channels, layers, explicit_depth_padding=explicit_depth_padding)
    x = torch.randn(1, channels, size, size, size)
    if mesh_shape is not None:
        mesh = SpatialMesh(**mesh_shape)
        model = parallelize(model, mesh, overlap=overlap)
        x = shard(x, mesh)
    x.requires_grad_()
    times, cpu, waits = [], [], []
    for _ in range(repeats + 1):
        x.grad = None
        if dist.is_initialized():
            dist.barrier()
        with HaloTimer() as timer:
            start, cpu_start = time.perf_counter(), time.thread_time()
            model(x).sum().backward()
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - cpu_start)
        waits.append(timer.total)
    return {
        "seconds": statistics.median(times[1:]),
        "best": min(times[1:]),
        "cpu_seconds": statistics.median(cpu[1:]),
        "halo_wait": statistics.median(waits[1:]),
    }


def median_interval(
    values: list[float], *, level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of ``values`` at ``level``.

    ``resamples`` resamples of ``values`` (with replacement, of its size) from
    a generator seeded with ``seed``; the interval's ends are the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of their medians.
    """
    if not values or not 0 < level < 1:
        raise ValueError(f"need at least one value and 0 < level < 1; got {values}, {level}")
    sample = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(sample, size=(resamples, sample.size)), axis=1)
    lo, hi = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


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


def volume_model(name: str, size: int) -> tuple[nn.Module, tuple[int, ...]]:
    """CosmoFlow (``"cosmoflow"``) or the 3D U-Net (``"unet"``), and its input on ``size``^3."""
    torch.manual_seed(0)
    if name == "cosmoflow":
        return CosmoFlow(4, 4, base_filters=16, n_conv=4), (1, 4, size, size, size)
    if name == "unet":
        return UNet(1, 2, base_channels=8, depth=3), (1, 1, size, size, size)
    raise ValueError(f"unknown model {name!r}: expected 'cosmoflow' or 'unet'")
