"""The GPU check's timed workloads: CosmoFlow's conv stack and the training rates.

Sections ``conv_stack`` and ``training`` of ``benchmarks/gpu_check.py``, and the
training step the ``largest`` section runs. The models are the planner's
(:func:`sciml.spatial_parallel.planner.plan.build_model`: ``CosmoFlow(4, 4)`` and
``UNet(4, 2)``), so the planner section prices what these sections run. A
training step is an Adam step on the mean square of the output, with the
batch copied from pinned host memory (in-memory data).
"""

from __future__ import annotations

import copy
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import torch
from _gpu_report import Part, Row
from torch import nn

from sciml.distributed import init_distributed
from sciml.models import CosmoFlow, UNet
from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.planner.plan import build_model

#: MLPerf HPC v3.0 CosmoFlow, data parallel on H100: about 200 samples/s per GPU.
MLPERF_H100_SAMPLES_PER_S = 200.0
LAYOUTS = {"ncdhw": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}


Shape = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Sizes:
    """The workloads' shapes ``(N, C, D, H, W)`` and step counts.

    Attributes:
        stack: The conv stack's whole volume.
        stack_blocks: CosmoFlow's conv blocks in the stack (all five on the GPU).
        train: The training batch per model (the planner section prices the same).
        edges: Cube edges of the largest-volume runs (batch 1, 4 channels).
        warmup: Untimed steps first.
        steps: Timed steps.
        small_models: Narrow, shallow models of the same kinds (a dry run).
    """

    stack: Shape
    stack_blocks: int
    train: dict[str, Shape]
    edges: tuple[int, ...]
    warmup: int
    steps: int
    small_models: bool = False

    def model(self, name: str) -> nn.Module:
        """``"cosmoflow"`` or ``"unet"``: the planner's model (4 input channels), or a small one.

        The small ones (4 base filters, 2 levels) keep every layer kind of the
        full ones at the sizes a CPU runs in seconds.
        """
        if not self.small_models:
            return build_model(name, 4)
        if name == "cosmoflow":
            return CosmoFlow(4, 4, base_filters=4, n_conv=2)
        return UNet(4, 2, base_channels=4, depth=2)


def sizes(dry_run: bool) -> Sizes:
    """The GPU's sizes, or tiny ones (and small models) for a dry run on the CPU."""
    if dry_run:
        volume = (2, 4, 16, 16, 16)
        train = {"cosmoflow": volume, "unet": volume}
        return Sizes(volume, 2, train, (16, 24), warmup=1, steps=2, small_models=True)
    volume = (4, 4, 128, 128, 128)
    train = {"cosmoflow": volume, "unet": volume}
    return Sizes(volume, 5, train, (256, 384, 512, 640, 768), warmup=3, steps=10)


def sync(device: str) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def release(device: str) -> None:
    """Return the cached blocks of freed tensors to the device (the next run starts clean)."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


@contextmanager
def precision(device: str, dtype: str) -> Iterator[None]:
    """``torch.autocast`` to bfloat16 for ``"bf16"``, nothing for ``"fp32"``."""
    with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
        yield


def median_seconds(fn: Callable[[], object], *, device: str, warmup: int, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` calls, each synchronised."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _forward_backward(
    model: nn.Module, x: torch.Tensor, device: str, dtype: str
) -> Callable[[], None]:
    def step() -> None:
        with precision(device, dtype):
            out = model(x)
        out.float().sum().backward()

    return step


def conv_stack(part: Part) -> None:
    """CosmoFlow's conv blocks forward and backward: parallel path on one rank against plain.

    Per precision and memory layout: the plain stack on the whole volume, the
    same stack through :func:`~sciml.spatial_parallel.parallelize` on a
    one-rank mesh (its overhead), and the plain stack on a half-depth and a
    half-width block (what a block of a depth or width split costs).
    """
    cfg = sizes(part.dry_run)
    device = part.device
    init_distributed(backend="nccl" if device == "cuda" else "gloo")
    torch.manual_seed(0)
    features = cast(nn.Sequential, cfg.model("cosmoflow").get_submodule("features"))
    plain = features[: 3 * cfg.stack_blocks].to(device)  # conv, activation, pool per block
    mesh = SpatialMesh()
    parallel = parallelize(copy.deepcopy(plain), mesh, device=torch.device(device))
    n, c, d, h, w = cfg.stack
    shapes = {
        "whole": (n, c, d, h, w),
        "half_depth": (n, c, d // 2, h, w),
        "half_width": (n, c, d, h, w // 2),
    }
    timing = {"warmup": cfg.warmup, "repeats": cfg.steps}
    for dtype in ("fp32", "bf16"):
        for layout, memory_format in LAYOUTS.items():
            if not part.enough(5, f"the conv stack in {dtype}, {layout}"):
                return
            row: Row = {"precision": dtype, "layout": layout, "shape": list(shapes["whole"])}
            for name, model in (("plain", plain), ("parallel", parallel)):
                model.to(memory_format=memory_format)  # type: ignore[call-overload]
                blocks = shapes if name == "plain" else {"whole": shapes["whole"]}
                for block, shape in blocks.items():
                    x = torch.randn(shape, device=device).to(memory_format=memory_format)
                    x = shard(x, mesh) if name == "parallel" else x
                    try:
                        step = _forward_backward(model, x, device, dtype)
                        seconds = median_seconds(step, device=device, **timing)
                    except Exception as err:  # recorded: the other configurations still run
                        row[f"{name}_{block}_error"] = failure(err)
                        continue
                    row[f"{name}_{block}_ms"] = seconds * 1e3
            whole = row.get("plain_whole_ms")
            if whole is not None:
                for key in ("parallel_whole", "plain_half_depth", "plain_half_width"):
                    if f"{key}_ms" in row:
                        row[f"{key}_over_plain_whole"] = row[f"{key}_ms"] / whole
            part.add(row)
    note_failures(part)


def failure(err: BaseException) -> str:
    """A row's record of a failed run: out of memory said as such, else the error's first line."""
    kind = "out of memory" if isinstance(err, torch.cuda.OutOfMemoryError) else type(err).__name__
    lines = str(err).strip().splitlines()
    return f"{kind}: {lines[0] if lines else ''}"


def note_failures(part: Part) -> None:
    """Say in the section's notes how many of its rows hold a failed run."""
    failed = [r for r in part.rows if any(k.endswith("error") for k in r)]
    if failed:
        part.note(
            f"{len(failed)} of {len(part.rows)} rows hold a failed run: see their error columns"
        )


