"""The small collectives of the spine: this rank's place, and reductions of a few values.

:func:`all_reduce_cpu` reduces a small CPU tensor over any group on any backend
(through :func:`collective_device`, which reads the group's backend
configuration with :func:`backend_devices`); every module's metadata
reductions go through it. :func:`all_reduce_sums` adds named per-rank sums,
:func:`to_device` moves a nested batch. :mod:`sciml.distributed` re-exports
them all.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "all_reduce_cpu",
    "all_reduce_sums",
    "backend_devices",
    "check_replica",
    "collective_device",
    "gather_objects",
    "on_rank0",
    "to_device",
    "world",
]

T = TypeVar("T")


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def check_replica(replica: object) -> tuple[int, int]:
    """Return a data-parallel ``(index, count)`` after checking ``0 <= index < count``.

    Raises:
        ValueError: If ``replica`` is not a pair of integers in that range.
    """
    if isinstance(replica, tuple) and len(replica) == 2:
        index, count = replica
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in replica)
        if ints and 0 <= index < count:
            return index, count
    raise ValueError(f"replica must be (index, count) with 0 <= index < count, got {replica!r}")


def all_reduce_cpu(
    tensor: torch.Tensor, *, op: Any = None, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """All-reduce a small CPU tensor over ``group`` (every rank) and return it on the CPU.

    Works on any backend: under NCCL alone the values travel through this rank's
    GPU (:func:`collective_device`). Without a process group (or with one rank
    in ``group``) ``tensor`` is returned unchanged.
    """
    if world()[1] == 1 or dist.get_world_size(group) == 1:
        return tensor
    moved = tensor.to(collective_device(group), copy=True)
    dist.all_reduce(moved, op=dist.ReduceOp.SUM if op is None else op, group=group)
    return moved.cpu()


def collective_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """The device for small collectives over ``group`` (default: every rank).

    The CPU when the group has a CPU backend (gloo, also in a device-aware
    ``cpu:gloo,cuda:nccl`` group) or without a process group; this rank's GPU
    under NCCL alone.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return torch.device("cpu")
    if "cpu" in backend_devices(group):
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def backend_devices(group: dist.ProcessGroup | None = None) -> set[str]:
    """The device types whose tensors ``group``'s collectives take (``{"cpu", "cuda"}`` ...).

    Read from the group's backend configuration: gloo is ``cpu:gloo,cuda:gloo``
    (its collectives take CUDA tensors too, its point-to-point messages do not),
    NCCL ``cuda:nccl``, a device-aware group ``cpu:gloo,cuda:nccl``.
    """
    config = dist.get_backend_config(group)
    devices = set()
    for part in config.split(","):
        device, _, backend = part.rpartition(":")
        if device:
            devices.add(device)
        else:
            devices.add("cuda" if backend == "nccl" else "cpu")
    return devices


def all_reduce_sums(sums: Mapping[str, float], count: int) -> tuple[dict[str, float], int]:
    """Sum named per-rank sums and a sample count over every rank (in float64).

    Returns:
        The summed values by name and the summed count; unchanged on one rank.
    """
    names = sorted(sums)
    packed = torch.tensor([sums[name] for name in names] + [count], dtype=torch.float64)
    values = all_reduce_cpu(packed).tolist()
    return dict(zip(names, values[:-1], strict=True)), int(values[-1])


def gather_objects(value: T) -> list[T]:
    """Every rank's ``value`` (any picklable object), in rank order.

    Returns:
        ``[value]`` without a process group.
    """
    size = world()[1]
    if size == 1:
        return [value]
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, value)
    return gathered


def on_rank0(fn: Callable[[], T]) -> T:
    """Call ``fn`` on rank 0 only; every rank returns its result (collective).

    For work that must happen once (writing a run folder's files, a choice every rank
    must share). An error on rank 0 is raised on every rank, so no rank waits on a
    peer that gave up.

    Raises:
        Exception: On rank 0, what ``fn`` raised; on the others, an exception of the
            same type when it is a built-in one (else ``RuntimeError``) naming it.
    """
    result: Any = None
    error: Exception | None = None
    if world()[0] == 0:
        try:
            result = fn()
        except Exception as err:  # noqa: BLE001 - raised below, on every rank
            error = err
    failure = None if error is None else (type(error).__name__, _builtin_name(error), str(error))
    result, failure = gather_objects((result, failure))[0]
    if error is not None:
        raise error
    if failure is not None:
        name, builtin, text = failure
        kind = getattr(builtins, builtin) if builtin else RuntimeError
        raise kind(f"rank 0 failed with {name}: {text}")
    return result


def _builtin_name(error: Exception) -> str | None:
    """The name of the built-in exception type ``error`` has or derives from first."""
    for kind in type(error).__mro__:
        if kind.__module__ == "builtins" and issubclass(kind, Exception):
            return kind.__name__
    return None


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a batch (nested in dicts, lists and tuples) to ``device``.

    A moved tensor keeps the Python attributes of the original (such as the
    global shape that :func:`sciml.spatial_parallel.shard` marks a block with).
    """
    if isinstance(batch, torch.Tensor):
        moved = batch.to(device, non_blocking=True)
        if moved is not batch:
            moved.__dict__.update(batch.__dict__)
        return moved
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(value, device) for value in batch)
    return batch
