"""The deep post-processors' loss scale: the raw ensemble's CRPS per channel and lead time.

Trained on the plain mean CRPS over channels and lead times, a post-processor spends
its capacity where the CRPS is large (the late lead times): at lead 0, where the raw
ensemble's CRPS is a fraction of day 6's, a correction that makes the forecast worse
costs almost nothing in the loss. ``sciml weather evaluate``'s per-row skill weighs
every (variable, level, lead time) row alike instead. Dividing each channel's and lead
time's CRPS by the raw full ensemble's mean CRPS of that row on the training dates
(:func:`raw_crps_scale`) makes the loss the CRPS relative to the raw ensemble (1 = the
raw full ensemble), every row counting alike: its minimum is the forecast with the best
mean per-row skill on the training dates.
"""

from __future__ import annotations

from collections.abc import Sequence

import dask
import numpy as np
import pandas as pd
import xarray as xr

from sciml.datasets.channels import NormStats, channel_arrays
from sciml.weather.metrics import crps_ensemble
from sciml.weather.options import LOSS_SCALES

__all__ = ["LOSS_SCALES", "raw_crps_scale"]


def raw_crps_scale(
    ds: xr.Dataset,
    variables: Sequence[str],
    *,
    stats: NormStats,
    channel_dims: Sequence[str] = ("level",),
    member_dim: str = "member",
) -> xr.DataArray:
    """The raw full ensemble's mean CRPS of every channel and lead time, in normalised units.

    Args:
        ds: Ensemble with the ``variables`` (with ``member_dim`` and ``lead_time``) and
            their ``<variable>_truth`` (the training dates).
        variables: Forecast variables.
        stats: The channels' statistics; each channel's CRPS is divided by its standard
            deviation, as the deep models see normalised values.
        channel_dims: Dims folded into channels.
        member_dim: Name of the member dimension.

    Returns:
        The standard ensemble CRPS (all members) averaged over every dim but the channel
        and ``lead_time``: dims ``(channel, lead_time)``, channels named and ordered as
        in ``stats``.

    Raises:
        ValueError: A variable without ``lead_time``, channels other than ``stats``'s, or a
            row whose CRPS is not positive and finite (it cannot scale a loss).
    """
    scores = {}
    for var in variables:
        truth = ds[f"{var}_truth"]
        if "lead_time" not in truth.dims:
            raise ValueError(f"variable {var!r} has no lead_time dim: {truth.dims}")
        pooled = [d for d in truth.dims if d not in ("lead_time", *channel_dims)]
        scores[var] = crps_ensemble(truth, ds[var], member_dim=member_dim, dim=pooled)
    channels = channel_arrays(xr.Dataset(scores), list(variables), channel_dims)
    names = tuple(name for name, _ in channels)
    if names != stats.channels:
        raise ValueError(f"the data's channels {names} are not the statistics' {stats.channels}")
    computed = dask.compute(*(array for _, array in channels))
    scale = xr.concat(
        [array / std for array, std in zip(computed, stats.std, strict=True)],
        dim=xr.DataArray(list(names), dims="channel", name="channel"),
    ).transpose("channel", "lead_time")
    bad = np.argwhere(~(np.isfinite(scale.values) & (scale.values > 0)))
    if bad.size:
        leads = pd.Index(scale["lead_time"].values).astype(str)
        rows = [(names[c], leads[t]) for c, t in bad]
        raise ValueError(
            f"the raw ensemble's CRPS must be positive and finite to scale the loss; "
            f"it is not for (channel, lead_time) {rows}"
        )
    return scale.rename("raw_crps")
