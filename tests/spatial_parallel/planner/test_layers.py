"""Per-shape calibration of local convolutions: measured in fresh processes."""

import time
from dataclasses import replace
from pathlib import Path

import pytest
from torch import nn
from torch.profiler import ProfilerActivity, profile

from sciml.distributed import torch_threads
from sciml.spatial_parallel.planner.graph import trace
from sciml.spatial_parallel.planner.layers import LocalConv, _run, _tensors, conv_of, measure_convs
from sciml.spatial_parallel.planner.measure import DEFAULT_CACHE, cache_bytes, clock
from tests.spatial_parallel.planner.test_measure import mapped_bytes_of_a_tensor

pytestmark = pytest.mark.xdist_group("planner_measure")
#: A 3^3 convolution of a small block, padded to keep its size.
SMALL_CONV = dict(
    kind="Conv3d",
    in_shape=(1, 2, 6, 6, 6),
    out_channels=2,
    kernel=(3, 3, 3),
    stride=(1, 1, 1),
    dilation=(1, 1, 1),
    padding=(1, 1, 1),
    groups=1,
    first=False,
)


def test_measuring_convolutions_leaves_this_process_allocator_alone() -> None:
    # the scratch measurement needs every large allocation in a mapping of its own;
    # switched on in the caller it made every later tensor page-fault (and the
    # validation's steps slower than training)
    conv = LocalConv(**SMALL_CONV)
    # a max pooling is measured too (its CPU kernel is far slower than a pass over memory);
    # its int64 indices are kept for backward, counted as activations, not as scratch
    pool = replace(
        conv,
        kind="MaxPool3d",
        in_shape=(1, 8, 32, 32, 32),
        out_channels=8,
        kernel=(2, 2, 2),
        stride=(2, 2, 2),
        padding=(0, 0, 0),
    )
    # a convolution two ranks run at once is timed in two processes together (they
    # share memory bandwidth, caches and page faults), under a key of its own
    pair = replace(conv, ranks=2)
    mapped_before = mapped_bytes_of_a_tensor()  # 0 in a fresh process; earlier tests may differ
    costs = measure_convs([conv, conv, pool, pair], repeats=1)
    assert pair.key != conv.key
    for cost in (costs[conv.key], costs[pool.key], costs[pair.key]):
        assert cost.forward_s > 0 and cost.backward_s > 0
        assert cost.forward_bytes >= 0 and cost.backward_bytes >= 0
    indices = 8 * 16**3 * 8
    assert costs[pool.key].forward_bytes < indices / 2
    assert mapped_bytes_of_a_tensor() == mapped_before


def test_cache_bytes_is_the_largest_cache_sysfs_lists(tmp_path: Path) -> None:
    for index, size in enumerate(("32K", "1024K", "32768K", "2M")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert cache_bytes(root=tmp_path) == 32768 * 1024
    assert cache_bytes(root=tmp_path / "missing") == DEFAULT_CACHE


def test_one_thread_convolutions_are_timed_by_cpu_time() -> None:
    """Time off the CPU (another process running, here a sleep) is not the convolution's."""
    with torch_threads(1):
        timer = clock()
        start = timer()
        time.sleep(0.05)
        assert timer() - start < 0.01
    with torch_threads(2):
        assert clock() is time.perf_counter  # other threads' work: only wall time sees it


@pytest.mark.parametrize(("field", "value"), [("kind", "Linear"), ("ranks", 0), ("ranks", True)])
def test_a_local_convolution_it_cannot_time_is_refused(field: str, value: object) -> None:
    # an unknown kind ran as a transposed convolution, whatever it was
    with pytest.raises(ValueError, match=f"LocalConv {field} must be"):
        LocalConv(**{**SMALL_CONV, field: value})  # type: ignore[arg-type]


def test_a_local_convolution_with_a_layout_not_of_three_axes_is_refused() -> None:
    with pytest.raises(ValueError, match="LocalConv layout must order the spatial axes"):
        LocalConv(**{**SMALL_CONV, "layout": (0, 1, 1)})  # type: ignore[arg-type]


def test_the_planner_times_a_split_convolution_on_the_kernel_the_layer_gets() -> None:
    """Half of a 48^3 x 16 volume along depth: native in its own layout, oneDNN as split.

    The timed call runs oneDNN (checked by the aten op, not by time); unsplit, the
    layout stays.
    """
    layer = trace(nn.Sequential(nn.Conv3d(16, 16, 3, padding=1)), (1, 16, 48, 48, 48)).layers[0]
    split = conv_of(layer, (1, 2, 1, 1), first=False)
    whole = conv_of(layer, (1, 1, 1, 1), first=False)
    assert split is not None and whole is not None
    assert split.in_shape == (1, 16, 26, 48, 48)
    assert replace(split, layout=(0, 1, 2)).native
    assert split.layout != (0, 1, 2) and not split.native
    assert whole.layout == (0, 1, 2) and not whole.native
    x, weight, grad = _tensors(split)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _run(split, x, weight).backward(grad)
    ops = {event.name for event in prof.events()}
    assert "aten::mkldnn_convolution" in ops and "aten::slow_conv3d_forward" not in ops
