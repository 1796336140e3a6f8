"""Check a spatially parallel model against the single-device model it came from.

As :mod:`xarray.testing` does for arrays, this module holds the one comparison
used by ``sciml spatial check``, the demo, the notebook and the test suite::

    from sciml.distributed import spawn
    from sciml.spatial_parallel.testing import check_parallel

    results = spawn(check_parallel, 2, {"depth": 2}, model, (2, 2, 16, 16, 16))
    assert all(r.ok for r in results), [r.failures() for r in results]

Every rank runs three computations of the same weights on the same global
batch: the float64 single-device *reference*, the single-device model in the
checked ``dtype`` (float32 when checking float64, whose error, scaled by the
ratio of the eps, estimates the float64 one) and the parallel model in that
``dtype``. Each quantity the
design promises (this rank's output block, the gathered output, its input
gradient block, every parameter gradient after the built-in reduction, every
buffer, the eval-mode output) is compared with the reference by
:func:`relative_error`. Tolerances are derived, not tuned
(:func:`error_bound`): the parallel model adds the same terms as the single
device in another order, so its error may exceed the single-device error by
a small factor, plus a floor for the rounding of a sum of ``size`` terms.
That floor is taken relative to the scale the quantity is computed at
(:func:`reference_scale`): a parameter gradient is one part of its layer's
gradient (weight and bias together), and a gradient that is zero in exact
arithmetic (a bias followed by a normalisation) comes out as rounding noise
of that layer's gradient on both sides, which no bound relative to its own size
can judge.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from sciml.spatial_parallel.mesh import SpatialMesh
from sciml.spatial_parallel.parallelize import gradient_sync, parallelize
from sciml.spatial_parallel.testing_runs import reversed_batch_run, run_quantities

#: How much larger than the single-device rounding error the parallel one may be.
FACTOR = 4.0
#: Probability that a correct quantity exceeds the rounding floor of :func:`error_bound`.
FLOOR_FAILURE = 1e-6


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max|actual - expected| / max|expected|`` (float64 arithmetic).

    Empty tensors agree (0.0). When ``expected`` is all zeros the absolute
    difference is returned, so nothing divides by zero.

    Raises:
        AssertionError: If the shapes differ.
    """
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {tuple(actual.shape)} != reference {tuple(expected.shape)}")
    if expected.numel() == 0:
        return 0.0
    a, b = actual.detach().double().cpu(), expected.detach().double().cpu()
    scale = float(b.abs().max())
    diff = float((a - b).abs().max())
    return diff / scale if scale > 0 else diff


def floor_factor(size: int) -> float:
    """``lambda`` of the probabilistic rounding bound for sums of up to ``size`` terms.

    Higham and Mary (SIAM J. Sci. Comput. 41(5), 2019, theorems 2.4 and 3.1):
    with independent rounding errors of mean zero, a sum of ``n`` terms
    computed in any order is off by at most ``lambda * sqrt(n) * u`` times its
    scale, with probability at least ``1 - 2 n exp(-lambda**2 / 2)`` (to first
    order in ``u``). Asking that failure probability to be
    :data:`FLOOR_FAILURE` for ``n = size`` gives
    ``lambda = sqrt(2 ln(2 size / FLOOR_FAILURE))``: 6.5 for 10^3 terms, 7.5 for
    10^6.
    """
    if size < 1:
        raise ValueError(f"error_bound: size must be positive, got {size}")
    return math.sqrt(2 * math.log(2 * size / FLOOR_FAILURE))


def error_bound(single_error: float, *, dtype: torch.dtype, size: int, scale: float = 1.0) -> float:
    """Largest relative error allowed for the parallel result.

    ``FACTOR * single_error + floor_factor(size) * eps * sqrt(size) * scale``.
    The parallel model sums the same ``size`` (at most) terms as the single
    device in another order: the second term bounds that reordering's
    rounding (:func:`floor_factor`) at the quantity's computing scale,
    ``scale`` times its own largest value (:func:`reference_scale`). The
    single-device error measures how ill-conditioned the quantity is, and
    the parallel one may be ``FACTOR`` times larger (two samples of the same
    rounding noise). Integer tensors must match exactly (0.0).
    """
    if not dtype.is_floating_point:
        return 0.0
    floor = floor_factor(size) * torch.finfo(dtype).eps * math.sqrt(size) * scale
    return FACTOR * single_error + floor


