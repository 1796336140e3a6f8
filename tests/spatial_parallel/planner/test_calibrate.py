"""Calibration of this machine: what each figure times."""

import os
import resource
import time

import pytest
import torch
import torch.distributed as dist

from sciml.distributed import spawn
from sciml.spatial_parallel.layers.kernel import ConvGeometry, cpu_backend
from sciml.spatial_parallel.planner import calibrate as planner_calibrate
from sciml.spatial_parallel.planner.calibrate import (
    CHANNELS,
    EXCHANGE_SIZES,
    GAP_SHAPE,
    NATIVE_BATCH,
    SIZES,
    VENDOR_BATCH,
    _best_seconds,
    _blocking_seconds,
    _fit,
    _median_seconds,
    concurrency,
    conv_constants,
    memory_bandwidth,
)

PAGES_32MIB = 2**25 // resource.getpagesize()


def test_memory_bandwidth_times_the_kernel_not_page_faults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a fresh 32 MiB output per timed call is a new mapping whose every page faults
    # (six calls: six times the pages); input and output allocated once fault twice
    # (the cache evictor's buffer faults once, untimed: left out here)
    monkeypatch.setattr(planner_calibrate, "cache_evictor", lambda: lambda: None)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert memory_bandwidth() > 0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 3 * PAGES_32MIB


def test_concurrency_counts_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pinned to 3 of the machine's CPUs, 1-thread ranks compute 3 at once, 2-thread ranks 1."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert concurrency(1) == 3
    assert concurrency(2) == 1
    assert concurrency(4) == 1


def test_fit_recovers_latency_and_bandwidth_of_exchanges() -> None:
    """``latency + bytes / bandwidth`` timed at EXCHANGE_SIZES gives back both constants."""
    latency, bandwidth = 2.5e-4, 3e9
    seconds = [latency + n / bandwidth for n in EXCHANGE_SIZES]
    fitted = _fit([float(n) for n in EXCHANGE_SIZES], seconds)
    # float64 least squares on 4 points: relative error a few eps of the largest time's scale
    scale = max(seconds) / min(seconds)
    assert fitted[0] == pytest.approx(latency, rel=64 * scale * 2**-52)
    assert fitted[1] == pytest.approx(bandwidth, rel=64 * scale * 2**-52)


def test_the_halo_overhead_clock_leaves_out_waiting() -> None:
    # a split layer's overhead is its own CPU work: its waits are priced by latency and
    # bandwidth, and time other processes take from it is not the layer's
    assert _median_seconds(lambda: time.sleep(0.02), repeats=3, clock=time.thread_time) < 0.01
    assert _median_seconds(lambda: time.sleep(0.02), repeats=3) >= 0.02


def _waits_beside_a_slower_peer() -> tuple[float, float, float]:
    """Rank 0's blocking in an all-reduce after its layer while rank 1 computes a 27x larger one.

    Also the blocking of the same all-reduce lined up by a barrier, and what the
    larger layer's extra work takes on rank 0 while rank 1 waits (as rank 0 waits while
    rank 1 computes it: one rank computing, whatever else loads the machine; rank 1
    returns 0 for it).
    """
    n, c, d, h, w = GAP_SHAPE
    big = (n, c, 3 * d, 3 * h, 3 * w)
    conv = torch.nn.Conv3d(c, c, 3, padding=1)
    extra = 0.0
    if dist.get_rank() == 0:
        with torch.no_grad():
            extra = _best_seconds(lambda: conv(torch.zeros(big)), repeats=2) - _best_seconds(
                lambda: conv(torch.zeros(GAP_SHAPE)), repeats=2
            )
    dist.barrier()
    buf = torch.zeros(4)
    shape = GAP_SHAPE if dist.get_rank() == 0 else big
    after_compute = _blocking_seconds(lambda: dist.all_reduce(buf), calls=3, gap_shape=shape)
    lined_up = _median_seconds(lambda: dist.all_reduce(buf), repeats=3)
    return after_compute, lined_up, extra


def test_a_synchronisation_after_compute_waits_for_the_slower_peer() -> None:
    # what a step pays: the rank that finished its layer first blocks until its peer has
    # finished a larger one; a barrier before each call hides that wait
    (after_compute, lined_up, extra), _ = spawn(_waits_beside_a_slower_peer, 2)
    assert after_compute > extra / 2  # the peer is slowed by load at most as much as rank 0
    assert lined_up < after_compute


def test_best_seconds_leaves_out_what_runs_before_each_call() -> None:
    calls = []
    seconds = _best_seconds(
        lambda: None, repeats=3, before=lambda: (calls.append(1), time.sleep(0.02))
    )
    assert len(calls) == 3
    assert seconds < 0.02


def test_memory_bandwidth_starts_each_timed_call_from_cold_caches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a step's activations stream through the cache: timed hot, 32 MiB ran twice as fast here
    evictions = []
    monkeypatch.setattr(
        planner_calibrate, "cache_evictor", lambda: lambda: evictions.append(time.perf_counter())
    )
    assert memory_bandwidth() > 0
    assert len(evictions) == 5
    assert memory_bandwidth(cold=False) > 0  # a normalisation's passes over a cached block
    assert len(evictions) == 5


def _conv_geometry() -> ConvGeometry:
    return ConvGeometry((CHANNELS, CHANNELS, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN")
@pytest.mark.parametrize("size", SIZES)
def test_the_two_convolution_series_run_on_the_two_cpu_kernels(size: int) -> None:
    """PyTorch's own selector: batch 1 on its native kernel, batch 2 on oneDNN."""
    native = cpu_backend((NATIVE_BATCH, CHANNELS, *[size] * 3), torch.float32, _conv_geometry())
    vendor = cpu_backend((VENDOR_BATCH, CHANNELS, *[size] * 3), torch.float32, _conv_geometry())
    assert native == "Slow3d" and vendor == "Mkldnn"


def test_the_calibration_refuses_a_native_series_run_on_onednn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a PyTorch whose threshold moved would label oneDNN's rate as the native one
    monkeypatch.setattr(planner_calibrate, "cpu_backend", lambda *args: "Mkldnn")
    with pytest.raises(RuntimeError, match="not its native kernel"):
        conv_constants()


def test_the_calibration_says_which_measurement_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the measurements themselves are tested above: here only what each phase reports
    rates = ("conv_rate", "conv_bwd_rate", "native_conv_rate", "native_conv_bwd_rate")
    conv = dict.fromkeys((*rates, "op_overhead"), 1.0)
    net = dict.fromkeys(("latency", "bandwidth", "allreduce_latency", "sync_wait"), 1.0)
    monkeypatch.setattr(planner_calibrate, "conv_constants", lambda **kwargs: conv)
    monkeypatch.setattr(planner_calibrate, "memory_bandwidth", lambda **kwargs: 1.0)
    monkeypatch.setattr(planner_calibrate, "read_bandwidth", lambda: 1.0)
    monkeypatch.setattr("sciml.distributed.spawn", lambda fn, n: [net | {"halo_overhead": 0.0}])
    caplog.set_level("INFO", logger="sciml")
    planner_calibrate.calibrate()
    lines = [record.getMessage() for record in caplog.records]
    assert [line for line in lines if line.endswith(" ...")] == [
        "calibrating: convolution rates on cpu ...",
        "calibrating: memory bandwidth on cpu, cold and cached ...",
        "calibrating: halo exchange and all-reduce between 2 local processes ...",
        "calibrating: file read bandwidth ...",
    ]
    assert len([line for line in lines if ": done in " in line]) == 4
