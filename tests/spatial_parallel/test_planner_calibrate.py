"""Calibration of this machine: what each figure times."""

import resource

from sciml.spatial_parallel.planner_calibrate import memory_bandwidth

PAGES_32MIB = 2**25 // resource.getpagesize()


def test_memory_bandwidth_times_the_kernel_not_page_faults() -> None:
    # a fresh 32 MiB output per timed call is a new mapping whose every page faults
    # (six calls: six times the pages); input and output allocated once fault twice
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert memory_bandwidth() > 0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 3 * PAGES_32MIB
