r"""Ensemble model output statistics (EMOS, Gneiting et al. 2005): a Gaussian from the ensemble.

The forecast is :math:`N(\mu, \sigma^2)` with :math:`\mu = a + b\,\bar x` and
:math:`\sigma^2 = c + d\,s^2`, where :math:`\bar x` is the ensemble mean and :math:`s^2` the
ensemble variance (ddof=1); the coefficients minimise the mean closed-form CRPS over the
training samples subject to :math:`b, c, d \ge 0`.

:func:`fit_emos` pools the samples along ``dim`` and fits one set of coefficients for every
point of the other dimensions, all at once: ``dim=None`` is one global fit, ``dim="time"``
one fit per grid point (and level and lead time), ``dim=["time", "lat", "lon"]`` one per
level and lead time. :func:`emos_predict` gives :math:`(\mu, \sigma)` for new ensembles,
to be scored with :func:`sciml.weather.metrics.crps_gaussian`. :func:`pack_coefficients`
puts several variables' fits in one dataset (a run's ``emos.nc``), each on its own dims, and
:func:`unpack_coefficients` takes one variable's back. :func:`fit_run` and :func:`forecast`
are the ``"emos"`` entry of :data:`~sciml.weather.postprocess.registry.MODELS`: a run's fit
and its forecast on new data.

Numerics: float64 torch; each fit runs in units standardised by its observations' mean
and standard deviation (so one tolerance suits every variable), the constrained
coefficients are squares of free ones, and the independent fits are solved together by a
damped Newton method with each fit's own gradient, Hessian and step (their losses add, so
their derivatives separate), until each gradient is at rounding level: a quasi-Newton
method shared by all fits stops on the sum and leaves single fits unconverged.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import xarray as xr

from sciml.distributed import torch_threads
from sciml.weather.metrics.alignment import Dim, check_pair, check_parameter, reduced_dims
from sciml.weather.metrics.losses import crps_gaussian_loss

if TYPE_CHECKING:
    from sciml.weather.postprocess.config import PostprocessConfig

__all__ = [
    "emos_predict",
    "fit_emos",
    "fit_run",
    "forecast",
    "pack_coefficients",
    "unpack_coefficients",
]

#: Variance floor in standardised units, so that a zero-spread sample keeps a gradient.
VARIANCE_FLOOR = 1e-12
#: A fit is converged when no gradient component (standardised units) exceeds this.
GRADIENT_TOLERANCE = 1e-10
COEFFICIENTS = ("a", "b", "c", "d")
#: ``layout`` attribute of :func:`pack_coefficients`' datasets.
PACKED_LAYOUT = "per-variable"


def _moments(forecasts: xr.DataArray, member_dim: str) -> tuple[xr.DataArray, xr.DataArray]:
    ens = forecasts.astype(np.float64)
    return ens.mean(member_dim), ens.var(member_dim, ddof=1)


def _coefficients(free: torch.Tensor) -> torch.Tensor:
    """Free parameters ``(..., 4)`` to ``(a, b, c, d)`` with ``b, c, d >= 0``."""
    return torch.cat([free[..., :1], free[..., 1:] ** 2], dim=-1)


def _losses(
    free: torch.Tensor, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Mean CRPS ``(G,)`` of each fit's valid samples at its free parameters ``(G, 4)``."""
    a, b, c, d = _coefficients(free).unsqueeze(-1).unbind(-2)
    mu = a + b * mean
    sigma = torch.sqrt(c + d * var + VARIANCE_FLOOR)
    score = crps_gaussian_loss(y, mu, sigma, reduction="none")
    return torch.where(valid, score, 0.0).sum(-1) / valid.sum(-1)


