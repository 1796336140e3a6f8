"""Measure what the planner predicts: a training step's time and peak memory on this rank.

:func:`time_step` and :func:`step_memory` are rank functions for
:func:`sciml.distributed.spawn.spawn`: each parallelises a model on a mesh and runs Adam
training steps on a random global batch; the first returns the best (and
median) step time, the second the memory a step adds to what it starts with.
On CUDA the peak is the allocator's (``torch.cuda.max_memory_allocated``); on
the CPU it is the growth of the resident set over one step (Linux
``/proc/self/status``, reset through ``/proc/self/clear_refs``), which follows
the live tensors because :func:`sciml.distributed.cpu_allocator.mmap_large_allocations`
sends every allocation over 64 KiB to its own mapping, returned when freed.

On the CPU the two run in separate fresh processes, each under its own
allocator policy. :func:`time_step` times steps as :func:`sciml.training.fit`
runs them, under :func:`sciml.distributed.cpu_allocator.keep_freed_memory` (freed memory
is reused, no page faults after the first step: the steady state the planner
prices). Under ``mmap_large_allocations`` every page of every activation
faults on first touch, which slows a step on one rank and more on two
(concurrent page faults contend). Switched on after timing instead, the heap
the timed steps left behind is reused and fragments, and the growth comes out
high.
"""

from __future__ import annotations

import contextlib
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from sciml.distributed.cpu_allocator import keep_freed_memory, mmap_large_allocations
from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.parallelize import parallelize
from sciml.spatial_parallel.sharding import shard

#: Bytes of the last-level cache assumed when sysfs does not list it (at least most CPUs').
DEFAULT_CACHE = 64 * 2**20


