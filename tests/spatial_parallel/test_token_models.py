"""Token models written as users write them, parallelised, against one device (float64).

Patch tokens from ``flatten(2)`` over split dims are gathered whole on every rank; a
class token, a positional parameter, ``nn.MultiheadAttention``, a mean over the tokens
and a dense head then run replicated (:mod:`sciml.spatial_parallel.split.contract`).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sciml.distributed import spawn
from sciml.spatial_parallel.testing import Comparison, check_parallel


class PatchViT(nn.Module):
    """A small ViT classifier over 4^3 patches of an (N, 1, 8, 8, 12) volume."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv3d(1, 8, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 1 + 2 * 2 * 3, 8))
        self.norm = nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(tokens.shape[0], -1, -1), tokens], 1) + self.pos
        normed = self.norm(tokens)
        tokens = tokens + self.attn(normed, normed, normed)[0]
        return self.head(tokens.mean(1))


@pytest.mark.parametrize(
    ("mesh", "nprocs"), [(dict(depth=2), 2), (dict(depth=2, height=2), 4)], ids=["2", "2x2"]
)
def test_a_user_vit_matches_one_device(mesh: dict[str, int], nprocs: int) -> None:
    torch.manual_seed(0)
    results = spawn(check_parallel, nprocs, mesh, PatchViT(), (2, 1, 8, 8, 12), timeout=300)
    for rank, result in enumerate(results):
        assert isinstance(result, Comparison)
        assert result.ok, (rank, result.failures())
        # every parameter has its gradient (none left out by the replicated path)
        assert {f"grad:{n}" for n, _ in PatchViT().named_parameters()} <= set(result.errors)