def _derivatives(
    free: torch.Tensor, *data: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each fit's loss ``(G,)``, gradient ``(G, 4)`` and Hessian ``(G, 4, 4)``.

    The fits' losses add and share no parameter, so the gradient of their sum holds every
    fit's gradient, and one Hessian-vector product per parameter gives every fit's row.
    """
    free = free.detach().requires_grad_(True)
    loss = _losses(free, *data)
    (grad,) = torch.autograd.grad(loss.sum(), free, create_graph=True)
    rows = [torch.autograd.grad(grad[:, j].sum(), free, retain_graph=True)[0] for j in range(4)]
    return loss.detach(), grad.detach(), torch.stack(rows, dim=-2)


def _fit_standardised(
    y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, valid: torch.Tensor, max_iter: int
) -> torch.Tensor:
    """Coefficients ``(G, 4)`` of ``G`` independent fits on ``(G, N)`` standardised samples.

    Damped Newton per fit: the Hessian is shifted to positive definite where it is not, and
    each fit backtracks its own step until the loss decreases (Armijo). A fit is done when
    its gradient is at most :data:`GRADIENT_TOLERANCE` or no step lowers its loss (its
    optimum to rounding).

    Raises:
        RuntimeError: Fits still improving after ``max_iter`` iterations.
    """
    data = (y, mean, var, valid)
    free = torch.tensor([0.0, 1.0, math.sqrt(0.5), 1.0], dtype=torch.float64)
    free = free.repeat(y.shape[0], 1)
    eye = torch.eye(4, dtype=torch.float64)
    done = torch.zeros(y.shape[0], dtype=torch.bool)
    for _ in range(max_iter):
        loss, grad, hess = _derivatives(free, *data)
        done |= grad.abs().amax(-1) <= GRADIENT_TOLERANCE
        if done.all():
            return _coefficients(free)
        eig = torch.linalg.eigvalsh(hess)
        shift = (1e-12 * eig.abs().amax(-1).clamp_min(1.0) - eig[:, 0]).clamp_min(0.0)
        step = -torch.linalg.solve(hess + shift[:, None, None] * eye, grad)
        slope = (grad * step).sum(-1)
        size = torch.ones_like(loss)
        moved = done.clone()
        for _ in range(60):  # halvings of the step: 2**-60 is below float64's resolution
            trial = free + size[:, None] * step
            # strictly lower: a step that only matches the loss at rounding level is none
            better = ~moved & (_losses(trial, *data) < loss + 1e-4 * size * slope)
            free = torch.where(better[:, None], trial, free)
            moved |= better
            if moved.all():
                break
            size = torch.where(moved, size, size / 2)
        done |= ~moved  # no step lowers the loss: the fit is at its optimum to rounding
    if not done.all():
        raise RuntimeError(
            f"{int((~done).sum())} of {done.numel()} EMOS fits still improve after {max_iter} "
            "Newton iterations; raise max_iter"
        )
    return _coefficients(free)


def fit_emos(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    max_iter: int = 100,
    threads: int | None = 1,
) -> xr.Dataset:
    """Fit Gaussian EMOS by minimum CRPS, one fit per point of the dimensions not pooled.

    Samples with a NaN observation or ensemble statistic are left out of the fit.

    Args:
        observations: Verifying values, with the forecasts' dimensions but ``member_dim``.
        forecasts: Ensemble with ``member_dim`` (at least two members).
        member_dim: Name of the member dimension.
        dim: Dimensions whose samples are pooled into one fit (None: all, a global fit).
        max_iter: Newton iterations at most (a fit converges in a few tens).
        threads: torch threads for the fit (None: unchanged); one is fastest for fits of
            up to millions of samples, above all on a busy machine.

    Returns:
        Dataset with ``a``, ``b``, ``c``, ``d`` over the dimensions not pooled.

    Raises:
        ValueError: Misaligned inputs (see :mod:`~sciml.weather.metrics.alignment`), fewer
            than two members, no dimension to pool, or a fit without any valid sample.
        RuntimeError: A fit not converged after ``max_iter`` iterations.
    """
    forecasts = check_pair(observations, forecasts, member_dim, at_least=2)
    pooled = reduced_dims(observations, dim)
    if not pooled:
        raise ValueError("dim=[] pools no samples: EMOS needs dimensions to fit over")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    mean, var = _moments(forecasts, member_dim)
    kept: list[Hashable] = [d for d in observations.dims if d not in pooled]
    groups = math.prod(observations.sizes[k] for k in kept)
    stacked = [
        x.astype(np.float64).transpose(*kept, *pooled).values.reshape(groups, -1)
        for x in (observations, mean, var)
    ]
    y, m, v = (torch.from_numpy(np.ascontiguousarray(x)) for x in stacked)
    valid = y.isfinite() & m.isfinite() & v.isfinite()
    empty = int((valid.sum(-1) == 0).sum())
    if empty:
        raise ValueError(
            f"{empty} of the {y.shape[0]} fits over {pooled} have no valid sample (NaN "
            "observations or ensembles everywhere); select the points with data first"
        )
    y, m, v = (torch.where(valid, x, 0.0) for x in (y, m, v))
    count = valid.sum(-1, keepdim=True)
    loc = y.sum(-1, keepdim=True) / count
    scale = torch.sqrt(torch.where(valid, (y - loc) ** 2, 0.0).sum(-1, keepdim=True) / count)
    scale = torch.where(scale > 0, scale, 1.0)
    with torch_threads(threads):
        standard = _fit_standardised(
            (y - loc) / scale, (m - loc) / scale, v / scale**2, valid, max_iter
        )
    a, b, c, d = standard.unbind(-1)
    loc, scale = loc[:, 0], scale[:, 0]
    values = {"a": loc * (1 - b) + scale * a, "b": b, "c": scale**2 * c, "d": d}
    shape = [observations.sizes[k] for k in kept]
    coords = {k: observations[k] for k in kept if k in observations.coords}
    units = observations.attrs.get("units")
    ds = xr.Dataset(
        {
            name: xr.DataArray(value.numpy().reshape(shape), dims=kept, coords=coords)
            for name, value in values.items()
        }
    )
    meaning = {
        "a": ("EMOS intercept of the mean", units),
        "b": ("EMOS weight of the ensemble mean", "1"),
        "c": ("EMOS variance intercept", None if units is None else f"({units})^2"),
        "d": ("EMOS weight of the ensemble variance", "1"),
    }
    for name, (long_name, unit) in meaning.items():
        ds[name].attrs = {"long_name": long_name, **({"units": unit} if unit else {})}
    ds.attrs = {"pooled_over": [str(p) for p in pooled], "member_dim": member_dim}
    return ds


def emos_predict(
    coefficients: xr.Dataset, forecasts: xr.DataArray, *, member_dim: str = "member"
) -> xr.Dataset:
    """The EMOS forecast ``mu`` and ``sigma`` of an ensemble.

    Args:
        coefficients: :func:`fit_emos`'s result; its dimensions must be among the
            forecasts' (without ``member_dim``), on the same coordinates.
        forecasts: Ensemble with ``member_dim`` (at least two members).
        member_dim: Name of the member dimension.

    Returns:
        ``mu`` and ``sigma`` on the forecasts' dimensions without ``member_dim``.

    Raises:
        ValueError: Missing coefficients, coefficients over dimensions or labels that the
            forecasts lack, or fewer than two members.
    """
    missing = [name for name in COEFFICIENTS if name not in coefficients.data_vars]
    if missing:
        raise ValueError(f"coefficients lack {missing}; expected fit_emos's a, b, c, d")
    if member_dim not in forecasts.dims or forecasts.sizes[member_dim] < 2:
        raise ValueError(
            f"forecasts need a member dimension {member_dim!r} with at least two members; "
            f"they have {dict(forecasts.sizes)}"
        )
    mean, var = _moments(forecasts, member_dim)
    coef = check_parameter("coefficients", coefficients[list(COEFFICIENTS)], mean)
    mu = (coef["a"] + coef["b"] * mean).transpose(*mean.dims)
    sigma = ((coef["c"] + coef["d"] * var) ** 0.5).transpose(*mean.dims)
    units = forecasts.attrs.get("units")
    unit = {"units": units} if units else {}
    return xr.Dataset(
        {
            "mu": mu.assign_attrs(long_name="EMOS mean", **unit),
            "sigma": sigma.assign_attrs(long_name="EMOS standard deviation", **unit),
        }
    )


def pack_coefficients(fits: Mapping[str, xr.Dataset]) -> xr.Dataset:
    """Several variables' :func:`fit_emos` results in one dataset, each on its own dims.

    Variable ``v``'s coefficient ``a`` is ``"v.a"``: a surface field's fits keep their
    dims beside a levelled field's (nothing is repeated along ``level``).

    Raises:
        ValueError: No fit, a fit without ``a, b, c, d``, or fits whose shared dims have
            other coordinates.
    """
    if not fits:
        raise ValueError("no EMOS fit to pack")
    parts = []
    for var, fit in fits.items():
        missing = [name for name in COEFFICIENTS if name not in fit.data_vars]
        if missing:
            raise ValueError(f"the EMOS fit of {var!r} lacks {missing}; expected fit_emos's result")
        parts.append(
            xr.Dataset(
                {
                    f"{var}.{name}": fit[name].assign_attrs(variable=var, coefficient=name)
                    for name in COEFFICIENTS
                }
            )
        )
    try:
        packed = xr.merge(parts, join="exact", combine_attrs="override")
    except ValueError as error:
        raise ValueError(
            f"the EMOS fits of {list(fits)} have other coordinates on a shared dim: {error}"
        ) from error
    packed.attrs = {"layout": PACKED_LAYOUT}
    return packed


def unpack_coefficients(packed: xr.Dataset, variable: str) -> xr.Dataset:
    """``variable``'s coefficients from :func:`pack_coefficients`' dataset, on its own dims.

    Raises:
        ValueError: ``packed`` is not in the packed layout (e.g. an older ``emos.nc`` that
            stacked every variable along a ``variable`` dim), or has no fit of ``variable``.
    """
    if packed.attrs.get("layout") != PACKED_LAYOUT:
        raise ValueError(
            "the EMOS coefficients are not in the per-variable layout (an older emos.nc stacked "
            "every variable along a 'variable' dim and repeated a surface field's fits along "
            f"'level'; its dims: {dict(packed.sizes)}): refit EMOS"
        )
    names = [f"{variable}.{name}" for name in COEFFICIENTS]
    if any(name not in packed.data_vars for name in names):
        stored = sorted({str(name).rsplit(".", 1)[0] for name in packed.data_vars})
        raise ValueError(f"no EMOS fit of {variable!r}; the coefficients hold {stored}")
    return xr.Dataset({name: packed[full] for name, full in zip(COEFFICIENTS, names, strict=True)})


def fit_run(train: xr.Dataset, config: PostprocessConfig) -> xr.Dataset:
    """A run's fits, packed: one per variable, level and lead time, pooled over dates and grid.

    Each fits the first ``config.members`` members on every start date of ``train``.
    """
    fits = {}
    for var in config.variables or ():
        truth = train[f"{var}_truth"]
        pooled = [d for d in truth.dims if d not in ("lead_time", *config.channel_dims)]
        forecasts = train[var].isel(member=slice(config.members))
        fits[var] = fit_emos(truth, forecasts, dim=pooled)
    return pack_coefficients(fits)


def _own_coefficients(
    packed: xr.Dataset, var: str, config: PostprocessConfig, test: xr.Dataset, *, source: Path
) -> xr.Dataset:
    """``var``'s coefficients, on the channel dims it had in training.

    A run's ``emos.nc`` holds each variable's fits on its own dims
    (:func:`pack_coefficients`): a surface field's have no ``level``.

    Raises:
        ValueError: An ``emos.nc`` of the older layout, no fit of ``var``, or ``var`` with
            other channel dims in ``test`` than in training.
    """
    try:
        coef = unpack_coefficients(packed, var)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from error
    trained = {str(d) for d in coef.dims if d in config.channel_dims}
    own = {d for d in config.channel_dims if d in test[var].dims}
    if own != trained:
        raise ValueError(
            f"{var!r} had channel dims {sorted(trained)} in training and has {sorted(own)} in "
            "the test data; EMOS coefficients are not broadcast to other dims"
        )
    return coef


def forecast(
    packed: xr.Dataset, config: PostprocessConfig, test: xr.Dataset, *, source: Path
) -> dict[str, tuple[xr.DataArray, xr.DataArray]]:
    """A run's ``(mu, sigma)`` of every variable on ``test``, from its packed coefficients.

    Args:
        packed: The run's coefficients (its ``emos.nc``, :func:`fit_run`).
        config: The run's configuration.
        test: The data, on the run's grid.
        source: The coefficients' file, for messages.

    Raises:
        ValueError: As :func:`_own_coefficients`.
    """
    out = {}
    for var in config.variables or ():
        coef = _own_coefficients(packed, var, config, test, source=source)
        if "lead_time" in coef.dims:  # the data may hold some of the run's lead times
            coef = coef.sel(lead_time=test["lead_time"].values)
        predicted = emos_predict(coef, test[var].isel(member=slice(config.members)))
        out[var] = (predicted["mu"], predicted["sigma"])
    return out
