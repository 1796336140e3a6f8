"""Start ``torch.distributed`` the same way under torchrun, Slurm or one process.

:func:`init_distributed` reads the launcher's variables, picks NCCL on GPUs
and gloo on CPU, binds each process to its local GPU and sets a timeout so
that a rank that dies makes the others fail with a clear message instead of
hanging::

    with init_distributed(timeout=300) as ctx:
        print0(f"{ctx.world_size} ranks on {ctx.backend}")
        train(...)

:func:`spawn` runs a function on a few local processes (tests, notebooks).
:class:`PreemptionFlag` records SIGTERM/SIGUSR1 (Slurm's preemption and
time-limit signals) so that long work can checkpoint and stop on every rank
together; :func:`all_reduce_cpu` reduces a small CPU tensor on any backend.
"""

from __future__ import annotations

import datetime
import functools
import logging
import multiprocessing as mp
import os
import pickle
import queue
import re
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "DistributedContext",
    "DistributedError",
    "LaunchInfo",
    "PreemptionFlag",
    "all_reduce_cpu",
    "check_replica",
    "default_backend",
    "detect_launch",
    "expand_nodelist",
    "init_distributed",
    "is_main_process",
    "print0",
    "rank_zero_only",
    "shutdown",
    "spawn",
    "world",
]

logger = logging.getLogger(__name__)

Source = Literal["torchrun", "slurm", "single"]
P = ParamSpec("P")
R = TypeVar("R")

#: Port used when neither the caller, MASTER_PORT nor a Slurm job id gives one.
DEFAULT_PORT = 29500


class DistributedError(RuntimeError):
    """A collective failed: a peer rank died, timed out or could not be reached."""


@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as the launcher described it."""

    source: Source
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


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
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm node list such as ``"gpu[01-03,7],login1"`` into host names.

    Raises:
        ValueError: If the list is empty or malformed.
    """
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[\]]+)(?:\[([^\]]+)\])?(?:,|$)", nodelist.strip()):
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"malformed range {part!r} in Slurm node list {nodelist!r}")
            for number in range(int(low), int(high or low) + 1):
                hosts.append(f"{prefix}{number:0{len(low)}d}")
    if not hosts:
        raise ValueError(f"empty or malformed Slurm node list {nodelist!r}")
    return hosts


