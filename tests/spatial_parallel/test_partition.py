"""Partition maths against PyTorch and NumPy (no process group needed)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from sciml.spatial_parallel.partition import (
    HaloError,
    TransposeWindow,
    Window,
    block_bounds,
    plan_dim,
    same_padding,
    window_plan,
)
from sciml.spatial_parallel.testing import error_bound, relative_error


@given(st.integers(0, 40), st.integers(1, 7))
def test_block_bounds_match_tensor_split(size: int, parts: int) -> None:
    pieces = torch.tensor_split(torch.arange(size), parts)
    expected = [(int(p[0]), int(p[-1]) + 1) if len(p) else None for p in pieces]
    for (lo, hi), piece, exp in zip(block_bounds(size, parts), pieces, expected, strict=True):
        assert hi - lo == len(piece)
        if exp is not None:
            assert (lo, hi) == exp


windows = st.builds(
    lambda k, s, d, p, ceil: Window(k, s, d, min(p, k // 2), min(p, k // 2), ceil),
    st.integers(1, 5),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 2),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(windows, st.integers(1, 20))
def test_window_output_size_matches_max_pool(window: Window, size: int) -> None:
    x = torch.zeros(1, 1, size)
    try:
        y = F.max_pool1d(
            x,
            window.kernel,
            window.stride,
            window.pad_lo,
            window.dilation,
            ceil_mode=window.ceil_mode,
        )
    except RuntimeError:
        with pytest.raises(ValueError):
            assert window.output_size(size) > 0
        return
    assert window.output_size(size) == y.shape[-1]


@settings(max_examples=60, deadline=None)
@given(windows, st.integers(1, 20), st.integers(1, 4))
def test_input_range_is_what_the_outputs_read(window: Window, size: int, parts: int) -> None:
    window = Window(window.kernel, window.stride, window.dilation, window.pad_lo, window.pad_hi)
    if size + 2 * window.pad_lo < window.reach:
        return
    out = window.output_size(size)
    for lo, hi in block_bounds(out, parts):
        if hi == lo:
            assert window.input_range(lo, hi) == (0, 0)
            continue
        read = [
            o * window.stride - window.pad_lo + j * window.dilation
            for o in range(lo, hi)
            for j in range(window.kernel)
        ]
        assert window.input_range(lo, hi) == (min(read), max(read) + 1)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(1, 12),
    st.integers(1, 3),
)
def test_transpose_window_matches_conv_transpose(
    kernel: int, stride: int, padding: int, extra: int, size: int, parts: int
) -> None:
    output_padding = min(extra, stride - 1)
    window = TransposeWindow(kernel, stride, 1, padding, output_padding)
    try:
        y = F.conv_transpose1d(
            torch.zeros(1, 1, size),
            torch.zeros(1, 1, kernel),
            None,
            stride,
            padding,
            output_padding,
        )
    except RuntimeError:
        return
    assert window.output_size(size) == y.shape[-1]
    for lo, hi in block_bounds(y.shape[-1], parts):
        a, b = window.input_range(lo, hi, size)
        feeding = {
            i for i in range(size) for j in range(kernel) if lo <= i * stride - padding + j < hi
        }
        assert feeding <= set(range(a, b))


MODES = [("replicate", "edge"), ("reflect", "reflect"), ("circular", "wrap")]


@pytest.mark.parametrize(("boundary", "numpy_mode"), MODES)
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_padding_pieces_match_numpy_pad(boundary: str, numpy_mode: str, parts: int) -> None:
    size, pad = 9, 2
    window = Window(3, 1, 1, pad, pad)
    plan = window_plan(window, size, parts, boundary=boundary, layer="conv", dim="depth")
    padded = np.pad(np.arange(size), pad, mode=numpy_mode)
    for rank in range(parts):
        a, b = plan.needs[rank]
        index = [i for piece in plan.pieces[rank] for i in piece.index]
        assert index == list(padded[a + pad : b + pad])
        lo, hi = plan.blocks[rank]
        for piece in plan.pieces[rank]:  # every piece comes from the rank that owns it
            src_lo, src_hi = plan.blocks[piece.source]
            assert all(src_lo <= i < src_hi for i in piece.index)


def test_fill_pieces_outside_the_volume() -> None:
    plan = window_plan(Window(3, 1, 1, 1, 1), 6, 2, layer="conv", dim="depth")
    assert [p.source for p in plan.pieces[0]] == [None, 0, 1]
    assert [p.size for p in plan.pieces[0]] == [1, 3, 1]
    assert [p.source for p in plan.pieces[1]] == [0, 1, None]


def test_block_smaller_than_halo_names_layer_and_sizes() -> None:
    with pytest.raises(HaloError, match=r"enc\.conv1.*depth.*\[1, 1, 1, 1\]"):
        window_plan(Window(5, 1, 1, 2, 2), 4, 4, layer="enc.conv1", dim="depth")
    # the same halo is fine when the neighbour's block is big enough
    window_plan(Window(5, 1, 1, 2, 2), 8, 4, layer="enc.conv1", dim="depth")


def test_circular_wraps_to_the_last_rank() -> None:
    plan = plan_dim(8, 2, 8, [(-1, 5), (3, 9)], boundary="circular")
    assert plan.pieces[0][0].source == 1 and plan.pieces[0][0].index == (7,)
    assert plan.pieces[1][-1].source == 0 and plan.pieces[1][-1].index == (0,)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(("kernel", "dilation"), [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_same_padding_matches_torch(kernel: int, dilation: int) -> None:
    lo, hi = same_padding(kernel, dilation)
    x = torch.randn(1, 1, 11, dtype=torch.float64)
    w = torch.randn(1, 1, kernel, dtype=torch.float64)
    expected = F.conv1d(x, w, padding="same", dilation=dilation)
    error = relative_error(F.conv1d(F.pad(x, (lo, hi)), w, dilation=dilation), expected)
    assert error <= error_bound(0.0, dtype=torch.float64, size=kernel)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: block_bounds(3.5, 2), "expected integers size >= 0 and parts >= 1"),
        (lambda: block_bounds(4, 0), "cannot split size 4 into 0 blocks"),
        (lambda: block_bounds(-1, 2), "cannot split size -1"),
        (lambda: Window(kernel=0), "Window kernel must be an integer >= 1, got 0"),
        (lambda: Window(kernel=3, stride=0), "Window stride must be an integer >= 1, got 0"),
        (lambda: Window(kernel=3, dilation=0), "Window dilation must be an integer >= 1"),
        (lambda: Window(kernel=3, pad_lo=-1), "Window pad_lo must be an integer >= 0, got -1"),
        (lambda: TransposeWindow(kernel=2, stride=0), "TransposeWindow stride must be"),
        (
            lambda: window_plan(Window(kernel=5), 3, 1, layer="conv1", dim="height"),
            "conv1: along height, input size 3",
        ),
        (lambda: plan_dim(4, 2, 4, [(0, 2)]), "1 needed ranges for 2 ranks"),
        (lambda: plan_dim(4, 2, 4, [(0, 2), (2, 4)], boundary="wrap"), "unknown boundary 'wrap'"),
    ],
)
def test_partition_rejects_bad_geometry(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
