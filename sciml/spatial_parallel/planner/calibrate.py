"""Measure this machine's planner constants (``sciml spatial plan --calibrate``).

Convolution rates on each kernel PyTorch's convolution picks, memory bandwidth, halo
exchange and all-reduce latency and bandwidth between two local processes with the wait a
synchronisation adds in a step, and file read bandwidth, on the CPU or the current CUDA
device. The result is a :class:`~sciml.spatial_parallel.planner.profile.Profile` named
``"calibrated"``; :func:`~sciml.spatial_parallel.planner.profile.save_profile` caches it.
What each measurement is and why: ``docs/planner_cost_model.md``.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from sciml.distributed.cores import usable_cores
from sciml.progress import phase
from sciml.spatial_parallel.layers.kernel import ONEDNN, ConvGeometry, cpu_backend
from sciml.spatial_parallel.planner.measure import cache_evictor
from sciml.spatial_parallel.planner.profile import Profile

SIZES = (12, 20, 28)
CHANNELS = 16
#: The timed convolutions' batches: PyTorch's CPU convolution sends a batch of 2 to
#: oneDNN whatever the size, a batch of 1 of the :data:`SIZES` to its native kernel.
VENDOR_BATCH, NATIVE_BATCH = 2, 1
SMALL = 2**10  # bytes of a message that is all latency
#: Bytes each way of the timed halo exchanges.
EXCHANGE_SIZES = (2**10, 2**14, 2**18, 2**22)
#: The input ``(N, C, D, H, W)`` of the ``Conv3d(C, C, 3)`` every rank computes
#: before each timed network call (about 2 ms on one core: a layer of a small model).
GAP_SHAPE = (1, 8, 16, 16, 16)
#: Timed calls per network figure (their mean is the figure).
NETWORK_CALLS = 300


def _best_seconds(
    fn: Callable[[], object], *, repeats: int = 5, before: Callable[[], object] | None = None
) -> float:
    """The fastest of ``repeats`` timed calls after a warm-up (the least disturbed by load).

    ``before`` runs untimed ahead of every call (to evict the caches, say).
    """
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _fit(work: list[float], seconds: list[float]) -> tuple[float, float]:
    """``(overhead, rate)`` of ``seconds = overhead + work / rate`` (least squares)."""
    slope, intercept = np.polyfit(np.asarray(work), np.asarray(seconds), 1)
    slope = max(float(slope), 1e-30)
    return max(float(intercept), 0.0), 1.0 / slope


def _conv_rates(
    conv: nn.Module, batch: int, *, device: str, sync: Callable[[], object]
) -> tuple[float, float]:
    """Forward and backward FLOP/s of ``conv`` at the cube :data:`SIZES`, batch ``batch``."""
    flops, fwd, bwd = [], [], []
    for size in SIZES:
        x = torch.randn(batch, CHANNELS, size, size, size, device=device, requires_grad=True)
        flops.append(2.0 * batch * CHANNELS * 27 * CHANNELS * size**3)

        def forward(x: torch.Tensor = x) -> None:
            with torch.no_grad():
                conv(x)
            sync()

        def both(x: torch.Tensor = x) -> None:
            conv(x).sum().backward()
            sync()

        fwd.append(_best_seconds(forward))
        bwd.append(max(_best_seconds(both) - fwd[-1], 1e-9))
    _, rate = _fit(flops, fwd)
    _, bwd_rate = _fit([2 * f for f in flops], bwd)
    return rate, bwd_rate


def _check_native(conv: nn.Conv3d) -> None:
    """Raise unless PyTorch's CPU convolution runs the batch-1 series on its native kernel."""
    geometry = ConvGeometry(
        tuple(conv.weight.shape),
        conv.stride,  # type: ignore[arg-type]
        conv.padding,  # type: ignore[arg-type]
        conv.dilation,  # type: ignore[arg-type]
        conv.groups,
    )
    for size in SIZES:
        shape = (NATIVE_BATCH, CHANNELS, size, size, size)
        kernel = cpu_backend(shape, torch.float32, geometry)
        if kernel in ONEDNN:
            raise RuntimeError(
                f"calibration: PyTorch {torch.__version__} runs the Conv3d on {shape} on "
                f"{kernel}, not its native kernel: its CPU kernel choice changed, and "
                f"planner_calibrate.SIZES no longer measure the native rate"
            )


