"""Blocks of a dim that merges split dims (tokens or windows across depth x height).

The layout maths is checked on its own; the ops on such blocks on 4 gloo ranks
against one device (float64): what stays on the blocks gathers nothing, what
mixes the merged dim is gathered whole, and what can neither be kept nor
gathered (a write into the block, a random draw) is refused by name.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sciml.distributed import spawn
from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.split.folded import _canonical, _fold_of
from sciml.spatial_parallel.split.op_names import SplitOpError
from sciml.spatial_parallel.testing import Comparison, check_parallel
from tests.spatial_parallel.functional_workers import folded_gathers

MESH = dict(depth=2, height=2)


def test_swin_window_batch_is_the_run_of_window_counts() -> None:
    """``(b, D/4, H/4, W/4, 4, 4, 4, c) -> (b * windows, 64, c)``: the run is the counts."""
    gin = (1, 4, 2, 3, 4, 4, 4, 6)
    assert _fold_of(gin, (24, 64, 6), ((1, 0), (2, 1))) == (0, (1, 4, 2, 3), ((1, 0), (2, 1)))
    assert _fold_of(gin, (1, 24 * 64 * 6), ((1, 0), (2, 1))) == (1, gin, ((1, 0), (2, 1)))
    # split dims in two output dims: no single merged dim
    assert _fold_of((2, 3, 4, 5), (6, 20), ((1, 0), (2, 1))) is None


def test_one_layout_has_one_signature() -> None:
    """Unsplit neighbours merge, unsplit 1s go: the same blocks compare equal."""
    assert _canonical((1, 2, 2, 2), ((1, 0), (2, 1))) == ((2, 2, 2), ((0, 0), (1, 1)))
    assert _canonical((2, 2, 2), ((0, 0), (1, 1))) == ((2, 2, 2), ((0, 0), (1, 1)))
    assert _canonical((3, 4, 5, 6), ((1, 0),)) == ((3, 4, 30), ((1, 0),))
    assert _canonical((7, 1, 6), ((0, 0), (2, 1))) == ((7, 6), ((0, 0), (1, 1)))


class TokensOut(nn.Module):
    """Patch tokens through a LayerNorm, an MLP and (in training) dropout, returned as tokens."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.embed = nn.Conv3d(1, 6, 2, stride=2)
        self.norm, self.fc, self.drop = nn.LayerNorm(6), nn.Linear(6, 4), nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        return self.drop(F.gelu(self.fc(self.norm(tokens))))


@pytest.mark.parametrize("p", [0.0, 0.3], ids=["identity", "dropout"])
def test_tokens_leave_the_model_whole(p: float) -> None:
    """Merged tokens as the model's output are gathered whole; an active Dropout takes them
    whole too (its mask is the single-device one), the identity keeps the blocks."""
    torch.manual_seed(0)
    results = spawn(check_parallel, 4, MESH, TokensOut(p), (2, 1, 10, 6, 4), timeout=300)
    for rank, result in enumerate(results):
        assert isinstance(result, Comparison)
        assert result.ok, (rank, result.failures())


def test_only_what_mixes_the_tokens_is_gathered() -> None:
    """``folded_tokens`` (functional_workers): only attention's keys and values (einsum and
    scaled_dot_product_attention) are gathered (2 x 210 tokens x 3 channels each); per-token
    ops, the softmax over keys, the attention's queries and bias rows, a mean over the
    tokens (an all-reduce), stacks, chunks and a matmul batched over the tokens are not."""
    for sizes in spawn(folded_gathers, 4, MESH, (2, 2, 7, 6, 5), timeout=300):
        assert sizes == [1260] * 4, sizes


def _write_into_tokens(t: torch.Tensor) -> torch.Tensor:
    t[..., 0] = 0.0
    return t


REFUSED = {
    "setitem": (_write_into_tokens, "__setitem__", "writes into a block"),
    "dropout": (lambda t: F.dropout(t, 0.5), "dropout", "random values"),
    "rand_like": (lambda t: t + torch.rand_like(t), "rand_like", "random values"),
    # it would hold only this rank's tokens (a write into a copy of them, silently)
    "plain_written": (lambda t: torch.zeros(t.shape).add_(t), "add_", "whole tensor"),
}


class Refused(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case, self.embed = case, nn.Conv3d(1, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return REFUSED[self.case][0](self.embed(x).flatten(2).transpose(1, 2))


def refused_messages(mesh_kwargs: dict[str, int]) -> dict[str, str]:
    """Each refused case's error message (``'no error'`` if none)."""
    mesh = SpatialMesh(**mesh_kwargs)
    out = {}
    for case in REFUSED:
        model = parallelize(Refused(case), mesh)
        try:
            model(shard(torch.randn(1, 1, 4, 4, 2), mesh))
            out[case] = "no error"
        except SplitOpError as err:
            out[case] = str(err)
    return out


def test_writes_and_draws_on_merged_tokens_are_refused_by_name() -> None:
    """A write would land in a gathered copy, a draw differ by rank: both are refused."""
    for messages in spawn(refused_messages, 4, MESH, timeout=300):
        for case, (_, op, why) in REFUSED.items():
            message: Any = messages[case]
            assert op in message and why in message, (case, message)
            assert "depth (dim 1), height (dim 1)" in message, (case, message)
            assert "test_folded.py:" in message, (case, message)
