"""Token models written as users write them, parallelised, against one device (float64).

Patch tokens from ``flatten(2)`` over split dims are gathered whole on every rank; a
class token, a positional parameter, ``nn.MultiheadAttention``, a mean over the tokens
and a dense head then run replicated (:mod:`sciml.spatial_parallel.split.contract`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
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


class FlashViT(nn.Module):
    """Multi-head self-attention through ``F.scaled_dot_product_attention`` (as MONAI's
    ``SABlock(use_flash_attention=True)``), the tokens put back as a volume."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv3d(1, 8, 4, stride=4)
        self.norm, self.qkv, self.proj = nn.LayerNorm(8), nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.embed(x)
        tokens = grid.flatten(2).transpose(1, 2)
        n, t, c = tokens.shape
        qkv = self.qkv(self.norm(tokens)).reshape(n, t, 3, 2, c // 2).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], scale=0.5)
        tokens = tokens + self.proj(attended.transpose(1, 2).reshape(n, t, c))
        return tokens.transpose(1, 2).reshape(grid.shape)


@pytest.mark.parametrize(
    ("mesh", "nprocs"), [(dict(depth=2), 2), (dict(depth=2, height=2), 4)], ids=["2", "2x2"]
)
def test_flash_attention_keeps_the_queries_on_the_blocks(mesh: dict[str, int], nprocs: int) -> None:
    """Exact; only the keys and values are gathered (2 x 12 tokens x 4 channels x 2 heads
    each), on a depth split (tokens split) and on 2 x 2 (tokens merged: folded)."""
    torch.manual_seed(0)
    for rank, (result, sizes) in enumerate(
        spawn(gathered_sizes, nprocs, mesh, FlashViT(), (2, 1, 8, 8, 12), timeout=300)
    ):
        assert result.ok, (rank, result.failures())
        assert sizes == [2 * 2 * 12 * 4] * 2, sizes


class WindowAttention(nn.Module):
    """Swin's window attention over 4^3 windows, shifted by 2 (a roll), channels last."""

    def __init__(self, shift: int) -> None:
        super().__init__()
        self.shift, self.embed = shift, nn.Conv3d(1, 6, 1)
        self.qkv, self.proj = nn.Linear(6, 18), nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.embed(x).permute(0, 2, 3, 4, 1)
        b, d, h, w, c = y.shape
        y = torch.roll(y, (-self.shift,) * 3, (1, 2, 3))
        windows = y.view(b, d // 4, 4, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 5, 2, 4, 6, 7)
        windows = windows.reshape(-1, 64, c)
        q, k, v = self.qkv(windows).chunk(3, -1)
        attended = self.proj(torch.softmax(q @ k.transpose(1, 2) / 2, -1) @ v)
        y = attended.view(b, d // 4, h // 4, w // 4, 4, 4, 4, c).permute(0, 1, 4, 2, 5, 3, 6, 7)
        y = torch.roll(y.reshape(b, d, h, w, c), (self.shift,) * 3, (1, 2, 3))
        return y.permute(0, 4, 1, 2, 3)


class VideoSwinAttention(nn.Module):
    """Shifted-window attention as torchvision's video Swin writes it (``F.linear`` with the
    layers' weights, a relative position bias, the shift mask built with ``x.new_zeros`` and
    assignments, added through a ``view`` of the window batch), after padding the volume
    to whole windows."""

    def __init__(self, shift: int) -> None:
        super().__init__()
        self.shift, self.embed = shift, nn.Conv3d(1, 6, 1)
        self.qkv, self.proj = nn.Linear(6, 18), nn.Linear(6, 6)
        self.bias = nn.Parameter(torch.randn(2, 64, 64) / 8)  # heads, window^2

    def mask(self, x: torch.Tensor, size: tuple[int, int, int]) -> torch.Tensor:
        mask = x.new_zeros(*size)
        bands = (slice(0, -4), slice(-4, -self.shift), slice(-self.shift, None))
        for count, (d, h, w) in enumerate((d, h, w) for d in bands for h in bands for w in bands):
            mask[d, h, w] = count
        mask = mask.view(size[0] // 4, 4, size[1] // 4, 4, size[2] // 4, 4)
        mask = mask.permute(0, 2, 4, 1, 3, 5).reshape(-1, 64)
        mask = mask.unsqueeze(1) - mask.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.embed(x).permute(0, 2, 3, 4, 1)
        b, t, h, w, c = y.shape
        pads = [(4 - s % 4) % 4 for s in (t, h, w)]
        y = F.pad(y, (0, 0, 0, pads[2], 0, pads[1], 0, pads[0]))
        _, tp, hp, wp, _ = y.shape
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift,) * 3, dims=(1, 2, 3))
        windows = (tp // 4) * (hp // 4) * (wp // 4)
        y = y.view(b, tp // 4, 4, hp // 4, 4, wp // 4, 4, c)
        y = y.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(b * windows, 64, c)
        qkv = F.linear(y, self.qkv.weight, self.qkv.bias)
        qkv = qkv.reshape(y.size(0), y.size(1), 3, 2, c // 2).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * (c // 2) ** -0.5).matmul(k.transpose(-2, -1)) + self.bias.unsqueeze(0)
        if self.shift:
            attn = attn.view(y.size(0) // windows, windows, 2, 64, 64)
            attn = attn + self.mask(y, (tp, hp, wp)).unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, 2, 64, 64)
        attn = F.dropout(F.softmax(attn, dim=-1), p=0.0, training=self.training)
        y = attn.matmul(v).transpose(1, 2).reshape(y.size(0), y.size(1), c)
        y = F.linear(y, self.proj.weight, self.proj.bias)
        y = y.view(b, tp // 4, hp // 4, wp // 4, 4, 4, 4, c)
        y = y.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, tp, hp, wp, c)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift,) * 3, dims=(1, 2, 3))
        return y[:, :t, :h, :w, :].contiguous().permute(0, 4, 1, 2, 3)


def gathered_sizes(mesh_kwargs: dict[str, int], model: nn.Module, shape: tuple[int, ...]) -> Any:
    """``check_parallel``'s comparison, and the sizes of the tensors the parallel model's
    forward and backward gathered whole (one step)."""
    from sciml.spatial_parallel.split.redistribute import recorded_gathers

    with recorded_gathers() as seen:
        return check_parallel(mesh_kwargs, model, shape), seen


def _nothing_gathered(model: nn.Module, shape: tuple[int, ...]) -> None:
    """Exact, and nothing gathered, on depth=2 and on depth=2 x height=2."""
    for mesh, nprocs in ((dict(depth=2), 2), (dict(depth=2, height=2), 4)):
        for rank, (result, sizes) in enumerate(
            spawn(gathered_sizes, nprocs, mesh, model, shape, timeout=300)
        ):
            assert result.ok, (mesh, rank, result.failures())
            assert sizes == [], (mesh, sizes)


@pytest.mark.parametrize("shift", [0, 2])
def test_window_attention_aligned_with_the_blocks_runs_on_them(shift: int) -> None:
    """Windows whole within each rank's block: computed there, nothing gathered, also where
    the window batch merges windows across depth and height (a folded block)."""
    torch.manual_seed(0)
    _nothing_gathered(WindowAttention(shift), (1, 1, 16, 8, 8))


@pytest.mark.parametrize("shift", [0, 2])
def test_video_swin_attention_runs_on_the_blocks(shift: int) -> None:
    """torchvision's way of writing it, on a volume padded to whole windows (14 -> 16 deep):
    exact, and nothing gathered on depth=2 or depth=2 x height=2."""
    torch.manual_seed(0)
    _nothing_gathered(VideoSwinAttention(shift), (1, 1, 14, 8, 8))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mesh", "nprocs"),
    [(dict(data=2, depth=2), 4), (dict(data=2, depth=2, height=2), 8)],
    ids=["2x2x1x1", "2x2x2x1"],
)
def test_hybrid_meshes_keep_tokens_and_windows_on_the_blocks(
    mesh: dict[str, int], nprocs: int
) -> None:
    """With data-parallel replicas too (each holds its own batch of windows): exact, and
    only the flash ViT's keys and values gathered (2 local samples x 12 tokens x 8)."""
    torch.manual_seed(0)
    cases = (
        (FlashViT(), (4, 1, 8, 8, 12), [192, 192]),
        (VideoSwinAttention(2), (2, 1, 14, 8, 8), []),
    )
    for model, shape, expected in cases:
        for rank, (result, sizes) in enumerate(
            spawn(gathered_sizes, nprocs, mesh, model, shape, timeout=900)
        ):
            assert result.ok, (type(model).__name__, rank, result.failures())
            assert sizes == expected, (type(model).__name__, sizes)
