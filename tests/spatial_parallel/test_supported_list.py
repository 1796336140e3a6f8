"""The user guide's "Which model code works" (docs/guide/spatial_parallelism.md, once the
README's) names every layer and reduction the code computes."""

from __future__ import annotations

import re
from pathlib import Path

from sciml.spatial_parallel.layers.table import LAYERS, readme_list
from sciml.spatial_parallel.split.along import ALONG_SPLIT
from sciml.spatial_parallel.split.dispatch import HANDLERS
from sciml.spatial_parallel.split.ops import REDUCTIONS

README = Path(__file__).parents[2] / "docs" / "guide" / "spatial_parallelism.md"


def _paragraph() -> str:
    text = README.read_text()
    start = text.index("**Which model code works.**")
    return text[start : text.index("```", start)]


def test_the_swapped_layers_are_listed_as_the_table_says() -> None:
    assert readme_list() in " ".join(_paragraph().split())


def test_every_swapped_and_passed_layer_is_named() -> None:
    named = set(re.findall(r"`(\w+)`", _paragraph()))
    listed = {cls.__name__ for cls, spec in LAYERS.items() if spec.role in ("swap", "functional")}
    assert not listed - named, listed - named


def test_every_computed_reduction_and_layout_op_is_named() -> None:
    named = set(re.findall(r"`(?:\w+\.)?(\w+)", _paragraph()))
    aliases = {"linalg_vector_norm", "concat", "concatenate", "getitem", "upsample"}
    layout = {"cat", "stack", "pad", "interpolate", "repeat", "expand_as", "layer_norm"}
    layout |= {"einsum", "matmul", "bmm", "scaled_dot_product_attention"}
    missing = (REDUCTIONS | set(ALONG_SPLIT) | (layout & set(HANDLERS))) - named - aliases
    assert not missing, missing
