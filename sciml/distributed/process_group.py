"""Start ``torch.distributed`` the same way under torchrun, Slurm or one process.

:func:`init_distributed` reads the launcher's variables (:mod:`sciml.distributed.launch`),
picks NCCL on GPUs and gloo on CPU, binds each process to its local GPU and
sets a timeout so that a rank that dies makes the others fail with a clear
message instead of hanging. Under NCCL the groups are device-aware
(``cpu:gloo,cuda:nccl``): CUDA tensors travel over NCCL, CPU tensors over gloo::

    with init_distributed(timeout=300) as ctx:
        print0(f"{ctx.world_size} ranks on {ctx.backend}")
        train(...)

:class:`PreemptionFlag` records SIGTERM/SIGUSR1 (Slurm's preemption and
time-limit signals) so that long work can checkpoint and stop on every rank
together; :func:`torch_threads` bounds a block's intra-op threads.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, ParamSpec, TypeVar

import torch
import torch.distributed as dist

from sciml.distributed.collectives import (
    all_reduce_cpu,
)
from sciml.distributed.launch import Source, detect_launch

__all__ = [
    "DEVICE_AWARE",
    "DistributedContext",
    "DistributedError",
    "PreemptionFlag",
    "backend_name",
    "default_backend",
    "init_distributed",
    "is_main_process",
    "print0",
    "rank_zero_only",
    "shutdown",
    "torch_threads",
]

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class DistributedError(RuntimeError):
    """A collective failed: a peer rank died, timed out or could not be reached."""


@dataclass(frozen=True)
class DistributedContext:
    """The initialised process group as seen from this rank.

    Use it as a context manager to shut the group down on exit and to turn a
    failed collective into a :class:`DistributedError` that names the rank.
    """

    source: Source
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    timeout: float

    @property
    def is_main(self) -> bool:
        """True on global rank 0."""
        return self.rank == 0

    def __enter__(self) -> DistributedContext:
        """The context itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Shut the process group down if a collective failed; leave it up otherwise."""
        if exc is not None and _is_distributed_failure(exc):
            shutdown()
            raise DistributedError(
                f"rank {self.rank} of {self.world_size} ({self.backend}): a collective failed "
                f"or did not complete within {self.timeout:g} s; a peer rank probably died or "
                f"hung (look at the other ranks' logs). Original error: {exc}"
            ) from exc
        shutdown()


def _is_distributed_failure(exc: BaseException) -> bool:
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    markers = ("Gloo", "NCCL", "Connection closed", "Connection reset", "timed out", "Timeout")
    return isinstance(exc, RuntimeError) and any(marker in text for marker in markers)


#: The process-group backends :func:`init_distributed` creates for a backend name: under
#: NCCL, CPU tensors (small metadata, the CPU side of a mixed program) go over gloo.
DEVICE_AWARE = {"nccl": "cpu:gloo,cuda:nccl", "gloo": "gloo"}


def backend_name(config: str) -> str:
    """``"nccl"`` for a backend configuration that sends CUDA tensors over NCCL, else ``"gloo"``."""
    return "nccl" if "nccl" in config else "gloo"


def default_backend() -> str:
    """``"nccl"`` when CUDA GPUs and NCCL are available, else ``"gloo"``."""
    if torch.cuda.is_available() and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def init_distributed(
    *,
    backend: str | None = None,
    timeout: float = 600.0,
    master_addr: str | None = None,
    master_port: int | None = None,
    env: Mapping[str, str] | None = None,
    init_method: str | None = None,
) -> DistributedContext:
    """Initialise ``torch.distributed`` for this process and return its context.

    Works under torchrun, under ``srun`` (Slurm variables) and as a plain
    single process (a one-rank group, so collective code runs unchanged). If
    the group is already initialised, returns its context.

    Args:
        backend: ``"nccl"``, ``"gloo"`` or ``None`` for :func:`default_backend`.
            ``"nccl"`` creates device-aware groups (``cpu:gloo,cuda:nccl``,
            :data:`DEVICE_AWARE`): CUDA tensors travel over NCCL, CPU tensors
            over gloo, so no collective fails for its tensor's device.
        timeout: Seconds a collective (and the rendezvous) may wait for the
            other ranks before failing.
        master_addr: Rendezvous host (see :func:`detect_launch`).
        master_port: Rendezvous port (see :func:`detect_launch`).
        env: Variables to read instead of ``os.environ``.
        init_method: Explicit rendezvous URL (e.g. ``file:///shared/rendezvous``);
            overrides the launcher's address and port.

    Returns:
        The :class:`DistributedContext`; the device is ``cuda:<local_rank>`` under
        NCCL, else the CPU.

    Examples:
        In one process without a launcher it is a world of one, over gloo:

        >>> with init_distributed() as ctx:
        ...     (ctx.source, ctx.world_size, ctx.backend)
        ('single', 1, 'gloo')
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    launch = detect_launch(env, master_addr=master_addr, master_port=master_port)
    backend = backend or default_backend()
    device = torch.device("cpu")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("backend 'nccl' needs CUDA GPUs, but torch sees none")
        device = torch.device("cuda", launch.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    if dist.is_initialized():
        return DistributedContext(
            launch.source,
            dist.get_rank(),
            dist.get_world_size(),
            launch.local_rank,
            backend_name(dist.get_backend()),
            device,
            timeout,
        )
    delta = datetime.timedelta(seconds=timeout)
    groups = DEVICE_AWARE.get(backend, backend)
    if launch.world_size == 1:
        store = dist.HashStore()
        dist.init_process_group(groups, store=store, rank=0, world_size=1, timeout=delta)
    elif init_method is not None:
        dist.init_process_group(
            groups,
            init_method=init_method,
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=delta,
        )
    elif launch.source == "torchrun":
        # env:// reuses the store that torchrun's agent already hosts
        os.environ.setdefault("MASTER_ADDR", launch.master_addr)
        os.environ.setdefault("MASTER_PORT", str(launch.master_port))
        dist.init_process_group(groups, init_method="env://", timeout=delta)
    else:
        dist.init_process_group(
            groups,
            init_method=f"tcp://{launch.master_addr}:{launch.master_port}",
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=delta,
        )
    if launch.world_size > 1:
        # gloo connects each pair while the group is built: a rank that finishes, runs
        # and destroys its group while a slower peer is still connecting breaks that
        # peer's init ("Connection closed by peer"). One small all-reduce (CPU, so gloo
        # also under the device-aware nccl groups) lets no rank leave before the mesh is up.
        dist.all_reduce(torch.zeros(1))
    logger.debug(
        "rank %d/%d initialised (%s, %s)", launch.rank, launch.world_size, backend, launch.source
    )
    return DistributedContext(
        launch.source, launch.rank, launch.world_size, launch.local_rank, backend, device, timeout
    )


def shutdown() -> None:
    """Destroy the process group if one is initialised (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_main_process() -> bool:
    """True on global rank 0, or when ``torch.distributed`` is not initialised."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


class PreemptionFlag:
    """Records SIGTERM/SIGUSR1 while installed; restores the previous handlers on exit.

    Flags nest: one installed while another is active starts with the outer
    one's signal (if it already came) and passes every signal it receives on
    to it, so that a driver around several training runs (``sciml demo``)
    knows when one of them stopped on a signal::

        with PreemptionFlag() as flag:
            for step in work:
                ...
                if flag.any_rank():  # collective: every rank calls it
                    save_checkpoint(...)
                    return EXIT_REQUEUE

    Handlers are installed only from the main thread (Python's rule);
    elsewhere, and with ``enabled=False``, the flag never rises.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self, enabled: bool = True) -> None:
        """A lowered flag; with ``enabled=False`` it never rises."""
        self.received: int | None = None
        self.enabled = enabled
        self._previous: dict[int, Any] = {}
        self._outer: PreemptionFlag | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if self._outer is not None:
            self._outer._handle(signum, frame)

    def __enter__(self) -> PreemptionFlag:
        """Install the handlers (main thread only), joining an active outer flag."""
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            outer = getattr(self._previous[signal.SIGUSR1], "__self__", None)
            if isinstance(outer, PreemptionFlag):
                self._outer, self.received = outer, outer.received
        return self

    def __exit__(self, *exc: object) -> None:
        """Restore the previous handlers."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous, self._outer = {}, None

    def request(self, signum: int = signal.SIGUSR1) -> None:
        """Raise the flag as receiving ``signum`` would (passed on to an outer flag too).

        A request is explicit, so it raises the flag even when handlers are not
        installed (``enabled=False``, another thread): the public way to make
        long work stop at a chosen point as on a preemption (tests, benchmarks).
        """
        self._handle(signum, None)

    def any_rank(self) -> bool:
        """True if this or any other rank received a signal (collective: call on every rank)."""
        flag = torch.tensor([int(self.received is not None)])
        return bool(all_reduce_cpu(flag, op=dist.ReduceOp.MAX).item())


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` torch threads (``None``: unchanged), then restore.

    Small tiles and models run faster on one thread, above all on a busy machine.

    Raises:
        ValueError: If ``count`` is not ``None`` or an integer >= 1.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"threads must be an integer >= 1 or None, got {count!r}")
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def rank_zero_only(fn: Callable[P, R]) -> Callable[P, R | None]:
    """Decorate ``fn`` so that it runs on rank 0 only (returns ``None`` elsewhere)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
        return fn(*args, **kwargs) if is_main_process() else None

    return wrapper


@rank_zero_only
def print0(*args: Any, **kwargs: Any) -> None:
    """``print`` on rank 0 only, flushed."""
    print(*args, **kwargs, flush=True)
