"""Property-based tests: random shapes, kernels, strides, dilations and paddings.

Each hypothesis example is a batch of random layer configurations checked in
one spawned process group (spawning is the expensive part).
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sciml.distributed import spawn
from tests.spatial_parallel.workers import build, run_cases

small = st.integers(1, 3)


@st.composite
def conv_case(draw: st.DrawFn) -> tuple[tuple[str, dict[str, Any]], tuple[int, ...]]:
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(3))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(3))
    mode = draw(st.sampled_from(["zeros", "zeros", "circular", "replicate", "reflect"]))
    if draw(st.booleans()) and mode == "zeros":
        stride, padding = (1, 1, 1), "same"
    else:
        stride = tuple(draw(small) for _ in range(3))
        padding = tuple(draw(st.integers(0, 2)) for _ in range(3))
    groups = draw(st.sampled_from([1, 2]))
    spec = (
        "Conv3d",
        dict(
            in_channels=2 * groups,
            out_channels=2 * groups,
            kernel_size=kernel,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            padding_mode=mode,
            bias=draw(st.booleans()),
        ),
    )
    shape = (draw(st.integers(1, 2)), 2 * groups, *(draw(st.integers(5, 11)) for _ in range(3)))
    return spec, shape


@st.composite
def pool_case(draw: st.DrawFn) -> tuple[tuple[str, dict[str, Any]], tuple[int, ...]]:
    kind = draw(st.sampled_from(["MaxPool3d", "AvgPool3d"]))
    kernel = draw(st.integers(1, 4))
    options: dict[str, Any] = dict(
        kernel_size=kernel,
        stride=draw(small),
        padding=draw(st.integers(0, kernel // 2)),
        ceil_mode=draw(st.booleans()),
    )
    if kind == "MaxPool3d":
        options["dilation"] = draw(st.integers(1, 2))
    else:
        options["count_include_pad"] = draw(st.booleans())
    shape = (1, 2, *(draw(st.integers(4, 11)) for _ in range(3)))
    return (kind, options), shape


def valid(case: tuple[tuple[str, dict[str, Any]], tuple[int, ...]]) -> bool:
    """Whether the single-device layer accepts this input (and the blocks can supply halos)."""
    spec, shape = case
    try:
        y = build(spec)(torch.zeros(shape))
    except RuntimeError:
        return False
    return min(y.shape[2:]) >= 1


batches = st.lists(st.one_of(conv_case(), pool_case()).filter(valid), min_size=8, max_size=8)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches, st.sampled_from([{"depth": 2}, {"height": 2}, {"width": 2}]), st.booleans())
def test_random_layers_match_single_device(
    batch: list[Any], mesh: dict[str, int], overlap: bool
) -> None:
    entries = [dict(spec=spec, shape=shape, overlap=overlap) for spec, shape in batch]
    results = spawn(run_cases, 2, mesh, entries)
    for number, entry in enumerate(entries):
        for comparisons in results:
            assert comparisons[number].ok, f"{entry}: {comparisons[number].failures()}"