def conv_constants(*, device: str = "cpu") -> dict[str, float]:
    """Forward and backward FLOP rates of a 3D convolution per kernel, and one tiny kernel's cost.

    On the CPU, PyTorch runs a batch-1 ``Conv3d(16, 16, 3)`` on the cubes of
    :data:`SIZES` (``16 x 28 x 28 = 12544``, at most 20480) on its native
    ``vol2col`` kernel, a batch of 2 on oneDNN (:data:`VENDOR_BATCH`): each is
    fitted for its own rates (``native_conv_rate``, ``conv_rate``). On CUDA both
    are cuDNN's, measured once.

    Raises:
        RuntimeError: If PyTorch no longer runs the batch-1 series natively.
    """
    torch.manual_seed(0)
    conv = nn.Conv3d(CHANNELS, CHANNELS, 3, padding=1).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cpu":
        _check_native(conv)
    rate, bwd_rate = _conv_rates(conv, VENDOR_BATCH, device=device, sync=sync)
    native = (rate, bwd_rate)
    if device == "cpu":
        native = _conv_rates(conv, NATIVE_BATCH, device=device, sync=sync)
    tiny = torch.ones(8, device=device, requires_grad=True)
    ones = torch.ones(8, device=device)

    def step() -> None:  # one kernel forward, one backward, through autograd
        torch.relu(tiny).backward(ones)
        sync()

    overhead = _best_seconds(step, repeats=50) / 2
    return {
        "conv_rate": rate,
        "conv_bwd_rate": bwd_rate,
        "native_conv_rate": native[0],
        "native_conv_bwd_rate": native[1],
        "op_overhead": overhead,
    }


