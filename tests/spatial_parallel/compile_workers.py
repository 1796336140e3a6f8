"""Rank functions of the torch.compile tests: compiled parallel models against eager, one device.

Each case runs the single-device model (the float64 reference), the parallel
model eagerly and the same parallel model under ``torch.compile`` on the same
global batches, and returns the worst relative error of every compared
quantity: the gathered output, this rank's input gradient block and every
parameter gradient.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sciml.spatial_parallel import SpatialMesh, parallelize, shard, unshard
from sciml.spatial_parallel.split.op_names import SplitOpError
from sciml.spatial_parallel.testing import relative_error


class GlobalMeanHead(nn.Module):
    """A convolution, a shape branch, a functional global mean and a dense head."""

    def __init__(self) -> None:
        """Build the convolution and the head."""
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 3, padding=1)
        self.head = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pad an odd depth to even, then standardise by, and classify, the global mean."""
        y = torch.relu(self.conv(x))
        if y.shape[2] % 2:
            y = F.pad(y, (0, 0, 0, 0, 0, 1))
        mean = y.mean(dim=(2, 3, 4))
        return self.head(mean) * y.size(3)


class RefusedOp(nn.Module):
    """A convolution, then a running sum along the depth: not computable on blocks."""

    def __init__(self) -> None:
        """Build the convolution."""
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The index of the largest value along depth (refused: argmax along a split dim)."""
        return self.conv(x).argmax(2)


class Norms(nn.Module):
    """A convolution, then each split norm side by side (no bias gradient zero in exact
    arithmetic, as one norm's bias before another's would be)."""

    def __init__(self) -> None:
        """Build the convolution and the batch, group and instance norms."""
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, padding=1, bias=False)
        self.norms = nn.ModuleList(
            [
                nn.BatchNorm3d(4),
                nn.GroupNorm(2, 4),
                nn.InstanceNorm3d(4, affine=True, track_running_stats=True),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The three norms of the convolution, concatenated along channels."""
        y = self.conv(x)
        return torch.cat([norm(y) for norm in self.norms], dim=1)


def build(case: str) -> tuple[nn.Module, int]:
    """The model of ``case`` and its input channels."""
    from sciml.models import CosmoFlow, UNet

    torch.manual_seed(0)
    if case == "cosmoflow":
        return CosmoFlow(2, 3, base_filters=4, n_conv=2), 2
    if case == "unet":
        return UNet(1, 2, base_channels=4, depth=1), 1
    if case == "norms":
        return Norms(), 2
    if case == "global_mean":
        return GlobalMeanHead(), 2
    raise ValueError(f"unknown case {case!r}")


def _weights_block(w: torch.Tensor, mesh: SpatialMesh) -> torch.Tensor:
    """This rank's loss weights: its block of a split output, its replica's samples of a
    replicated one."""
    return shard(w, mesh) if w.dim() == 5 else w[mesh.block((*w.shape, 1, 1, 1))[0]]


def compiled_errors(
    mesh_kwargs: dict[str, int],
    case: str,
    depths: list[int],
    compiler: str,
    size: int = 12,
    dynamic: bool | None = None,
) -> dict[str, Any]:
    """Worst relative errors of eager and compiled parallel runs, one step per global depth.

    The loss of each step is ``sum(y * w)`` with random weights ``w``;
    gradients accumulate over the steps, and a depth that changes between
    steps makes the compiled model meet new global shapes (while a rank's
    block may keep its own). ``compiler`` is the ``torch.compile`` backend,
    ``dynamic`` its option of that name.
    Also returns how many graphs the compiler made.
    """
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    mesh = SpatialMesh(**mesh_kwargs)
    model, channels = build(case)
    reference = model.double()
    eager = parallelize(reference, mesh)
    compiled = torch.compile(parallelize(reference, mesh), backend=compiler, dynamic=dynamic)
    generator = torch.Generator().manual_seed(1)
    errors: dict[str, float] = {}

    def worst(key: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        errors[key] = max(errors.get(key, 0.0), relative_error(actual, expected))

    for depth in depths:
        shape = (2, channels, depth, size, size)
        x = torch.randn(shape, dtype=torch.float64, generator=generator)
        xref = x.clone().requires_grad_()
        y = reference(xref)
        w = torch.randn(y.shape, dtype=torch.float64, generator=generator)
        (y * w).sum().backward()
        assert xref.grad is not None
        for kind, pmodel in (("eager", eager), ("compiled", compiled)):
            xin = shard(x, mesh).requires_grad_()
            out = pmodel(xin)
            (out * _weights_block(w, mesh)).sum().backward()
            assert xin.grad is not None
            whole = unshard(out, mesh).detach()
            worst(f"{kind}:out", whole, y.detach())
            worst(f"{kind}:xgrad", xin.grad, shard(xref.grad, mesh))
    for kind, pmodel in (("eager", eager), ("compiled", compiled)):
        for (name, p), ref in zip(pmodel.named_parameters(), reference.parameters(), strict=True):
            assert p.grad is not None and ref.grad is not None
            # each replica's loss is its own samples': the gradient is their average
            worst(f"{kind}:grad:{name}", p.grad * mesh.data, ref.grad)
    return {"errors": errors, "graphs": counters["stats"]["unique_graphs"]}


def refused_under_compile(mesh_kwargs: dict[str, int], compiler: str) -> dict[str, str]:
    """A compiled parallel model's errors: an op it cannot compute on blocks; fullgraph=True."""
    mesh = SpatialMesh(**mesh_kwargs)
    torch.manual_seed(0)
    model = parallelize(RefusedOp().double(), mesh)
    x = shard(torch.randn(1, 2, 8, 6, 6, dtype=torch.float64), mesh)
    messages = {}
    for case, options in {"op": {}, "fullgraph": {"fullgraph": True}}.items():
        torch._dynamo.reset()  # compiled code is cached by frame, whatever the options
        try:
            torch.compile(model, backend=compiler, **options)(x)
            messages[case] = "no error"
        except (SplitOpError, torch._dynamo.exc.Unsupported) as err:
            messages[case] = f"{type(err).__name__}: {err}"
    return messages
