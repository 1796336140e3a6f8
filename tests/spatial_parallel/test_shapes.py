"""Global shapes without communication: the shape trace, marks and declarations."""

from __future__ import annotations

import torch
from torch import nn

from sciml.distributed import spawn
from sciml.spatial_parallel.shapes import mark_global, marked_global, meta_copy
from sciml.spatial_parallel.testing import error_bound
from tests.spatial_parallel.comm_workers import forward_collectives, untraceable


def test_forward_pass_has_no_metadata_collectives() -> None:
    """Only the data reductions remain (BatchNorm 2, GroupNorm 2, global pooling 1): none for
    the five window/upsampling layers or the dropouts when the input is a shard() block or
    its shape is declared; one all-reduce at the model entry otherwise (the fallback), and
    one for a layer called on its own."""
    data = ["all_reduce"] * 5
    for names in spawn(forward_collectives, 2, {"depth": 2}):
        assert names["marked"] == data
        assert names["declared"] == data
        assert names["fallback"] == ["all_reduce", *data]
        assert names["layer_alone"] == ["all_reduce"]


def test_meta_copy_shares_no_storage_and_keeps_structure() -> None:
    model = nn.Sequential(nn.Conv3d(2, 3, 3), nn.BatchNorm3d(3))
    meta = meta_copy(model)
    assert [n for n, _ in meta.named_parameters()] == [n for n, _ in model.named_parameters()]
    # 0-dim buffers (num_batches_tracked, read as a number) are copies, the rest meta
    tensors = [*meta.parameters(), *meta.buffers()]
    assert all(t.is_meta for t in tensors if t.dim())
    originals = {t.data_ptr() for t in model.buffers()}
    assert all(t.data_ptr() not in originals for t in tensors if not t.dim())
    assert all(not t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert meta(torch.empty(1, 2, 5, 5, 5, device="meta")).shape == (1, 3, 3, 3, 3)


def test_marks_are_per_tensor() -> None:
    x = mark_global(torch.zeros(1, 1, 2, 2, 2), (2, 1, 4, 2, 2))
    assert marked_global(x) == (2, 1, 4, 2, 2)
    assert marked_global(x.clone()) is None and marked_global(x + 1) is None


def test_a_model_the_trace_cannot_run_warns_and_still_matches() -> None:
    """Data-dependent control flow fails on the meta device: a warning names the fallback,
    each split layer's input block carries its global shape, and the result is right."""
    for result in spawn(untraceable, 2, {"depth": 2}):
        assert any("does not run on the meta device" in w for w in result["warnings"])
        # float32 on both sides, the same terms summed in another order
        assert result["error"] <= error_bound(0.0, dtype=torch.float32, size=1 * 2 * 6 * 4 * 4)
        # the model's own decision (its sum, global on a split block, and its all-reduce);
        # no shape collective: each layer's input block carries its global shape
        assert result["collectives"] == 2
