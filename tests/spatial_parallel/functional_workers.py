"""Rank functions for the functional-op tests: user modules whose forward code calls torch ops.

Each module computes something on a split block in its own forward code
(reductions, pads, slices, concatenations, reshapes, shape branches); the
parallel model must match the single-device one or refuse the op by name.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard
from sciml.spatial_parallel.split.op_names import SplitOpError
from sciml.spatial_parallel.testing import compare_parallel


def _in_place_ops(m: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """In-place ops by method, operator and ``inplace=True``; ``y`` is read again after them."""
    y.sub_(y.mean(2, keepdim=True))  # y: the block written into, not rebound
    y *= 1.5
    z = F.leaky_relu(y, 0.2, inplace=True)
    return z + y


def _folded_tokens(m: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """Tokens flattened across the split dims (merged across depth and height: folded).

    Per-token ops, contractions that keep the tokens and a mean over them stay on the
    blocks; attention's keys and values (einsum and ``scaled_dot_product_attention``)
    are gathered whole.
    """
    t = y.flatten(2).transpose(1, 2)  # (N, tokens, C)
    t = t * m.scale + torch.linspace(0, 1, t.shape[1], dtype=t.dtype)[:, None]
    attended = torch.einsum("ntc,nsc->nts", t, t).softmax(-1) @ t
    tokens = torch.arange(t.shape[1], dtype=t.dtype)
    bias = (tokens[:, None] - tokens) / t.shape[1]  # (queries, keys): the queries' rows
    attended = attended + F.scaled_dot_product_attention(t, t * 0.5, t, bias, scale=0.7)
    per_token = m.norm(t)[..., :2].sum(-1, keepdim=True) + t.max(-1).values[:, :, None]
    parts = torch.stack(t.unbind(-1), -1).chunk(3, -1)[1] + t.mean(1, keepdim=True)
    batch_first = t.transpose(0, 1)  # tokens as the batch of a matmul
    gram = (batch_first @ batch_first.transpose(1, 2)).sum(-1).transpose(0, 1)[..., None]
    out = (attended + per_token + parts).clone()
    out.mul_(0.5)
    return (out + gram).transpose(1, 2).reshape(y.shape) + y


#: Forward code after a convolution, by case name; each returns the model output.
CASES: dict[str, Any] = {
    "mean_head": lambda m, y: m.head(y.mean(dim=(2, 3, 4))),
    "sum_method_dim_none": lambda m, y: y.sum() * y,
    "keepdim_standardise": lambda m, y: (
        (y - y.mean((2, 3, 4), keepdim=True)) / y.std(dim=(-3, -2, -1), keepdim=True)
    ),
    "var_unbiased_false": lambda m, y: m.head(y.var((2, 3, 4), unbiased=False)),
    "amax_amin": lambda m, y: m.head(y.amax(dim=(2, 3, 4)) - torch.amin(y, (2, 3, 4))),
    "max_min_global": lambda m, y: y * y.max() + y.min(),
    # true on the whole volume, false on every block but the one holding the maximum
    "any_all": lambda m, y: (
        y
        * (
            (y >= y.amax((2, 3, 4), keepdim=True)).any((2, 3, 4), keepdim=True)
            & ~(y < y.amax((2, 3, 4), keepdim=True)).all(dim=(2, 3, 4), keepdim=True)
        )
        + torch.any(y > y.amax()).to(y.dtype)
    ),
    "max_dim": lambda m, y: y * y.max(dim=-1, keepdim=True).values,
    "norm_logsumexp": lambda m, y: m.head(y.norm(2, dim=(2, 3, 4)) + y.logsumexp((2, 3, 4))),
    "vector_norm": lambda m, y: torch.linalg.vector_norm(y, 3, dim=(2, 3, 4), keepdim=True) * y,
    "channel_ops": lambda m, y: torch.cat([y.softmax(1), y.sum(1, keepdim=True)], dim=1),
    "pad_constant": lambda m, y: F.pad(y, (0, 1, 2, 0, 1, 3), value=0.5),
    "pad_replicate": lambda m, y: F.pad(y, (1, 0, 0, 1, 0, 1), mode="replicate"),
    "pad_crop": lambda m, y: F.pad(y, (0, -1, -1, 0, -2, -1)),
    # wraps along width, height (split on 4 ranks) and depth (7 = blocks of 4 and 3): the
    # 4 planes wrapped onto the first depth block come from both blocks
    "pad_circular": lambda m, y: F.pad(y, (1, 2, 2, 1, 4, 1), mode="circular"),
    "cat_split_dim": lambda m, y: torch.cat([y, y[:, :, 1:]], dim=2),
    "slice_steps": lambda m, y: y[:, :, 1:-1:2, ..., ::2] * 2,
    "interpolate_nearest": lambda m, y: F.interpolate(y, scale_factor=2, mode="nearest"),
    "flatten_unflatten": lambda m, y: y.unsqueeze(1).flatten(1, 2).view(*y.shape) * 2,
    "transpose_softmax": lambda m, y: y.transpose(1, 2).softmax(2).transpose(1, 2),
    "shape_branch": lambda m, y: F.pad(y, (0, 0, 0, 0, 0, 1)) if y.shape[2] % 2 else y,
    "param_on_replicated": lambda m, y: m.head(y.mean((2, 3, 4)) * m.scale),
    "stack_unbind": lambda m, y: torch.stack(list(y.unbind(1)), dim=1).square(),
    "new_zeros_like": lambda m, y: y + y.new_zeros(y.shape) + torch.zeros_like(y),
    # over some split dims only (on the 1x2x2x1 mesh): the reduced dims stay, of size 1
    "partial_standardise": lambda m, y: (
        (y - y.mean(2, keepdim=True)) / y.std(dim=(2, 4), keepdim=True)
    ),
    "partial_extremes": lambda m, y: (
        y * y.amax(2, keepdim=True)
        + y.max(dim=3, keepdim=True).values
        - torch.amin(y, (2, 4), keepdim=True)
    ),
    "partial_var_mean_lse_norm": lambda m, y: (
        torch.var_mean(y, 3, keepdim=True)[0] * y
        + y.logsumexp(2, keepdim=True)
        + y.norm(dim=3, keepdim=True)
    ),
    "partial_any_all": lambda m, y: y * (y > 0).any(2, keepdim=True) + (y < 0.1).all(3, True),
    "partial_then_whole": lambda m, y: m.head(y.sum(2, keepdim=True).mean((2, 3, 4))),
    "partial_output": lambda m, y: y.nansum(3, keepdim=True),
    "in_place": _in_place_ops,
    # MONAI VNet's input block: along channels only, and along split dims (copies joined)
    "repeat_channels": lambda m, y: y.repeat(1, 2, 1, 1, 1) * 0.5,
    "repeat_split_dims": lambda m, y: y.repeat(1, 1, 2, 1, 3),
    "repeat_new_dim": lambda m, y: y.repeat(2, 1, 1, 1, 1, 1).sum(0),
    # a plain tensor made for the global shape, each rank using its block of it
    "positional_encoding": lambda m, y: (
        y
        + torch.arange(y.shape[2], dtype=y.dtype).view(1, 1, -1, 1, 1).expand_as(y)
        + torch.linspace(-1, 1, y.shape[3], dtype=y.dtype)[:, None].expand_as(y) * m.scale[0]
    ),
    "constant_pad_module": lambda m, y: m.pad(y),
    "plain_type_as_block": lambda m, y: y * torch.ones(3, 1, 1, 1).type_as(y),
    # along split dims: softmax over the whole dim, scans across ranks, flips and rolls
    "softmax_split_dims": lambda m, y: (
        y.softmax(2) + F.log_softmax(y, dim=3) * 0.1 + F.softmin(y, -3)
    ),
    # trilinear interpolate: the split Upsample's halo reads, scale and size, corners both ways
    "trilinear_scale": lambda m, y: F.interpolate(y, scale_factor=2, mode="trilinear"),
    "trilinear_size_corners": lambda m, y: F.interpolate(
        y, size=(9, 11, 7), mode="trilinear", align_corners=True
    ),
    "trilinear_down": lambda m, y: F.interpolate(y, scale_factor=0.6, mode="trilinear"),
    "adaptive_avg_pool": lambda m, y: F.adaptive_avg_pool3d(y, (3, 2, 4)) * 2,
    "cumsum_split_dims": lambda m, y: y.cumsum(2) * 0.1 + torch.cumsum(y, dim=3),
    "cumprod_split_dim": lambda m, y: (0.2 * y + 1).cumprod(2),
    "flip_roll_split_dims": lambda m, y: (
        y.flip(2) + torch.flip(y, (2, 3)) + y.roll(3, 2) + torch.roll(y, (-2, 1), (3, 1))
    ),
    # channels last through a LayerNorm: its output keeps the block's own layout (it was
    # wrapped as a volume's, split along the wrong dims)
    "channels_last_layer_norm": lambda m, y: (
        lambda z: z * z.mean(1, keepdim=True) + z.amax((1, 2, 3), keepdim=True)
    )(m.norm(y.permute(0, 2, 3, 4, 1))).permute(0, 4, 1, 2, 3),
    # a whole plain tensor against the blocks (coordinates, a positional encoding): its block
    "whole_plain_operands": lambda m, y: (
        y * torch.linspace(0.5, 1.5, y.shape[3], dtype=y.dtype).view(-1, 1)
        + torch.arange(y.shape[2], dtype=y.dtype).view(-1, 1, 1)
    ),
    # tokens: flatten merges the split dims (gathered whole), attention on every rank, and
    # the replicated result back against the blocks
    "token_attention": lambda m, y: (
        (lambda t: (torch.softmax(t @ t.transpose(1, 2) / 3, -1) @ t).transpose(1, 2))(
            y.flatten(2).transpose(1, 2)
        ).reshape(y.shape)
        + y
    ),
    # einsum whose split indices reach the output: on the blocks
    # attention as torch computes it: queries on the blocks, keys and values gathered
    "sdpa_tokens": lambda m, y: (
        (
            lambda t: F.scaled_dot_product_attention(
                t, t * 0.5, t, attn_mask=torch.arange(t.shape[1]) % 3 != 0, scale=0.7
            )
        )(y.flatten(2).transpose(1, 2))
        .transpose(1, 2)
        .reshape(y.shape)
        + y
    ),
    "einsum_channels": lambda m, y: (
        torch.einsum("ncdhw,c->ndhw", y, torch.linspace(1, 2, 3, dtype=y.dtype))[:, None] * y
    ),
    # one index split along two mesh axes by its operands, and a diagonal: gathered
    "einsum_crossed_and_diagonal": lambda m, y: (
        lambda z: (
            torch.einsum("ncdhw,ncdhw->ncdhw", z, z.transpose(2, 3))
            + torch.einsum("ncddw->ncdw", z).unsqueeze(3)
        )
    )(y[:, :, :6]),
    "folded_tokens": _folded_tokens,
    "squeeze_excitation": lambda m, y: (
        y * torch.sigmoid(m.fc(m.pool(y).flatten(1))).view(y.shape[0], 3, 1, 1, 1)
    ),
}
#: Cases that reduce along one split dim: compared on meshes that split only that dim.
ONE_AXIS_CASES: dict[str, Any] = {
    "max_dim_split": lambda m, y: y * y.max(dim=2, keepdim=True).values,
    "amin_depth": lambda m, y: m.head(y.amin(2).sum((2, 3))),
}
#: Forward code that cannot be computed on blocks: it must be refused by name.
REFUSED: dict[str, tuple[Any, str]] = {
    "conv_functional": (lambda m, y: F.conv3d(y, m.conv.weight, padding=1), "conv3d"),
    "argmax_split": (lambda m, y: y.argmax(2), "argmax"),
    "pad_circular_twice": (
        lambda m, y: F.pad(y, (0, 0, 0, 0, 8, 0), mode="circular"),
        "F.pad",
    ),
    "area": (lambda m, y: F.interpolate(y, scale_factor=0.5, mode="area"), "interpolate"),
    "sort_split": (lambda m, y: y.sort(2).values, "sort"),
    "dropout": (lambda m, y: F.dropout(y, 0.5), "dropout"),
    "index_tensor": (lambda m, y: y[:, :, torch.tensor([0, 2])], "__getitem__"),
    # a plain tensor shaped or indexed by a block: no global meaning (was a bare assertion)
    "plain_view_as_block": (
        lambda m, y: y + torch.ones(y.numel(), dtype=y.dtype).view_as(y),
        "view_as",
    ),
    "plain_indexed_by_block": (lambda m, y: torch.arange(4.0)[(y > 0).long()], "__getitem__"),
    # a whole plain tensor written in place would hold only this rank's block (was silent)
    "plain_written_in_place": (lambda m, y: torch.zeros(y.shape).add_(y), "add_"),
}


#: Cases invariant to a shift of the convolution's output: its bias has a zero
#: gradient in exact arithmetic (rounding noise on both sides), so it has none.
SHIFT_INVARIANT = (
    "keepdim_standardise",
    "var_unbiased_false",
    "partial_standardise",
    "in_place",
    "softmax_split_dims",
)


class UserModule(nn.Module):
    """A convolution, then the case's own forward code.

    ``folded``: the code acts on ``y.flatten(2, 3).unflatten(3, (3, -1))``, whose dim 2
    merges depth and height (a folded block on a depth x height split; the width a
    multiple of 3); an output of that shape is cut back to a volume.
    """

    def __init__(self, case: str, folded: bool = False) -> None:
        """Build the layers of ``case``."""
        super().__init__()
        self.case, self.folded = case, folded
        self.conv = nn.Conv3d(2, 3, 3, padding=1, bias=case not in SHIFT_INVARIANT)
        source = inspect.getsource({**CASES, **ONE_AXIS_CASES}.get(case, lambda m, y: None))
        self.head = nn.Linear(3, 2) if "m.head" in source else nn.Identity()
        if "m.fc" in source:
            self.pool = nn.AdaptiveAvgPool3d(1)
            self.fc = nn.Linear(3, 3)
        if "m.norm" in source:
            self.norm = nn.LayerNorm(3)
        if "m.pad" in source:
            self.pad = nn.ConstantPad3d((1, 0, 2, 1, 0, 3), 0.25)
        if "m.scale" in source:
            self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The case's forward code on the convolution's output."""
        body = {**CASES, **ONE_AXIS_CASES}.get(self.case) or REFUSED[self.case][0]
        volume = self.conv(x)
        if not self.folded:
            return body(self, volume)
        y = volume.flatten(2, 3).unflatten(3, (3, -1))
        out = body(self, y)
        if out.shape != y.shape:
            return out
        return out.flatten(3, 4).unflatten(2, volume.shape[2:4])


