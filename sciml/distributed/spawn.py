"""Run a function on a few local processes with ``torch.distributed`` started (tests, notebooks).

:func:`spawn` gives each process its own rendezvous file, reports a rank's
traceback to the caller, and fails (instead of hanging) when a rank dies or
the whole run outlasts its timeout. :mod:`sciml.distributed` re-exports it.
Its ranks come from a fork server that has imported torch (:data:`PRELOAD`):
a rank starts without the seconds of CPU that importing torch takes in each fresh
interpreter. ``SCIML_SPAWN_PRELOAD`` (comma-separated module names) adds the heavy
third-party modules that rank functions import, such as ``monai.networks.nets``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["spawn"]

R = TypeVar("R")


#: Third-party modules a fork server imports once, so that the ranks it forks start
#: with them loaded (torch takes seconds of CPU per rank, and the compiler, which the
#: split blocks of ``sciml.spatial_parallel`` register with, about as long again); not
#: sciml's own, which a long session may edit between calls.
PRELOAD = ("numpy", "torch", "torch.distributed", "torch._dynamo")
#: Names more modules for the fork server to import (comma-separated).
PRELOAD_VARIABLE = "SCIML_SPAWN_PRELOAD"


def preloaded_modules() -> list[str]:
    """:data:`PRELOAD` and the modules :data:`PRELOAD_VARIABLE` names.

    The fork server starts at a process's first :func:`spawn` and keeps its
    modules: a later change of the variable does not reach it.
    """
    extra = os.environ.get(PRELOAD_VARIABLE, "").split(",")
    return [*PRELOAD, *(name.strip() for name in extra if name.strip())]


def default_start_method() -> str:
    """``"forkserver"`` where the platform has it (Linux, macOS), else ``"spawn"``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


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
    environ: dict[str, str],
) -> None:
    # multiprocessing gives a rank the caller's folder, sys.path and main module, but a
    # forked one the fork server's environment: take the caller's
    os.environ.clear()
    os.environ.update(environ)
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
    # imported in the worker: sciml.distributed re-exports spawn from this module
    from sciml.distributed import init_distributed

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
    start_method: str | None = None,
) -> list[R]:
    """Run ``fn(*args)`` on ``nprocs`` local ranks and return their results by rank.

    Each process has ``torch.distributed`` initialised (``backend``, through a
    rendezvous file of this call's own) and ``threads`` intra-op threads. ``fn`` must be importable
    (defined at module level) and its return value picklable.

    By default (:func:`default_start_method`) the ranks are forked from a fork
    server that imported :func:`preloaded_modules` once, with this process's environment,
    folder and ``sys.path``; ``start_method="spawn"`` starts fresh interpreters.

    Raises:
        ValueError: If ``nprocs`` < 1, ``timeout`` <= 0 or ``threads`` < 1.
        RuntimeError: If a rank raised (its traceback is included), exited
            without a result, or the whole run took longer than ``timeout``.
    """
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be an integer >= 1, got {nprocs!r}")
    if not timeout > 0 or threads < 1:
        raise ValueError(f"timeout must be > 0 and threads >= 1, got {timeout}, {threads}")
    method = start_method or default_start_method()
    ctx: Any = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(preloaded_modules())
    results = ctx.Queue()
    # a rendezvous file of its own: no port to pick, so concurrent spawns cannot collide
    folder = tempfile.mkdtemp(prefix="sciml-spawn-")
    rendezvous = f"file://{folder}/rendezvous"
    env = dict(os.environ)
    procs = [
        ctx.Process(
            target=_spawn_worker,
            args=(rank, nprocs, rendezvous, backend, timeout, threads, results, fn, args, env),
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
