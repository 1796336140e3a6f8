"""The parallel layers on GPUs (skipped without CUDA).

One rank on an NCCL (device-aware) group against the plain model; two
processes sharing one GPU over gloo (the float64 exactness cases, CUDA
tensors, halo messages staged through the host); NCCL over every GPU when
there are two or more; and a training step on NCCL that sends no CPU tensor
through a collective and never synchronises with the host.
"""

from __future__ import annotations

import pytest
import torch

from sciml.distributed import spawn
from tests.spatial_parallel.cases import LAYERS, MODELS, cases
from tests.spatial_parallel.cuda_workers import run_cases_on_gpu, step_audit

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def _no_dropout(entries: list[dict]) -> list[dict]:
    """Dropout masks come from the CUDA generator on the GPU: not the CPU reference's."""
    return [e for e in entries if "Dropout" not in repr(e["spec"])]


def _check(nprocs: int, mesh: dict[str, int], entries: list[dict], backend: str) -> None:
    results = spawn(run_cases_on_gpu, nprocs, mesh, entries, backend=backend, timeout=600)
    failures = [
        f"{entries[n]['spec'][0]} {entries[n]['shape']} rank {r}: {c.failures()}"
        for r, rank in enumerate(results)
        for n, c in enumerate(rank)
        if not c.ok
    ]
    assert not failures, "\n".join(failures)


def test_one_rank_nccl_matches_the_plain_model() -> None:
    entries = cases(MODELS, steps=2, dtype=torch.float32)
    _check(1, {}, _no_dropout(entries), "nccl")


@pytest.mark.parametrize("overlap", [True, False])
def test_two_processes_share_one_gpu_over_gloo(overlap: bool) -> None:
    entries = cases(LAYERS, overlap=overlap, dtype=torch.float64)
    entries += cases(MODELS, steps=2, dtype=torch.float64)
    _check(2, {"depth": 2}, _no_dropout(entries), "gloo")


@pytest.mark.skipif(GPUS < 2, reason="needs two or more GPUs")
def test_nccl_over_every_gpu() -> None:
    entries = cases(LAYERS, dtype=torch.float64) + cases(MODELS, steps=2, dtype=torch.float64)
    _check(GPUS, {"depth": GPUS}, _no_dropout(entries), "nccl")


@pytest.mark.parametrize("overlap", [True, False])
def test_a_step_sends_no_cpu_tensor_and_never_syncs(overlap: bool) -> None:
    """After the first step (shape trace, halo plans), a step on NCCL passes only GPU
    tensors to collectives and runs under torch.cuda.set_sync_debug_mode("error")."""
    ranks = max(GPUS, 1)
    for result in spawn(step_audit, ranks, {"depth": ranks}, overlap, backend="nccl"):
        assert "sync" not in result, result["sync"]
        assert all(d.startswith("cuda") for d in result["devices"]), result["devices"]
