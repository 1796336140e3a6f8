"""Clear errors, and checks that the exactness harness can fail."""

from __future__ import annotations

import torch

from sciml.distributed import spawn
from sciml.spatial_parallel.testing import error_bound
from tests.spatial_parallel.cases import LAYERS, MODELS, cases
from tests.spatial_parallel.workers import (
    corrupted_halo,
    expect_errors,
    norm_edge_inputs,
    option_errors,
    overlap_paths,
    public_api_errors,
    run_cases,
)


def test_errors_name_the_problem_on_four_ranks() -> None:
    messages = spawn(expect_errors, 4, {"depth": 4})[0]
    assert "5 ranks but the world size is 4" in messages["mesh_product"]
    assert "depth= must be a positive integer" in messages["mesh_negative"]
    assert "layer '1.0' (Conv2d) cannot be split" in messages["conv2d"]
    assert "mode='bilinear'" in messages["bilinear"]
    assert "fc (Linear): transformed dims [4]" in messages["linear_on_split"]
    assert "are split over ranks" in messages["linear_on_split"]
    assert "not its neighbour" in messages["halo"] and "[1, 1, 1, 1]" in messages["halo"]
    assert "expected a local (N, C, D, H, W) block" in messages["not_5d"]
    assert "shard inputs" in messages["bad_block"]


def test_uneven_blocks_on_four_ranks_along_depth() -> None:
    """P=4 along one axis: halos from both neighbours, uneven blocks of 2 and 3."""
    entries = cases(LAYERS[:12], dtype=torch.float64)
    entries = [dict(e, shape=(*e["shape"][:2], 10, *e["shape"][3:])) for e in entries]
    unet = [(MODELS[2][0], (1, 2, 16, 4, 4))]
    results = spawn(run_cases, 4, {"depth": 4}, entries + cases(unet, dtype=torch.float64))
    failures = [case.failures() for rank in results for case in rank if not case.ok]
    assert not failures


def test_harness_detects_missing_gradient_reduction() -> None:
    """Without the built-in reduction the parameter gradients must come out wrong."""
    entries = cases([LAYERS[0], LAYERS[-1]], dtype=torch.float64, sync=False)
    results = spawn(run_cases, 2, {"depth": 2}, entries)
    for case in range(len(entries)):
        comparison = results[0][case]
        assert comparison.worst("grad:") > 1e-3
        assert not comparison.ok
        assert comparison.errors["out0"] <= comparison.bounds["out0"]


def test_overlap_paths_are_the_ones_documented() -> None:
    """Depth splits assemble interior + shell; height/width splits add halo corrections;
    on CPU the default is the blocking exchange (a plain convolution node)."""
    depth = spawn(overlap_paths, 2, {"depth": 2})[0]
    width = spawn(overlap_paths, 2, {"width": 2})[0]
    assert depth["on"] == "_AssembleBackward" and width["on"] == "_AddIntoBackward"
    for nodes in (depth, width):
        assert nodes["default"] == nodes["off"] == "ConvolutionBackward0"


def test_harness_detects_a_wrong_halo() -> None:
    """One halo plane off by 1e-3 fails the derived bounds in float32 and float64; off by
    1e-9, float64 still sees it (float32 rounds it away)."""
    conv = [LAYERS[0], LAYERS[-1]]
    entries = cases(conv, dtype=torch.float32, overlap=False)
    entries += cases(conv, dtype=torch.float64, overlap=False)
    for scale, caught in ((1e-3, (torch.float32, torch.float64)), (1e-9, (torch.float64,))):
        results = spawn(corrupted_halo, 2, {"depth": 2}, entries, scale)
        for case, entry in enumerate(entries):
            comparison = results[1][case]  # rank 1's first plane is its neighbour's halo
            assert comparison.ok == (entry["dtype"] not in caught), (scale, entry)


def test_norm_state_survives_edge_inputs() -> None:
    """Empty global batch, eval mode and no_grad leave the running statistics as torch does;
    one value per channel is refused in training (as torch does) without touching state."""
    out = spawn(norm_edge_inputs, 2, {"depth": 2})[0]
    for momentum in ("momentum=0.1", "momentum=None"):
        # float64 statistics of 2 x 4^3 values per channel, summed in another order
        bound = error_bound(0.0, dtype=torch.float64, size=2 * 4**3)
        assert max(out[momentum].values()) <= bound, out[momentum]
    assert "expected more than 1 value per channel" in out["one_value"]
    assert out["one_value_state"] == 0


def test_refused_options_are_named() -> None:
    messages = spawn(option_errors, 2, {"depth": 2})[0]
    assert "return_indices=True" in messages["return_indices"]
    assert "padding=2 is more than half" in messages["max_padding"]
    assert "padding=2 is more than half" in messages["avg_padding"]
    assert "output_padding=(2, 2, 2)" in messages["output_padding"]
    assert "align_corners" in messages["align_corners"]
    assert "exactly one of size and scale_factor" in messages["no_size"]
    assert "mode='area'" in messages["area"]
    assert "return_indices=True" in messages["adaptive_max_indices"]
    assert "'0' (LPPool3d) cannot be split" in messages["lp_pool"]
    assert "start_dim=0" in messages["flatten_batch"]
    assert "(LazyConv3d) cannot be split" in messages["lazy"]
    assert "expected 4 channels" in messages["channels"]
    assert "torch.float64 on cpu but the layer's parameters are torch.float32" in messages["dtype"]


def test_public_functions_reject_bad_inputs() -> None:
    both = spawn(public_api_errors, 2, {"depth": 2})
    for messages in both:  # a bad block on one rank is an error on every rank, not a hang
        assert "TypeError: shard expects a torch.Tensor, got ndarray" in messages["shard_numpy"]
        assert "TypeError: shard expects a SpatialMesh" in messages["shard_no_mesh"]
        assert (
            "do not hold their block of a global tensor of shape (2, 2, 4, 4, 4)"
            in (messages["unshard_wrong_block"])
        )
        assert "1: '(2, 2, 1, 4, 4) instead of (2, 2, 2, 4, 4)'" in messages["unshard_wrong_block"]
        assert "tensors of different kinds" in messages["unshard_mixed"]
        assert (
            "(2, 2, 3, 4, 4) and target block (2, 1, 3, 4, 4) differ" in messages["mse_broadcast"]
        )
        assert "expects a scalar loss term, got shape (3,)" in messages["global_loss_vector"]
        assert "expects a torch.nn.Module, got str" in messages["parallelize_type"]
        assert "expects a SpatialMesh, got dict" in messages["parallelize_mesh"]
        assert "bucket_mb must be a finite number > 0, got 0" in messages["bucket"]
        assert "already made by parallelize()" in messages["twice"]
        assert "parameters are on meta but the process group" in messages["meta_params"]
        assert "sit on several devices" in messages["mixed_devices"]
        assert "input_shape must be the global (D, H, W)" in messages["input_shape"]
        assert "but block" in messages["declared_other"]
        assert "of a global size 9 split over 2 ranks" in messages["declared_other"]
        assert "read_block expects a SpatialMesh, got NoneType" in messages["read_block_mesh"]
        assert (
            "shape must be 5 positive sizes (N, C, D, H, W), got (1, 2, 4, 4)"
            in (messages["compare_shape"])
        )
        assert "dtype must be a floating dtype, got torch.int64" in messages["compare_dtype"]