def reference_scale(quantity: torch.Tensor, whole: float) -> float:
    """``whole`` (the largest value of what ``quantity`` is part of) over ``quantity``'s own.

    For use as ``error_bound(..., scale=...)`` with :func:`relative_error`,
    which divides by ``quantity``'s own largest value (or by 1 when it is all
    zeros: then the scale is ``whole`` itself, or 1 if that is zero too).
    """
    own = float(quantity.detach().abs().max()) if quantity.numel() else 0.0
    if own > 0:
        return max(whole / own, 1.0)
    return whole if whole > 0 else 1.0


@dataclass
class Comparison:
    """One rank's comparison of a parallel model with the single-device model.

    Attributes:
        errors: Relative error of each parallel quantity against the float64
            reference.
        single: Relative error of the single-device model in the checked dtype
            (for float64: the float32 error times ``eps64 / eps32``, an estimate
            through the quantity's condition number).
        bounds: The allowed error of each quantity (:func:`error_bound`).
        rank: Global rank.
        coords: ``(data, depth, height, width)`` mesh coordinates.
        block: This rank's ``(start, stop)`` along depth, height and width.
        seconds: Parallel forward + backward time of the last step.
        output: The gathered parallel output of the last step (``keep_outputs``).
        reference: The single-device reference output (``keep_outputs``).
    """

    errors: dict[str, float]
    single: dict[str, float]
    bounds: dict[str, float]
    rank: int
    coords: tuple[int, int, int, int]
    block: list[tuple[int, int]]
    seconds: float
    output: torch.Tensor | None = field(default=None, repr=False)
    reference: torch.Tensor | None = field(default=None, repr=False)

    def failures(self) -> dict[str, str]:
        """Every quantity above its bound, as ``"error > bound"``."""
        return {
            key: f"{value:.2e} > {self.bounds[key]:.2e}"
            for key, value in self.errors.items()
            if not value <= self.bounds[key]
        }

    @property
    def ok(self) -> bool:
        """Whether every quantity is within its bound."""
        return not self.failures()

    def worst(self, prefix: str) -> float:
        """Largest error of the quantities whose name starts with ``prefix``."""
        return max((v for k, v in self.errors.items() if k.startswith(prefix)), default=0.0)


def compare_parallel(
    model: nn.Module,
    mesh: SpatialMesh,
    shape: tuple[int, ...],
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    steps: int = 1,
    train: bool = True,
    evaluate: bool = False,
    overlap: bool | None = None,
    sync: bool = True,
    keep_outputs: bool = False,
    device: torch.device | str | None = None,
) -> Comparison:
    """Compare ``parallelize(model, mesh)`` with ``model`` on a random global batch.

    Collective: call on every rank of ``mesh`` with the same arguments. The
    loss of each step is ``sum(y * w)`` with random weights ``w`` (the global
    loss convention of the package), summed over the output tensors of a model
    that returns several (tuples, lists, dicts: each is compared as
    ``out<step>.<i>``), so every output element reaches the gradients.

    Args:
        model: A plain ``torch.nn`` 3D CNN (not modified).
        mesh: The process grid.
        shape: Global input shape ``(N, C, D, H, W)``.
        dtype: The checked floating dtype (the reference is always float64).
        seed: Seed of the inputs, loss weights and dropout masks.
        steps: Forward/backward steps (gradients accumulate, running statistics move).
        train: Run the steps in training mode.
        evaluate: Then compare one eval-mode forward pass (running statistics).
        overlap: Passed to :func:`parallelize`.
        sync: Reduce the gradients (``False`` keeps local gradients: a check
            that must then fail).
        keep_outputs: Return the gathered output of the last step (the first output
            tensor of a model that returns several).
        device: Where the parallel model runs (passed to :func:`parallelize`;
            the references run on the CPU).

    Raises:
        TypeError: If ``mesh`` is not a SpatialMesh.
        ValueError: If ``shape`` is not 5 positive sizes, ``dtype`` is not a
            floating dtype, ``steps`` < 1, or ``model`` cannot be parallelised.
    """
    if not isinstance(mesh, SpatialMesh):
        raise TypeError(f"compare_parallel expects a SpatialMesh, got {type(mesh).__name__}")
    if len(shape) != 5 or any(not isinstance(s, int) or s < 1 for s in shape):
        raise ValueError(
            f"compare_parallel: shape must be 5 positive sizes (N, C, D, H, W), got {shape}"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"compare_parallel: dtype must be a floating dtype, got {dtype}")
    if steps < 1:
        raise ValueError(f"compare_parallel: steps must be >= 1, got {steps}")
    checked = copy.deepcopy(model).to(dtype).train(train)
    reference = copy.deepcopy(checked).double()  # the same (rounded) weights, in float64
    untouched = copy.deepcopy(reference)
    generator = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(shape, dtype=dtype, generator=generator) for _ in range(steps + 1)]
    eval_input = inputs.pop() if evaluate else None
    inputs = inputs[:steps]
    weights: list[tuple[torch.Tensor, ...]] = []
    ref, _ = run_quantities(
        reference,
        mesh,
        [x.double() for x in inputs],
        weights,
        parallel=False,
        seed=seed,
        eval_input=None if eval_input is None else eval_input.double(),
        draw_dtype=dtype,
    )
    weights = [tuple(w.to(dtype) for w in step) for step in weights]
    # float64 has no more precise reference: its single-device error is estimated from
    # float32's (the same condition number times the smaller eps)
    probe = torch.float32 if dtype == torch.float64 else dtype
    single, _ = run_quantities(
        copy.deepcopy(checked).to(probe),
        mesh,
        [x.to(probe) for x in inputs],
        [tuple(w.to(probe) for w in step) for step in weights],
        parallel=False,
        seed=seed,
        eval_input=None if eval_input is None else eval_input.to(probe),
    )
    scale = torch.finfo(dtype).eps / torch.finfo(probe).eps
    single_errors = {k: relative_error(single[k], ref[k]) * scale for k in ref}
    for k, value in reversed_batch_run(untouched, mesh, inputs, weights, seed).items():
        single_errors[k] = max(single_errors[k], relative_error(value, ref[k]))
    pmodel = parallelize(checked, mesh, overlap=overlap, device=device)
    gradient_sync(pmodel).enabled = sync
    if list(pmodel.state_dict()) != list(model.state_dict()):
        raise AssertionError("parallelize changed the state_dict keys")
    par, seconds = run_quantities(
        pmodel,
        mesh,
        inputs,
        weights,
        parallel=True,
        seed=seed,
        eval_input=eval_input,
        device=None if device is None else torch.device(device),
    )
    missing = sorted(set(ref) ^ set(par))
    if missing:
        raise AssertionError(f"quantities missing on one side: {missing}")
    size = math.prod(shape)
    return Comparison(
        errors={k: relative_error(par[k], ref[k]) for k in ref},
        single=single_errors,
        bounds={
            k: error_bound(single_errors[k], dtype=par[k].dtype, size=size, scale=_scale(ref, k))
            for k in ref
        },
        rank=mesh.rank,
        coords=mesh.coords,
        block=[(s.start, s.stop) for s in mesh.block(shape)[2:]],
        seconds=seconds,
        output=_first_output(par, steps) if keep_outputs else None,
        reference=_first_output(ref, steps) if keep_outputs else None,
    )


