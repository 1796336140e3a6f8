"""Machine profiles of the planner: compute rates, memory and network constants.

A :class:`Profile` holds the handful of constants the step-time model needs.
:data:`PROFILES` has the NVIDIA H100 (SXM5, 80 GB) and A100 (SXM4, 80 GB) from
their public data sheets; ``sciml spatial plan --calibrate`` measures this
machine instead (:mod:`~sciml.spatial_parallel.planner.calibrate`) and caches
the result as JSON (:func:`save_profile`, :func:`load_profile`).

Public figures used (dense, no sparsity):

* H100 SXM5: TF32 tensor core 494.7 TFLOP/s (989 with sparsity), FP32 67
  TFLOP/s, HBM3 3.35 TB/s, NVLink 4 900 GB/s per GPU (both directions), 80 GB
  (NVIDIA H100 Tensor Core GPU data sheet, 2023). One 400 Gb/s NDR
  InfiniBand port per GPU (DGX H100 user guide: 8x ConnectX-7).
* A100 SXM4 80 GB: TF32 tensor core 156 TFLOP/s, FP32 19.5 TFLOP/s, HBM2e
  2,039 GB/s, NVLink 3 600 GB/s, 80 GB (NVIDIA A100 data sheet, 2021). One
  200 Gb/s HDR InfiniBand port per GPU (DGX A100 user guide).

PyTorch runs float32 convolutions on TF32 tensor cores by default
(``torch.backends.cudnn.allow_tf32``). The *achieved* fractions of those peaks
(:data:`CONV_EFFICIENCY`, :data:`BANDWIDTH_EFFICIENCY`), the per-kernel
overhead, the message latencies and the per-GPU read bandwidth are
assumptions, not data-sheet figures: they are named here and stored in the
profile so that a calibration on the device replaces them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from sciml.io_utils import atomic_write_text

#: Assumed fraction of the TF32 peak that cuDNN reaches on large 3D convolutions.
CONV_EFFICIENCY = 0.5
#: Assumed fraction of the peak memory bandwidth reached by elementwise kernels.
BANDWIDTH_EFFICIENCY = 0.8
GB = 1e9


@dataclass(frozen=True)
class Profile:
    """Constants of one machine (SI units: seconds, bytes, FLOP).

    Attributes:
        name: Short name (``"h100"``, ``"calibrated"``...).
        conv_rate: Achieved FLOP/s of a large convolution, forward, on the vendor
            library (cuDNN, oneDNN).
        conv_bwd_rate: Achieved FLOP/s of a convolution's backward (data and weight).
        native_conv_rate: Forward FLOP/s of PyTorch's own fallback kernel, which its
            CPU convolution runs on shapes it does not send to oneDNN (``vol2col``:
            :mod:`~sciml.spatial_parallel.layers.kernel`); the vendor rate on a GPU.
        native_conv_bwd_rate: Backward FLOP/s of that fallback kernel.
        mem_bw: Achieved bytes/s of elementwise kernels on data from memory
            (activations streaming through a step).
        cache_bw: Achieved bytes/s of elementwise kernels on data in cache (a
            normalisation's passes over a block it has just read or written).
        op_overhead: Seconds per kernel call (launch, dispatch), forward or backward.
        halo_overhead: Seconds a split layer adds per direction beyond its messages
            (planning, packing, autograd bookkeeping, synchronisation).
        memory: Device memory per rank, bytes (``None``: not known).
        reserved: Bytes per rank not available to tensors (runtime context, workspace).
        intra_latency: Seconds per point-to-point message inside a node (a
            calibration times them as halo exchanges send them: one each way at once).
        intra_bw: Bytes/s of a point-to-point message inside a node, each direction.
        inter_latency: Seconds per point-to-point message between nodes.
        inter_bw: Bytes/s between nodes, per rank, one direction.
        ranks_per_node: Ranks sharing the fast intra-node links.
        concurrency: Ranks of a node that compute at full speed at once (GPUs per
            node; on a CPU, cores per rank's threads): more ranks share the rate.
        allreduce_latency: Seconds per step of a ring all-reduce.
        sync_wait: Mean seconds a rank blocks at each synchronisation (a halo
            exchange, a blocking all-reduce) beyond the messages' own time: peers
            that reach it later, and the rank's wake-up once they did.
        read_bw: Bytes/s at which one rank reads its block of a sample.
        overlap: Whether layers compute their interior while halos travel
            (``parallelize``'s default: on CUDA only).
        source: Where the figures come from.
    """

    name: str
    conv_rate: float
    conv_bwd_rate: float
    native_conv_rate: float
    native_conv_bwd_rate: float
    mem_bw: float
    cache_bw: float
    op_overhead: float
    halo_overhead: float
    memory: float | None
    reserved: float
    intra_latency: float
    intra_bw: float
    inter_latency: float
    inter_bw: float
    ranks_per_node: int
    concurrency: int
    allreduce_latency: float
    sync_wait: float
    read_bw: float
    overlap: bool
    source: str

    def __post_init__(self) -> None:
        """Reject non-positive rates and negative times."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("name", "source", "overlap") or value is None:
                continue
            positive = f.name.endswith(("rate", "_bw")) or f.name in (
                "ranks_per_node",
                "concurrency",
            )
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not (math.isfinite(value) and (value > 0 if positive else value >= 0))
            ):
                kind = "> 0" if positive else ">= 0"
                raise ValueError(
                    f"Profile {self.name!r}: {f.name} must be a finite number {kind}, got {value!r}"
                )

    def p2p(self, nbytes: float, *, stride: int) -> float:
        """Seconds of one message of ``nbytes`` to a rank ``stride`` ranks away."""
        if nbytes <= 0:
            return 0.0
        if stride < self.ranks_per_node:
            return self.intra_latency + nbytes / self.intra_bw
        return self.inter_latency + nbytes / self.inter_bw

    def allreduce(self, nbytes: float, ranks: int) -> float:
        """Seconds of an all-reduce of ``nbytes`` over ``ranks`` ranks.

        The ring's ``2 (P - 1)`` steps each move ``nbytes / P``; for many ranks
        and small messages a (double binary) tree's ``2 log2 P`` steps of the
        whole message win, and NCCL picks the faster, so the model does too.
        Links between nodes bound the bandwidth once the ranks leave a node.
        """
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        bw = self.intra_bw if ranks <= self.ranks_per_node else self.inter_bw
        steps = 2 * (ranks - 1)
        ring = steps * (self.allreduce_latency + nbytes / ranks / bw)
        tree = 2 * math.ceil(math.log2(ranks)) * self.allreduce_latency + 2 * nbytes / bw
        return min(ring, tree)

    def contention(self, world: int) -> float:
        """Slow-down of compute when ``world`` ranks share a node's ``concurrency``."""
        return max(1.0, min(world, self.ranks_per_node) / self.concurrency)

    def computing(self, world: int) -> int:
        """Ranks of a node that compute at once when ``world`` ranks run."""
        return max(1, min(world, self.ranks_per_node, self.concurrency))


def _gpu(
    name: str,
    *,
    tf32: float,
    hbm: float,
    nvlink: float,
    nic: float,
    memory: float,
    source: str,
) -> Profile:
    return Profile(
        name=name,
        conv_rate=tf32 * CONV_EFFICIENCY,
        conv_bwd_rate=tf32 * CONV_EFFICIENCY,
        native_conv_rate=tf32 * CONV_EFFICIENCY,  # cuDNN whatever the shape
        native_conv_bwd_rate=tf32 * CONV_EFFICIENCY,
        mem_bw=hbm * BANDWIDTH_EFFICIENCY,
        cache_bw=hbm * BANDWIDTH_EFFICIENCY,  # blocks of GBs do not fit a GPU's L2
        op_overhead=10e-6,
        halo_overhead=50e-6,  # assumed: Python and NCCL launch per exchange
        memory=memory,
        reserved=1.5 * 2**30,  # CUDA context, cuDNN workspace, allocator slack (assumed)
        intra_latency=10e-6,
        intra_bw=nvlink / 2,  # the data sheet's figure counts both directions
        inter_latency=20e-6,
        inter_bw=nic,
        ranks_per_node=8,
        concurrency=8,
        allreduce_latency=10e-6,
        sync_wait=0.0,  # assumed: NCCL work queues on the stream; GPUs' skew is not priced
        read_bw=2 * GB,  # per GPU from a parallel file system or node-local NVMe (assumed)
        overlap=True,
        source=source,
    )


#: Built-in profiles, by name.
PROFILES: dict[str, Profile] = {
    "h100": _gpu(
        "h100",
        tf32=494.7e12,
        hbm=3.35e12,
        nvlink=900 * GB,
        nic=400e9 / 8,
        memory=80 * GB,
        source="NVIDIA H100 SXM5 data sheet (TF32 494.7 TFLOP/s dense, HBM3 3.35 TB/s, "
        "NVLink 900 GB/s, 80 GB); 400 Gb/s NDR InfiniBand per GPU (DGX H100); efficiencies, "
        "latencies and read bandwidth assumed (sciml.spatial_parallel.planner.profile)",
    ),
    "a100": _gpu(
        "a100",
        tf32=156e12,
        hbm=2.039e12,
        nvlink=600 * GB,
        nic=200e9 / 8,
        memory=80 * GB,
        source="NVIDIA A100 SXM4 80GB data sheet (TF32 156 TFLOP/s dense, HBM2e 2,039 GB/s, "
        "NVLink 600 GB/s, 80 GB); 200 Gb/s HDR InfiniBand per GPU (DGX A100); efficiencies, "
        "latencies and read bandwidth assumed (sciml.spatial_parallel.planner.profile)",
    ),
}


def default_cache() -> Path:
    """Where a calibration is cached: ``$SCIML_CACHE_DIR``, else ``$XDG_CACHE_HOME/sciml``.

    Falls back to ``~/.cache/sciml``; the file is ``planner_profile.json`` in it.
    """
    root = os.environ.get("SCIML_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "sciml")
    return Path(root) / "planner_profile.json"


def save_profile(profile: Profile, path: Path | str | None = None) -> Path:
    """Write ``profile`` as JSON (atomically) to ``path`` (default: :func:`default_cache`)."""
    target = Path(path) if path is not None else default_cache()
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, json.dumps(asdict(profile), indent=1))
    return target


def load_profile(path: Path | str) -> Profile:
    """A profile saved by :func:`save_profile`.

    Raises:
        ValueError: If the file is not a profile (missing, unknown or bad fields).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the planner profile {path}: {err}") from None
    names = {f.name for f in fields(Profile)}
    if not isinstance(data, dict) or set(data) != names:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"{path} is not a planner profile of this version: expected the fields "
            f"{sorted(names)}, got {got} (a calibration cache: run `sciml spatial plan "
            f"--calibrate` again)"
        )
    return Profile(**data)


def get_profile(name: str | Path) -> Profile:
    """A built-in profile by name (:data:`PROFILES`), ``"calibrated"`` (the cache) or a JSON path.

    Raises:
        ValueError: If the name is unknown, or the calibration was never run.
    """
    key = str(name)
    if key in PROFILES:
        return PROFILES[key]
    if key == "calibrated":
        cache = default_cache()
        if not cache.exists():
            raise ValueError(
                f"no calibrated profile at {cache}: run `sciml spatial plan --calibrate` first"
            )
        return load_profile(cache)
    if key.endswith(".json"):
        return load_profile(key)
    raise ValueError(
        f"unknown profile {key!r}: expected one of {sorted(PROFILES)}, 'calibrated' or a "
        f"path to a profile .json"
    )