def compare_cases(
    mesh_kwargs: dict[str, int], shape: tuple[int, ...], cases: list[str], folded: bool = False
) -> dict[str, float]:
    """Worst relative error of each case (outputs, input and parameter gradients)."""
    mesh = SpatialMesh(**mesh_kwargs)
    out = {}
    for case in cases:
        torch.manual_seed(0)
        model = UserModule(case, folded)
        result = compare_parallel(model, mesh, shape, dtype=torch.float64, steps=2)
        out[case] = max(result.errors.values())
    return out


def folded_gathers(mesh_kwargs: dict[str, int], shape: tuple[int, ...]) -> list[int]:
    """The sizes of the tensors the ``folded_tokens`` case gathers whole in one forward."""
    from sciml.spatial_parallel.split.redistribute import recorded_gathers

    mesh = SpatialMesh(**mesh_kwargs)
    model = parallelize(UserModule("folded_tokens").double(), mesh)
    with recorded_gathers() as sizes:
        model(shard(torch.randn(shape, dtype=torch.float64), mesh))
    return sizes


def refused_messages(mesh_kwargs: dict[str, int], shape: tuple[int, ...]) -> dict[str, str]:
    """The error message of every refused case (``'no error'`` when none was raised)."""
    mesh = SpatialMesh(**mesh_kwargs)
    out = {}
    for case in REFUSED:
        torch.manual_seed(0)
        model = parallelize(UserModule(case).double(), mesh)
        x = shard(torch.randn(shape, dtype=torch.float64), mesh)
        try:
            model(x)
            out[case] = "no error"
        except SplitOpError as err:
            out[case] = str(err)
    return out