def _first_output(quantities: dict[str, torch.Tensor], steps: int) -> torch.Tensor:
    """The last step's gathered output (the first one, of a model with several)."""
    key = f"unshard{steps - 1}"
    return quantities[key] if key in quantities else quantities[f"{key}.0"]


def _scale(ref: dict[str, torch.Tensor], key: str) -> float:
    """:func:`reference_scale` of quantity ``key``: its part of a layer's gradient or the output.

    A parameter gradient is measured against the largest gradient of its
    layer's parameters, an output block against the whole output; everything
    else against itself.
    """
    if key.startswith("grad:"):
        layer = key.rpartition(".")[0]
        grads = [
            v for k, v in ref.items() if k.startswith("grad:") and k.rpartition(".")[0] == layer
        ]
        whole = max((float(v.abs().max()) for v in grads if v.numel()), default=0.0)
    elif key.startswith("out"):
        output = ref["unshard" + key.removeprefix("out")]
        whole = float(output.abs().max()) if output.numel() else 0.0
    else:
        return 1.0
    return reference_scale(ref[key], whole)


def check_parallel(
    mesh_shape: Mapping[str, int], model: nn.Module, shape: tuple[int, ...], **options: Any
) -> Comparison:
    """:func:`compare_parallel` on a new ``SpatialMesh(**mesh_shape)``.

    A function for :func:`sciml.distributed.spawn`.
    """
    axes: dict[str, Any] = dict(mesh_shape)  # data/depth/height/width sizes
    return compare_parallel(model, SpatialMesh(**axes), shape, **options)


def assert_parallel_close(results: list[Comparison]) -> None:
    """Raise an AssertionError listing every rank's quantities above their bounds."""
    failures = [f"rank {r.rank} {r.coords}: {r.failures()}" for r in results if not r.ok]
    if failures:
        raise AssertionError("parallel model differs from one device:\n" + "\n".join(failures))


__all__ = [
    "Comparison",
    "assert_parallel_close",
    "check_parallel",
    "compare_parallel",
    "error_bound",
    "floor_factor",
    "reference_scale",
    "relative_error",
]