def _int_env(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError as err:
        raise ValueError(f"environment variable {name}={env[name]!r} is not an integer") from err


def _tasks_on_first_node(tasks_per_node: str) -> int:
    """First count of ``SLURM_TASKS_PER_NODE`` (e.g. ``"4(x2),3"`` -> 4)."""
    return int(re.match(r"\d+", tasks_per_node).group())  # type: ignore[union-attr]


def detect_launch(
    env: Mapping[str, str] | None = None,
    *,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> LaunchInfo:
    """Read rank, world size and rendezvous address from the launcher's variables.

    torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) wins over Slurm
    (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``); with neither, or a
    Slurm job of one task, this is a single process. The master address is
    ``master_addr``, else ``MASTER_ADDR``, else the first host of
    ``SLURM_JOB_NODELIST``; the port is ``master_port``, else ``MASTER_PORT``,
    else derived from ``SLURM_JOB_ID`` so that jobs sharing a node differ.

    Args:
        env: Variables to read (default: ``os.environ``).
        master_addr: Explicit rendezvous host.
        master_port: Explicit rendezvous port.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        source: Source = "torchrun"
        rank, world = _int_env(env, "RANK"), _int_env(env, "WORLD_SIZE")
        local_rank = _int_env(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        local_world = _int_env(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
    elif "SLURM_PROCID" in env and _int_env(env, "SLURM_NTASKS") > 1:
        source = "slurm"
        rank, world = _int_env(env, "SLURM_PROCID"), _int_env(env, "SLURM_NTASKS")
        local_rank = _int_env(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        local_world = _tasks_on_first_node(per_node) if per_node else world
    else:
        source, rank, world, local_rank, local_world = "single", 0, 1, 0, 1
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world size {world} ({source} variables)")
    if not 0 <= local_rank < local_world:
        raise ValueError(
            f"local rank {local_rank} is outside the {local_world} local processes "
            f"({source} variables)"
        )

    addr = master_addr or env.get("MASTER_ADDR")
    if addr is None:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        addr = expand_nodelist(nodelist)[0] if source == "slurm" and nodelist else "127.0.0.1"
    if master_port is None:
        if "MASTER_PORT" in env:
            master_port = _int_env(env, "MASTER_PORT")
        elif "SLURM_JOB_ID" in env:
            master_port = 20000 + _int_env(env, "SLURM_JOB_ID") % 20000
        else:
            master_port = DEFAULT_PORT
    if not 0 < master_port < 65536:
        raise ValueError(f"rendezvous port {master_port} is not a TCP port (1-65535)")
    return LaunchInfo(source, rank, world, local_rank, local_world, addr, master_port)


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
            dist.get_backend(),
            device,
            timeout,
        )
    delta = datetime.timedelta(seconds=timeout)
    if launch.world_size == 1:
        store = dist.HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=delta)
    elif init_method is not None:
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=delta,
        )
    elif launch.source == "torchrun":
        # env:// reuses the store that torchrun's agent already hosts
        os.environ.setdefault("MASTER_ADDR", launch.master_addr)
        os.environ.setdefault("MASTER_PORT", str(launch.master_port))
        dist.init_process_group(backend, init_method="env://", timeout=delta)
    else:
        dist.init_process_group(
            backend,
            init_method=f"tcp://{launch.master_addr}:{launch.master_port}",
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=delta,
        )
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


def all_reduce_cpu(tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
    """All-reduce a small CPU tensor over every rank and return the result on the CPU.

    Works on any backend: under NCCL the values travel through this rank's
    GPU. Without a process group (or with one rank) ``tensor`` is returned
    unchanged.
    """
    if world()[1] == 1:
        return tensor
    moved = tensor.cuda() if dist.get_backend() == "nccl" else tensor.clone()
    dist.all_reduce(moved, op=dist.ReduceOp.SUM if op is None else op)
    return moved.cpu()


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
        self.received: int | None = None
        self.enabled = enabled
        self._previous: dict[int, Any] = {}
        self._outer: PreemptionFlag | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if self._outer is not None:
            self._outer._handle(signum, frame)

    def __enter__(self) -> PreemptionFlag:
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            outer = getattr(self._previous[signal.SIGUSR1], "__self__", None)
            if isinstance(outer, PreemptionFlag):
                self._outer, self.received = outer, outer.received
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous, self._outer = {}, None

    def any_rank(self) -> bool:
        """True if this or any other rank received a signal (collective: call on every rank)."""
        flag = torch.tensor([int(self.received is not None)])
        return bool(all_reduce_cpu(flag, dist.ReduceOp.MAX).item())


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


def _spawn_worker(
    rank: int,
    world_size: int,
    rendezvous: str,
    backend: str,
    timeout: float,
    threads: int,
    results: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    torch.set_num_threads(threads)
    # Slurm's time-limit warning goes to every process of the job: the parent
    # decides what to do (a training loop in fn installs its own handler)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        with init_distributed(backend=backend, timeout=timeout, init_method=rendezvous):
            value = fn(*args)
        # plain pickle: tensors travel by value, not as shared-memory handles that
        # die with this process
        results.put((rank, True, pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - reported to the parent with its traceback
        results.put((rank, False, traceback.format_exc()))


def spawn(
    fn: Callable[..., R],
    nprocs: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 300.0,
    threads: int = 1,
    start_method: str = "spawn",
) -> list[R]:
    """Run ``fn(*args)`` on ``nprocs`` local ranks and return their results by rank.

    Each process has ``torch.distributed`` initialised (``backend``, through a
    rendezvous file of this call's own) and ``threads`` intra-op threads. ``fn`` must be importable
    (defined at module level) and its return value picklable.

    Raises:
        ValueError: If ``nprocs`` < 1, ``timeout`` <= 0 or ``threads`` < 1.
        RuntimeError: If a rank raised (its traceback is included), exited
            without a result, or the whole run took longer than ``timeout``.
    """
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be an integer >= 1, got {nprocs!r}")
    if not timeout > 0 or threads < 1:
        raise ValueError(f"timeout must be > 0 and threads >= 1, got {timeout}, {threads}")
    ctx: Any = mp.get_context(start_method)
    results = ctx.Queue()
    # a rendezvous file of its own: no port to pick, so concurrent spawns cannot collide
    folder = tempfile.mkdtemp(prefix="sciml-spawn-")
    rendezvous = f"file://{folder}/rendezvous"
    procs = [
        ctx.Process(
            target=_spawn_worker,
            args=(rank, nprocs, rendezvous, backend, timeout, threads, results, fn, args),
            daemon=False,
        )
        for rank in range(nprocs)
    ]
    for proc in procs:
        proc.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(values) < nprocs:
            try:
                rank, ok, value = results.get(timeout=0.2)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                dead = [r for r in dead if r not in values]
                if dead:
                    raise RuntimeError(
                        f"rank {dead[0]} of {nprocs} exited with code "
                        f"{procs[dead[0]].exitcode} without a result"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"spawn({getattr(fn, '__name__', fn)}, {nprocs}) did not finish within "
                        f"{timeout:g} s; ranks without a result: "
                        f"{sorted(set(range(nprocs)) - set(values))}"
                    ) from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} of {nprocs} failed:\n{value}")
            values[rank] = pickle.loads(value)
    finally:
        for proc in procs:
            proc.join(timeout=5 if len(values) == nprocs else 0.5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        shutil.rmtree(folder, ignore_errors=True)
    return [values[rank] for rank in range(nprocs)]
