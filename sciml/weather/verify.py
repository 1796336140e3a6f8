"""Score summaries of an ensemble: against a truth, or each member against the others.

Real ensemble samples (like the bundled ERA5 file) ship without a separate truth, so
:func:`leave_one_out_scores` verifies each member in turn against the ensemble of the
remaining members: for an ensemble whose members are exchangeable this is what a reliable
(M - 1)-member forecast would score.

Two leave-one-out statistics are identities and carry no information, so they are not
reported: pooled over the verifying members the spread-skill ratio is exactly 1
(``x_k - mean_{-k} = M/(M-1) (x_k - mean)``), and the pooled rank histogram is flat up
to ties broken at random (the members' ranks among each other are a permutation). Per
verifying member the rank histogram does say something (e.g. whether a control member
sits in the middle).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from sciml.weather import metrics
from sciml.weather.metrics import Dim

__all__ = ["leave_one_out_scores", "score_summary"]


def score_summary(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """CRPS (standard and fair), spread, RMSE of the mean and spread-skill ratios.

    Args:
        observations: Verifying values, without ``member_dim``.
        forecasts: Ensemble with ``member_dim``.
        member_dim: Name of the member dimension.
        dim: Dimensions to average over (None: all).
        weights: Weights for the averages (e.g. :func:`metrics.latitude_weights`).

    Returns:
        Dataset with ``crps``, ``crps_fair``, ``spread``, ``rmse``, ``spread_skill`` (with the
        (M+1)/M correction) and ``spread_skill_raw``.
    """
    valid = observations.notnull()
    args = (member_dim, dim)
    return xr.Dataset(
        {
            "crps": metrics.crps_ensemble(observations, forecasts, *args, weights=weights),
            "crps_fair": metrics.crps_ensemble(
                observations, forecasts, *args, fair=True, weights=weights
            ),
            "spread": metrics.ensemble_spread(forecasts.where(valid), *args, weights=weights),
            "rmse": metrics.ensemble_mean_rmse(observations, forecasts, *args, weights=weights),
            "spread_skill": metrics.spread_skill_ratio(
                observations, forecasts, *args, weights=weights
            ),
            "spread_skill_raw": metrics.spread_skill_ratio(
                observations, forecasts, *args, weights=weights, corrected=False
            ),
        }
    )


def leave_one_out_scores(
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    dim: Dim = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """Scores of each member against the ensemble of the others, pooled over the members.

    Returns:
        Dataset with ``crps`` and ``crps_fair`` (averaged over the verifying members), and
        ``spread`` and ``rmse`` (pooled as root-mean-squares; their corrected ratio is 1 by
        construction, see the module docstring).
    """
    members = forecasts.sizes[member_dim]
    if members < 3:
        raise ValueError(f"leave-one-out scoring needs at least 3 members, got {members}")
    parts = [
        score_summary(
            forecasts.isel({member_dim: k}, drop=True),
            forecasts.drop_isel({member_dim: k}),
            member_dim=member_dim,
            dim=dim,
            weights=weights,
        )
        for k in range(members)
    ]
    stacked = xr.concat(parts, dim="_verifying_member")
    pooled = stacked[["crps", "crps_fair"]].mean("_verifying_member")
    pooled["spread"] = np.sqrt((stacked["spread"] ** 2).mean("_verifying_member"))
    pooled["rmse"] = np.sqrt((stacked["rmse"] ** 2).mean("_verifying_member"))
    return pooled