def compare_basic_unet(mesh_kwargs: dict[str, int], shape: tuple[int, ...]) -> dict[str, float]:
    """Worst relative errors of MONAI's BasicUNet, whose UpCat pads where levels have odd sizes.

    Without normalisation every quantity is compared; with batch norm, the
    convolution biases that feed a normalisation are left out (their gradient is
    zero in exact arithmetic, so both sides are rounding noise).
    """
    from monai.networks.nets import BasicUNet

    mesh = SpatialMesh(**mesh_kwargs)
    out = {}
    for norm in (None, "batch"):
        torch.manual_seed(0)
        model = BasicUNet(
            spatial_dims=3, in_channels=1, out_channels=2, features=(2, 2, 2, 2, 2, 2), norm=norm
        )
        result = compare_parallel(model, mesh, shape, dtype=torch.float64)
        kept = {
            k: v
            for k, v in result.errors.items()
            if norm is None or not (k.endswith("conv.bias") and "final" not in k)
        }
        out[str(norm)] = max(kept.values())
    return out


def _graph_nodes(node: Any) -> set[str]:
    """Names of the autograd nodes reachable from ``node``."""
    names, todo = set(), [node]
    while todo:
        node = todo.pop()
        if node is not None and type(node).__name__ not in names:
            names.add(type(node).__name__)
            todo.extend(next_node for next_node, _ in node.next_functions)
    return names


