"""Clear errors, and checks that the exactness harness can fail."""

from __future__ import annotations

import torch

from sciml.distributed import spawn
from tests.spatial_parallel.cases import LAYERS, MODELS, cases
from tests.spatial_parallel.workers import expect_errors, overlap_paths, run_cases


def test_errors_name_the_problem_on_four_ranks() -> None:
    messages = spawn(expect_errors, 4, {"depth": 4})[0]
    assert "5 ranks but the world size is 4" in messages["mesh_product"]
    assert "depth= must be a positive integer" in messages["mesh_negative"]
    assert "layer '1.0' (Conv2d) cannot be split" in messages["conv2d"]
    assert "output_size=1" in messages["adaptive"]
    assert "mode='bilinear'" in messages["bilinear"]
    assert "layer '1' (Linear) received a split" in messages["linear_on_split"]
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
