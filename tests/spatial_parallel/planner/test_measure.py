"""Measuring a step for the planner: times under the allocator training runs with, memory apart."""

import mmap
import os

import pytest
import torch
from torch import nn

from sciml.distributed import spawn
from sciml.distributed.cpu_allocator import mapped_bytes
from sciml.spatial_parallel.planner.measure import _thread_usage, step_memory, time_step

pytestmark = pytest.mark.xdist_group("planner_measure")

SHAPE = (1, 1, 8, 8, 8)


def mapped_bytes_of_a_tensor() -> int:
    """Bytes of a live 4 MiB tensor that glibc put in a mapping of its own.

    Under ``keep_freed_memory``, as training runs, it comes from the heap (0
    bytes); under ``mmap_large_allocations`` every such tensor is a fresh
    mapping whose pages all fault.
    """
    torch.ones(2**20)
    before = mapped_bytes()
    tensor = torch.ones(2**20)
    mapped = mapped_bytes()
    del tensor
    assert before is not None and mapped is not None, "these tests need glibc 2.33 or later"
    return mapped - before


def timed_then_mapped() -> tuple[dict[str, float], int]:
    """Rank function: time a tiny model's step, then see where a large tensor goes."""
    model = nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.ReLU())
    return time_step(model, {"depth": 1}, SHAPE, repeats=1), mapped_bytes_of_a_tensor()


def test_steps_are_timed_with_the_allocator_training_runs_with() -> None:
    # measuring memory routes every large tensor through a fresh mapping, whose page
    # faults slowed a CosmoFlow step by half on one rank and doubled it on two: the
    # timing must not run under it
    times, mapped = spawn(timed_then_mapped, 1)[0]
    assert 0 < times["seconds"] <= times["median_seconds"]
    assert times["cpu_seconds"] > 0
    # ru_stime is the kernel's tick-sampled share of the thread's run time, read a moment
    # after thread_time: within one clock tick of the CPU time, not below it
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0 <= times["system_seconds"] <= times["cpu_seconds"] + tick
    assert times["page_faults"] >= 0
    assert mapped == 0


def test_thread_usage_counts_the_page_faults_of_fresh_memory() -> None:
    # a step whose allocator gave memory back faults it in again: the validation
    # reports those faults and their kernel time beside the step's CPU time
    pages = 2048
    size = pages * mmap.PAGESIZE
    before = _thread_usage()
    buffer = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        buffer[offset] = 1  # first touch of each page
    after = _thread_usage()
    buffer.close()
    assert after[1] - before[1] >= pages
    assert after[0] >= before[0]


def test_step_memory_counts_what_a_step_allocates() -> None:
    # one 3x3x3 convolution keeps its input (the model input, held anyway) and its
    # output for ReLU's backward: at least one output block of float32 over the step
    model = nn.Sequential(nn.Conv3d(1, 64, 3, padding=1), nn.ReLU())
    peak = spawn(step_memory, 1, model, {"depth": 1}, (1, 1, 16, 16, 16))[0]
    output = 64 * 16**3 * 4
    assert output <= peak < 8 * output