def mechanism_facts(mesh_kwargs: dict[str, int], shape: tuple[int, ...]) -> dict[str, Any]:
    """What a model's forward code sees of a split block, and what leaves the model."""
    mesh = SpatialMesh(**mesh_kwargs)
    seen: dict[str, Any] = {}

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv3d(shape[1], shape[1], 1, dtype=torch.float64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["in_place_graph"] = _graph_nodes(F.relu(self.conv(x), inplace=True).grad_fn)
            leaf = x.detach().requires_grad_()
            try:  # refused by torch, as on one tensor
                leaf.relu_()
                seen["in_place_leaf"] = "no error"
            except RuntimeError as err:
                seen["in_place_leaf"] = str(err)
            seen["shape"] = tuple(x.shape)
            seen["size2"] = x.size(2)
            seen["size"] = tuple(x.size())
            seen["numel"] = x.numel()
            seen["len"] = len(x)
            seen["dim"] = x.dim()
            seen["repr"] = repr(x)
            zeros = x.new_zeros(x.shape)
            seen["new_zeros"] = (tuple(zeros.shape), type(zeros).__name__)
            try:  # on one tensor torch raises; on a block no local pad would see it
                F.pad(x, (0, 0, 1))
                seen["odd_pad"] = "no error"
            except ValueError as err:
                seen["odd_pad"] = str(err)
            for key, fn in {
                "broadcast": lambda: x + torch.ones(x.shape[2] + 1, 1, 1),
                "mixed_layouts": lambda: x[:, :, 1:] + x,
                "partial_reduction": lambda: x.sum(2),
                "in_place_widening": lambda: x.mean(2, keepdim=True).add_(x),
                "item": lambda: x[:1, :1, :1, :1, :1].item(),
            }.items():
                try:
                    fn()
                    seen[key] = "no error"
                except SplitOpError as err:
                    seen[key] = str(err)
            return x * 2

    model = parallelize(Probe(), mesh)
    x = torch.randn(shape, dtype=torch.float64)
    y = model(shard(x, mesh))
    seen["output_type"] = type(y).__name__
    seen["block"] = tuple(shard(x, mesh).shape)
    return seen
