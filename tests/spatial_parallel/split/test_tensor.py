"""What a model's forward code sees of a split block, and what leaves the parallel model."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sciml.distributed import spawn
from tests.spatial_parallel.functional_workers import mechanism_facts

SHAPE = (3, 2, 7, 6, 5)


@pytest.fixture(scope="module")
def facts() -> list[dict[str, Any]]:
    """Every rank's observations on a 2x2 (depth, height) mesh."""
    return spawn(mechanism_facts, 4, dict(depth=2, height=2), SHAPE, timeout=300)


def test_shape_queries_answer_the_global_extent(facts: list[dict[str, Any]]) -> None:
    for seen in facts:
        assert seen["shape"] == seen["size"] == SHAPE
        assert seen["size2"] == 7
        assert seen["numel"] == torch.Size(SHAPE).numel()
        assert seen["len"] == 3 and seen["dim"] == 5
        assert "global shape (3, 2, 7, 6, 5)" in seen["repr"]


def test_new_tensor_of_the_global_shape_is_a_block(facts: list[dict[str, Any]]) -> None:
    for seen in facts:
        assert seen["new_zeros"] == (SHAPE, "SplitTensor")


def test_a_pad_of_odd_length_is_an_error_as_on_one_tensor(facts: list[dict[str, Any]]) -> None:
    for seen in facts:
        assert "padding length must be even" in seen["odd_pad"], seen["odd_pad"]


def test_in_place_op_writes_the_block_as_on_one_tensor(facts: list[dict[str, Any]]) -> None:
    """No copy of the block in the graph (a view's CopySlices): the op writes the block itself."""
    for seen in facts:
        assert "ReluBackward0" in seen["in_place_graph"], seen["in_place_graph"]
        assert not {"CopySlices", "AsStridedBackward0"} & seen["in_place_graph"]
        assert "leaf Variable that requires grad" in seen["in_place_leaf"], seen["in_place_leaf"]


def test_model_output_is_a_plain_tensor(facts: list[dict[str, Any]]) -> None:
    assert {seen["output_type"] for seen in facts} == {"Tensor"}
    blocks = {seen["block"][2:] for seen in facts}
    assert blocks == {(4, 3, 5), (3, 3, 5)}


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("broadcast", ["Tensor.add", "along split dim 2, whose global size is"]),
        ("mixed_layouts", ["different global shapes", "(3, 2, 6, 6, 5)"]),
        ("partial_reduction", ["Tensor.sum", "but not over [3]", "pass keepdim=True"]),
        ("in_place_widening", ["Tensor.add_", "cannot widen"]),
        ("item", ["Tensor.item"]),
    ],
)
def test_refusals_name_op_dims_and_line(
    facts: list[dict[str, Any]], case: str, words: list[str]
) -> None:
    for seen in facts:
        message = seen[case]
        for word in [*words, "depth (dim 2), height (dim 3)", "functional_workers.py:"]:
            assert word in message, message