def train_rate(
    model: nn.Module,
    shape: tuple[int, ...],
    *,
    device: str,
    dtype: str,
    layout: str,
    warmup: int,
    steps: int,
    host_batches: int = 2,
) -> Row:
    """Samples/s and peak device memory of Adam steps on batches copied from host memory.

    ``host_batches`` batches of random volumes sit in (pinned, on CUDA) host
    memory and are copied to the device in turn, as an in-memory data set is.
    The peak is the CUDA allocator's over every step (parameters, gradients,
    optimizer state and the batches included); ``None`` on the CPU.
    """
    memory_format = LAYOUTS[layout]
    torch.manual_seed(0)
    model = model.to(device).to(memory_format=memory_format)  # type: ignore[call-overload]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
    # drawn on the device (a CPU draws a 2 GiB volume in seconds), kept in host memory
    batches = [torch.randn(shape, device=device).cpu() for _ in range(host_batches)]
    if device == "cuda":
        batches = [b.pin_memory() for b in batches]
        release(device)
        torch.cuda.reset_peak_memory_stats()

    def step(index: int) -> None:
        x = batches[index % host_batches].to(device, non_blocking=True)
        with precision(device, dtype):
            out = model(x.contiguous(memory_format=memory_format))
        optimizer.zero_grad(set_to_none=True)
        out.float().square().mean().backward()
        optimizer.step()

    for i in range(warmup):
        step(i)
    sync(device)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    sync(device)
    seconds = (time.perf_counter() - start) / steps
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {
        "step_s": seconds,
        "samples_per_s": shape[0] / seconds,
        "peak_bytes": peak,
        "peak_gib": None if peak is None else peak / 2**30,
    }


def training(part: Part) -> None:
    """CosmoFlow and the 3D U-Net at 4x128^3 on one device: samples/s and peak memory."""
    cfg = sizes(part.dry_run)
    runs = [
        ("cosmoflow", "fp32", "ncdhw"),
        ("cosmoflow", "bf16", "ncdhw"),
        ("cosmoflow", "bf16", "channels_last_3d"),
        ("unet", "fp32", "ncdhw"),
        ("unet", "bf16", "ncdhw"),
    ]
    for name, dtype, layout in runs:
        if not part.enough(10, f"{name} training in {dtype}, {layout}"):
            return
        shape = cfg.train[name]
        row: Row = {"model": name, "precision": dtype, "layout": layout, "shape": list(shape)}
        model = cfg.model(name)
        try:
            row |= train_rate(
                model,
                shape,
                device=part.device,
                dtype=dtype,
                layout=layout,
                warmup=cfg.warmup,
                steps=cfg.steps,
            )
        except Exception as err:  # recorded: the other runs still run
            row["error"] = failure(err)
        if name == "cosmoflow" and "samples_per_s" in row:
            row["over_mlperf_h100"] = row["samples_per_s"] / MLPERF_H100_SAMPLES_PER_S
        part.add(row)
        del model
        release(part.device)
    part.note(
        f"MLPerf HPC v3.0 CosmoFlow on H100: about {MLPERF_H100_SAMPLES_PER_S:.0f} "
        "samples/s per GPU (data parallel); over_mlperf_h100 is this run's rate over it"
    )
    note_failures(part)
