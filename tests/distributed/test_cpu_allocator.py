"""The CPU allocator: freed memory kept for the next step, or returned so RSS follows live memory.

Each policy changes its whole process: every case runs in a rank of its own.
"""

import mmap
import resource
from pathlib import Path

import pytest
import torch
from torch import nn

from sciml.distributed import cpu_allocator, spawn
from sciml.distributed.cpu_allocator import keep_freed_memory, mapped_bytes, mmap_large_allocations
from sciml.training import TrainConfig, fit
from tests.scripts.train_job import make_problem, mse

#: Batch-1 volume: PyTorch unfolds each 3x3x3 convolution into a ``vol2col`` matrix.
SHAPE = (1, 2, 32, 32, 32)
#: Pages of the second convolution's matrix (16 x 27 rows, 32^3 columns, float32):
#: 54 MiB, above the largest block glibc ever serves from its heap by default (32
#: MiB), so by default every step maps it afresh and faults all its pages in.
COLUMN_PAGES = 16 * 27 * 32**3 * 4 // mmap.PAGESIZE


def _step_faults(steps: int = 6) -> list[int]:
    """Minor page faults of each of ``steps`` Adam steps of three convolutions."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv3d(2, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv3d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv3d(16, 1, 3, padding=1),
    )
    x = torch.randn(SHAPE)
    optimizer = torch.optim.Adam(model.parameters())
    faults = []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        optimizer.zero_grad()
        model(x).square().sum().backward()
        optimizer.step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return faults


def _faults_under(policy: str) -> list[int]:
    if policy == "keep":
        assert keep_freed_memory()
    return _step_faults()


def _faults_after_fit(run_dir: str) -> list[int]:
    model, train, _ = make_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    config = TrainConfig(epochs=1, batch_size=5, progress=False, tensorboard=False)
    fit(model, optimizer, train, mse, run_dir=run_dir, config=config)
    return _step_faults()


def _mapped_after_keep_then_mmap() -> tuple[int, int]:
    """Mapped bytes of a live 4 MiB tensor under keep, then under mmap_large_allocations."""
    sizes = []
    for policy in (keep_freed_memory, mmap_large_allocations):
        assert policy()
        before = mapped_bytes()
        tensor = torch.ones(2**20)
        after = mapped_bytes()
        assert before is not None and after is not None, "these tests need glibc 2.33 or later"
        sizes.append(after - before)
        del tensor
    return sizes[0], sizes[1]


@pytest.mark.skipif(cpu_allocator._glibc() is None, reason="the policies are glibc's")
def test_kept_memory_is_reused_without_faulting_its_pages_in_again() -> None:
    # by default the unfolded matrices go back to the kernel at every step and all
    # their pages fault again; kept, once the heap has grown to a step's needs (two
    # steps here) the steps land on pages the process holds: the heap grows again
    # only where a freed block lies a few bytes short of an aligned request, which
    # depends on where ASLR puts it (one to three of the four later steps, one
    # matrix each), so the four later steps together fault less than one default step
    default, kept = (spawn(_faults_under, 1, policy)[0] for policy in ("default", "keep"))
    assert min(default) >= COLUMN_PAGES
    assert sum(kept[2:]) < min(default)


@pytest.mark.skipif(cpu_allocator._glibc() is None, reason="the policies are glibc's")
def test_fit_on_the_cpu_keeps_freed_memory(tmp_path: Path) -> None:
    # after fit the process keeps what it frees: the four later steps together fault
    # fewer pages than one step under the default policy (as kept by hand, above)
    faults = spawn(_faults_after_fit, 1, str(tmp_path / "run"))[0]
    default = spawn(_faults_under, 1, "default")[0]
    assert sum(faults[2:]) < min(default)


@pytest.mark.skipif(cpu_allocator._glibc() is None, reason="the policies are glibc's")
def test_mmap_large_allocations_maps_again_what_keep_served_from_the_heap() -> None:
    kept, mapped = spawn(_mapped_after_keep_then_mmap, 1)[0]
    assert kept == 0
    assert mapped >= 2**22


def test_without_glibc_the_policies_say_they_did_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_allocator, "_glibc", lambda: None)
    assert keep_freed_memory() is False
    assert mmap_large_allocations() is False
    assert mapped_bytes() is None