def cache_bytes(*, root: Path | str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of the largest CPU cache sysfs lists under ``root`` (the last level).

    :data:`DEFAULT_CACHE` when it lists none (not Linux, or no such files).
    """
    sizes = []
    for entry in Path(root).glob("index*/size"):
        with contextlib.suppress(OSError, ValueError):
            text = entry.read_text().strip().upper()
            unit = 2 ** (10 * "KMG".index(text[-1]) + 10) if text[-1:] in ("K", "M", "G") else 1
            sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes, default=DEFAULT_CACHE)


def cache_evictor() -> Callable[[], None]:
    """A function that writes a buffer twice the last-level cache (:func:`cache_bytes`).

    Called before a timed kernel, it leaves the kernel to read its operands from
    memory, as a training step's activations stream through the cache.
    """
    buffer = torch.empty(2 * cache_bytes() // 4)

    def evict() -> None:
        buffer.fill_(1.0)

    return evict


def clock() -> Callable[[], float]:
    """This thread's CPU time when torch computes on this thread alone, else wall time.

    With one intra-op thread every kernel runs on the calling thread, so its CPU
    time is the kernel's time on a core of its own, even on a loaded machine.
    """
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def status_bytes(field: str) -> float:
    """A memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024.0
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak(device: torch.device) -> None:
    """Restart the high-water mark (CUDA allocator's, or the process's resident set)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")


def _peak(device: torch.device, baseline: float) -> float:
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device)) - baseline
    return status_bytes("VmHWM") - baseline


def _thread_usage() -> tuple[float, float]:
    """This thread's (Linux; else the process's) system CPU seconds and minor page faults."""
    usage = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    return usage.ru_stime, float(usage.ru_minflt)


def _trainer(
    model: nn.Module, mesh_shape: dict[str, int], sample_shape: Sequence[int], where: torch.device
) -> Callable[[], tuple[float, float, float, float]]:
    """A function that runs one Adam step of ``model`` parallelised on ``mesh_shape``.

    It returns the step's wall-clock seconds, and of this thread in it: the CPU
    seconds, the system (kernel) part of them, and the minor page faults.
    """
    torch.manual_seed(0)
    mesh = SpatialMesh(**mesh_shape)  # type: ignore[arg-type]
    pmodel = parallelize(model.to(where), mesh)
    x = shard(torch.randn(tuple(sample_shape), device=where), mesh)
    optimizer = torch.optim.Adam(pmodel.parameters(), lr=1e-6)

    def step() -> tuple[float, float, float, float]:
        if dist.is_initialized():
            dist.barrier()
        start, cpu, (system, faults) = time.perf_counter(), time.thread_time(), _thread_usage()
        optimizer.zero_grad(set_to_none=False)
        pmodel(x).square().sum().backward()
        optimizer.step()
        if where.type == "cuda":
            torch.cuda.synchronize(where)
        wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
        now = _thread_usage()
        return wall, cpu, now[0] - system, now[1] - faults

    return step


def time_step(
    model: nn.Module,
    mesh_shape: dict[str, int],
    sample_shape: Sequence[int],
    *,
    repeats: int = 3,
    device: str = "cpu",
    keep_freed: bool = True,
) -> dict[str, float]:
    """Best and median seconds of an Adam step of ``model`` on this rank's block.

    ``cpu_seconds`` is this thread's CPU time in the best step: well below
    ``seconds`` when the rank waited for others or was descheduled (a loaded
    machine); ``system_seconds`` and ``page_faults`` are its kernel part and its
    minor page faults (memory the allocator gave back and took again). On the
    CPU it keeps freed memory first, as training does
    (:func:`sciml.distributed.cpu_allocator.keep_freed_memory`): run it in a fresh process.

    Args:
        model: The single-device model (parallelised here for ``mesh_shape``).
        mesh_shape: ``SpatialMesh`` keywords; their product is the world size.
        sample_shape: Global batch ``(N, C, D, H, W)`` (random normal values).
        repeats: Timed steps after one warm-up step.
        device: ``"cpu"`` or ``"cuda"`` (this rank's current device).
        keep_freed: On the CPU, keep freed memory as training does; ``False``
            leaves glibc's default policy (``benchmarks/cpu_allocator.py``
            measures the difference).
    """
    where = torch.device(device)
    if where.type == "cpu" and keep_freed:
        keep_freed_memory()
    step = _trainer(model, mesh_shape, sample_shape, where)
    step()  # warm-up: gradients, optimizer state, buckets, library workspaces
    times = [step() for _ in range(repeats)]
    best = min(times)
    return {
        "seconds": best[0],
        "median_seconds": statistics.median(t[0] for t in times),
        "cpu_seconds": best[1],
        "system_seconds": best[2],
        "page_faults": best[3],
    }


def step_memory(
    model: nn.Module,
    mesh_shape: dict[str, int],
    sample_shape: Sequence[int],
    *,
    device: str = "cpu",
) -> float:
    """Bytes an Adam step of ``model`` allocates on this rank beyond what it starts with.

    The growth over the memory held between steps (parameters, gradients,
    optimizer state, buckets, the input block): what the step itself allocates,
    to compare with the planner's activations, halos and workspace. On the CPU
    it switches :func:`sciml.distributed.cpu_allocator.mmap_large_allocations` on first:
    run it in a fresh process. It then counts blocks of 64 KiB and more: the
    smaller ones come from a heap the warm-up step already grew, so a model of many
    small blocks measures above its prediction (``benchmarks/spatial_plan_validation.py``
    compares the two).

    Args:
        model: The single-device model (parallelised here for ``mesh_shape``).
        mesh_shape: ``SpatialMesh`` keywords; their product is the world size.
        sample_shape: Global batch ``(N, C, D, H, W)`` (random normal values).
        device: ``"cpu"`` or ``"cuda"`` (this rank's current device).
    """
    where = torch.device(device)
    if where.type == "cpu":
        mmap_large_allocations()
    step = _trainer(model, mesh_shape, sample_shape, where)
    step()  # warm-up: gradients, optimizer state, buckets, library workspaces
    baseline = (
        float(torch.cuda.memory_allocated(where)) if where.type == "cuda" else status_bytes("VmRSS")
    )
    reset_peak(where)
    step()
    return _peak(where, baseline)
