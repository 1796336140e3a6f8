"""Every parallel layer and model against the single-device op, on 2 and 4 gloo processes.

Each test spawns one process group and checks many configurations in it:
outputs, unsharded outputs, input gradients, parameter gradients (after the
built-in reduction) and buffers (BatchNorm running statistics), each against
the float64 single-device reference within the bound that
:func:`sciml.spatial_parallel.testing.error_bound` derives from the dtype's
eps, the problem size and (float32) the single-device float32 error.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sciml.distributed import spawn
from tests.spatial_parallel.cases import LAYERS, MODELS, cases
from tests.spatial_parallel.workers import run_cases


def check(mesh: dict[str, int], entries: list[dict[str, Any]]) -> None:
    """Spawn the mesh, run every case and fail with every quantity above its derived bound."""
    nprocs = 1
    for size in mesh.values():
        nprocs *= size
    results = spawn(run_cases, nprocs, mesh, entries, timeout=300)
    failures = []
    for number, entry in enumerate(entries):
        for rank, comparisons in enumerate(results):
            bad = comparisons[number].failures()
            if bad:
                failures.append(f"{entry['spec'][0]} {entry['shape']} rank {rank}: {bad}")
    assert not failures, f"mesh {mesh}:\n" + "\n".join(failures)


F64 = dict(dtype=torch.float64)
F32 = dict(dtype=torch.float32)


@pytest.mark.parametrize("mesh", [dict(depth=2), dict(width=2)], ids=["1x2x1", "1x1x2"])
def test_layers_two_ranks_float64(mesh: dict[str, int]) -> None:
    entries = cases(LAYERS, **F64) + cases(LAYERS[:8], overlap=False, **F64)
    check(mesh, entries + cases(MODELS, steps=2, **F64))


def test_layers_two_ranks_float32_height() -> None:
    check(dict(height=2), cases(LAYERS, **F32) + cases(MODELS, **F32))


def test_layers_and_models_2x2() -> None:
    check(dict(depth=2, height=2), cases(LAYERS, **F64) + cases(MODELS, steps=2, **F64))


def test_hybrid_data_parallel() -> None:
    """data=2 with width=2: the batch is split too (odd batch sizes leave one replica short)."""
    check(dict(data=2, width=2), cases(LAYERS, **F64) + cases(MODELS, steps=2, **F64))


def test_data_parallel_only() -> None:
    check(dict(data=2), cases(MODELS, steps=2, **F64))


def test_eval_mode_uses_running_statistics() -> None:
    """Eval mode after training steps: BatchNorm reads the (global) running statistics."""
    entries = cases(MODELS[:1] + MODELS[2:3], steps=2, evaluate=True, dtype=torch.float64)
    check(dict(data=2, depth=2), entries)


def test_overlap_halo_between_a_tiny_neighbour_and_the_global_edge() -> None:
    """Height 2 or 3 over 2 ranks, kernel 5: a halo reaches through the neighbour's whole
    block into the padding beyond the global edge. The overlapped convolution (zero
    padding, then additive halo corrections) used to leave that neighbour out."""
    spec = ("Conv3d", dict(in_channels=2, out_channels=3, kernel_size=5, padding=2))
    entries = [
        dict(spec=spec, shape=(1, 2, 3, height, 4), overlap=overlap, **F64)
        for height in (2, 3)
        for overlap in (True, False)
    ]
    check(dict(height=2), entries)