def memory_bandwidth(*, device: str = "cpu", cold: bool = True) -> float:
    """Bytes/s of ``y = 2 x`` on 32 MiB (one read, one write) into a ``y`` allocated once.

    With ``cold``, on the CPU each timed call starts from cold caches
    (:func:`~sciml.spatial_parallel.planner.measure.cache_evictor`), as the
    local convolutions are timed: a step's activations stream through the
    cache, and timed hot the same copy runs at about twice its cold rate, faster
    than a split CosmoFlow step's ``LeakyReLU`` backward runs. A new 32 MiB output
    per call is a fresh mapping on the CPU (glibc maps blocks that large), whose page
    faults make the figure several times lower than the bandwidth elementwise layers
    reach on the tensors they reuse.
    Without ``cold``, the operands stay in cache between calls: the rate of a
    normalisation's later passes over its block.
    """
    x = torch.ones(2**23, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def double() -> None:
        torch.mul(x, 2.0, out=y)
        sync()

    evict = cache_evictor() if device == "cpu" and cold else None
    return 2 * x.numel() * 4 / _best_seconds(double, before=evict)


def read_bandwidth() -> float:
    """Bytes/s of reading a 64 MiB file just written (page cache: an upper bound)."""
    data = np.ones(2**24, dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="sciml-calibrate-") as folder:
        path = os.path.join(folder, "block.bin")
        data.tofile(path)
        seconds = _best_seconds(lambda: np.fromfile(path, dtype=np.float32), repeats=3)
    return data.nbytes / seconds


def _median_seconds(
    fn: Callable[[], object], *, repeats: int = 15, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The median of ``repeats`` calls, each started together on every rank (barrier).

    ``clock``: ``time.thread_time`` counts this thread's work only (not its
    waits, nor time other processes took from it).
    """
    fn()  # warm-up: connections, buffers
    times = []
    for _ in range(repeats):
        if dist.is_initialized():
            dist.barrier()
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def _blocking_seconds(
    fn: Callable[[], object],
    *,
    calls: int = NETWORK_CALLS,
    gap_shape: tuple[int, int, int, int, int] = GAP_SHAPE,
) -> float:
    """Mean seconds ``fn`` blocks when every rank calls it after a layer's compute.

    Before each call every rank runs a ``Conv3d`` on ``gap_shape``, as a step
    computes a layer between two synchronisations: equal work, not equal
    time, so a rank the machine slowed arrives late and its peers wait, as in
    a step. No barrier lines the calls up.
    """
    torch.manual_seed(0)
    channels = gap_shape[1]
    conv = nn.Conv3d(channels, channels, 3, padding=1)
    x = torch.randn(gap_shape)
    fn()  # warm-up: connections, buffers
    dist.barrier()
    total = 0.0
    with torch.no_grad():
        for _ in range(calls):
            conv(x)
            start = time.perf_counter()
            fn()
            total += time.perf_counter() - start
    return total / calls


def _exchange(nbytes: int) -> Callable[[], None]:
    """A halo exchange with the other rank: ``nbytes`` each way at once.

    As a split layer does: one ``batch_isend_irecv`` of a send and a receive
    to the other rank, then wait for both.
    """
    peer = 1 - dist.get_rank()
    send, recv = torch.zeros(nbytes // 4), torch.empty(nbytes // 4)

    def once() -> None:
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    return once


def _allreduce(nbytes: int) -> Callable[[], None]:
    buf = torch.zeros(nbytes // 4)
    return lambda: dist.all_reduce(buf)


def _halo_overhead() -> float:
    """CPU seconds a split layer adds per direction (planning, packing, autograd, messaging).

    A 3x3x3 convolution on a tiny volume split in two along depth, forward and
    backward, less the same local convolution, timed by this thread's CPU time
    (what remains includes the CPU side of its messages and of its parameters'
    all-reduce): the waits are priced on their own (latency and bandwidth), and
    a difference of wall-clock medians of such short calls swings by milliseconds
    between quiet calibrations, and more under load.
    """
    from sciml.spatial_parallel import SpatialMesh, parallelize, shard

    torch.manual_seed(0)
    conv = nn.Conv3d(1, 1, 3, padding=1)
    mesh = SpatialMesh(depth=2)
    model = parallelize(nn.Sequential(conv), mesh)
    x = shard(torch.randn(1, 1, 8, 4, 4), mesh).requires_grad_()
    split = _median_seconds(lambda: model(x).sum().backward(), clock=time.thread_time)
    local = nn.Conv3d(1, 1, 3, padding=(0, 1, 1))
    block = torch.randn(1, 1, 6, 4, 4, requires_grad=True)
    alone = _median_seconds(lambda: local(block).sum().backward(), clock=time.thread_time)
    return max((split - alone) / 2, 0.0)


def network_constants() -> dict[str, float]:
    """Network constants of two ranks (run on 2 ranks by ``spawn``; averaged over them).

    ``latency + nbytes / bandwidth`` is fitted (least squares) to the median
    blocking time of two-way exchanges of :data:`EXCHANGE_SIZES` (the halo
    sizes of small to large blocks); ``allreduce_latency`` from a small
    all-reduce's; ``sync_wait`` is what a small exchange and a small
    all-reduce block beyond that on average, each made after a layer's
    compute (:func:`_blocking_seconds`).
    """
    exchange, reduce = _exchange(SMALL), _allreduce(SMALL)
    figures = torch.tensor(
        [
            *(_median_seconds(_exchange(n)) for n in EXCHANGE_SIZES),
            _median_seconds(reduce),
            _blocking_seconds(exchange) + _blocking_seconds(reduce),
        ]
    )
    dist.all_reduce(figures)  # one profile for every rank
    *times, reduce_small, after_compute = (figures / dist.get_world_size()).tolist()
    latency, bandwidth = _fit([float(n) for n in EXCHANGE_SIZES], times)
    # two ranks: a ring all-reduce is 2 steps of nbytes / 2 each
    reduce_latency = max(reduce_small / 2 - SMALL / 2 / bandwidth, 0.0)
    return {
        "latency": latency,
        "bandwidth": bandwidth,
        "allreduce_latency": reduce_latency,
        "sync_wait": max(
            (after_compute - times[EXCHANGE_SIZES.index(SMALL)] - reduce_small) / 2, 0.0
        ),
        "halo_overhead": _halo_overhead(),
    }


def concurrency(threads: int) -> int:
    """Ranks of ``threads`` threads each that compute at once on the cores this process may use.

    :func:`sciml.distributed.cores.usable_cores`, not ``os.cpu_count()``: under Slurm,
    taskset or a container quota the machine's count over-states what ranks get.
    """
    return max(1, usable_cores() // threads)


#: Says which measurement runs (``INFO``, :mod:`sciml.progress`).
logger = logging.getLogger(__name__)


def calibrate(*, device: str = "cpu", threads: int = 1) -> Profile:
    """Measure this machine (tens of seconds) and return its profile.

    ``threads`` intra-op threads time the kernels: one, as ``spawn`` gives each rank.
    Each measurement says when it starts and how long it took (:data:`logger`).
    """
    from sciml.distributed import spawn, torch_threads

    with torch_threads(threads):
        with phase(logger, f"calibrating: convolution rates on {device}"):
            conv = conv_constants(device=device)
        with phase(logger, f"calibrating: memory bandwidth on {device}, cold and cached"):
            mem_bw = memory_bandwidth(device=device)
            cache_bw = memory_bandwidth(device=device, cold=False)
    with phase(logger, "calibrating: halo exchange and all-reduce between 2 local processes"):
        net = spawn(network_constants, 2)[0]
    with phase(logger, "calibrating: file read bandwidth"):
        read_bw = read_bandwidth()
    pages = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    memory = float(torch.cuda.get_device_properties(0).total_memory) if device == "cuda" else None
    return Profile(
        name="calibrated",
        conv_rate=conv["conv_rate"],
        conv_bwd_rate=conv["conv_bwd_rate"],
        native_conv_rate=conv["native_conv_rate"],
        native_conv_bwd_rate=conv["native_conv_bwd_rate"],
        mem_bw=mem_bw,
        cache_bw=cache_bw,
        op_overhead=conv["op_overhead"],
        halo_overhead=net["halo_overhead"],
        memory=memory if memory is not None else float(pages),
        reserved=0.0,
        intra_latency=net["latency"],
        intra_bw=net["bandwidth"],
        inter_latency=net["latency"],
        inter_bw=net["bandwidth"],
        ranks_per_node=2**20,  # local processes: one node
        concurrency=concurrency(threads),
        allreduce_latency=net["allreduce_latency"],
        sync_wait=net["sync_wait"],
        read_bw=read_bw,
        overlap=device == "cuda",
        source=f"measured by sciml spatial plan --calibrate on {device} "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {torch.__version__})",
    )
