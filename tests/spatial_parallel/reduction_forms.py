"""Every call form torch accepts for the reductions computed on split blocks, generated.

Each form is the source of one call on a convolution's output ``y``
(``"y.std((2, 3, 4), False, True)"``, ``"torch.var_mean(y, 2, correction=0)"``):
method and function, positional and keyword, ``unbiased`` and ``correction``,
``keepdim`` both ways, ``dim`` as int, tuple, list, negative and absent. The
rank function compares each form's parallel model with the single device, or
returns the refusal's message.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sciml.spatial_parallel import SpatialMesh
from sciml.spatial_parallel.split.op_names import SplitOpError
from sciml.spatial_parallel.testing import compare_parallel

#: ``dim`` as torch takes it: int, negative, tuple, list; over split dims and not.
DIMS: list[Any] = [2, -3, (2, 3, 4), [2, 3, 4], (-3, -2, -1), (2, 4), 3, (3, 4), 1]


@dataclass(frozen=True)
class Form:
    """One call: its source, the dims it reduces (``None``: all) and whether it keeps them."""

    source: str
    dim: Any = None
    keepdim: bool = False

    def reduced(self, ndim: int = 5) -> set[int]:
        """The reduced dims, non-negative."""
        if self.dim is None:
            return set(range(ndim))
        dims = (self.dim,) if isinstance(self.dim, int) else tuple(self.dim)
        return {d % ndim for d in dims}

    def refused_on(self, split_dims: set[int]) -> bool:
        """Whether it reduces some split dims but not all and drops them (refused)."""
        crossed = self.reduced() & split_dims
        return bool(crossed) and crossed != split_dims and not self.keepdim


def _variance_forms() -> list[Form]:
    forms = []
    for op in ("std", "var"):
        forms += [Form(f"y.{op}()"), Form(f"y.{op}(False)"), Form(f"torch.{op}(y, False)")]
        forms += [Form(f"y.{op}(unbiased=False)"), Form(f"torch.{op}(y, correction=2)")]
        for keep in (False, True):
            forms.append(Form(f"torch.{op}(y, dim=None, correction=0, keepdim={keep})", None, keep))
        for dim in DIMS:
            forms += [
                Form(f"y.{op}({dim})", dim),
                Form(f"y.{op}({dim}, False)", dim),
                Form(f"torch.{op}(y, {dim}, False)", dim),
                Form(f"torch.{op}(y, {dim}, keepdim=True)", dim, True),
            ]
            for keep, unbiased in itertools.product((False, True), (False, True)):
                forms += [
                    Form(f"y.{op}({dim}, {unbiased}, {keep})", dim, keep),
                    Form(f"torch.{op}(y, {dim}, {unbiased}, {keep})", dim, keep),
                    Form(f"y.{op}(dim={dim}, unbiased={unbiased}, keepdim={keep})", dim, keep),
                ]
            for keep, correction in itertools.product((False, True), (0, 2)):
                forms.append(
                    Form(f"y.{op}({dim}, correction={correction}, keepdim={keep})", dim, keep)
                )
    for op in ("var_mean", "std_mean"):
        forms += [Form(f"torch.{op}(y)"), Form(f"torch.{op}(y, False)")]
        for dim, keep in itertools.product(DIMS, (False, True)):
            forms += [
                Form(f"torch.{op}(y, {dim}, False, {keep})", dim, keep),
                Form(f"torch.{op}(y, {dim}, correction=0, keepdim={keep})", dim, keep),
                Form(f"torch.{op}(y, dim={dim}, unbiased=True, keepdim={keep})", dim, keep),
            ]
    return forms


def _other_forms() -> list[Form]:
    forms = [
        Form(source)
        for source in (
            "y.sum()",
            "torch.mean(y)",
            "y.nansum()",
            "y.amax()",
            "torch.amin(y)",
            "y.max()",
            "y.min()",
            "y.norm()",
            "torch.norm(y, 3)",
            "y.logsumexp((0, 1, 2, 3, 4))",
            "(y > 0).any().to(y.dtype)",
            "torch.all(y > -2).to(y.dtype)",
            "y.sum(dtype=torch.float64)",
        )
    ]
    for dim, keep in itertools.product(DIMS, (False, True)):
        for op in ("sum", "mean", "nansum", "amax", "amin", "logsumexp"):
            forms += [
                Form(f"y.{op}({dim}, {keep})", dim, keep),
                Form(f"torch.{op}(y, dim={dim}, keepdim={keep})", dim, keep),
            ]
        forms += [
            Form(f"y.norm(3, {dim}, {keep})", dim, keep),
            Form(f"torch.linalg.vector_norm(y, 1, {dim}, {keep})", dim, keep),
            Form(f"(y > 0).any({dim}, {keep}).to(y.dtype)", dim, keep),
            Form(f"torch.all(y > -1, dim={dim}, keepdim={keep}).to(y.dtype)", dim, keep),
        ]
        if isinstance(dim, int) or len(dim) == 2:  # torch's Frobenius norm: 1 or 2 dims
            forms += [
                Form(f"torch.norm(y, p='fro', dim={dim}, keepdim={keep})", dim, keep),
                Form(f"y.norm(dim={dim}, keepdim={keep})", dim, keep),
            ]
        if isinstance(dim, int):
            forms += [
                Form(f"y.max({dim}, {keep}).values", dim, keep),
                Form(f"torch.min(y, dim={dim}, keepdim={keep})[0]", dim, keep),
            ]
    for dim in DIMS:
        forms += [Form(f"y.{op}({dim})", dim) for op in ("sum", "mean", "amax", "logsumexp")]
    return forms


#: Every generated form, by source.
FORMS = {form.source: form for form in _variance_forms() + _other_forms()}


class FormModule(nn.Module):
    """A convolution, then one reduction form whose result scales the convolution's output.

    ``folded``: the form acts on ``y.flatten(2, 3).unflatten(3, (3, -1))`` instead,
    whose dim 2 merges depth and height (a folded block on a depth x height split; the
    width a multiple of 3), and the result is cut back to a volume.
    """

    def __init__(self, source: str, folded: bool = False) -> None:
        """Compile the form of ``source`` (see :data:`FORMS`)."""
        super().__init__()
        self.form, self.folded = FORMS[source], folded
        # no bias: a bias only shifts what a centred statistic removes (zero gradient)
        self.conv = nn.Conv3d(2, 3, 3, padding=1, bias=False)
        self.call = eval(f"lambda y: {source}", {"torch": torch})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``y * r + y`` with the reduced dims of ``r`` put back as size 1."""
        volume = self.conv(x)
        y = volume.flatten(2, 3).unflatten(3, (3, -1)) if self.folded else volume
        r = self.call(y)
        if isinstance(r, tuple):
            r = r[0] * r[1]
        if r.dim() < y.dim():
            for d in sorted(self.form.reduced()):
                r = r.unsqueeze(d)
        out = y * r + y
        if self.folded:
            return out.flatten(3, 4).unflatten(2, volume.shape[2:4])
        return out


def compare_forms(
    mesh_kwargs: dict[str, int], shape: tuple[int, ...], forms: list[str], folded: bool = False
) -> dict[str, Any]:
    """Each form's worst relative error against one device (float64), or its refusal."""
    mesh = SpatialMesh(**mesh_kwargs)
    out: dict[str, Any] = {}
    for form in forms:
        torch.manual_seed(0)
        try:
            model = FormModule(form, folded)
            result = compare_parallel(model, mesh, shape, dtype=torch.float64)
        except SplitOpError as err:
            out[form] = str(err)
        else:
            out[form] = max(v for v in result.errors.values() if not math.isnan(v))
    return out
