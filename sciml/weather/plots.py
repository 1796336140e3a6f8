"""Figures for ensemble verification: maps, rank histograms, spread-skill, scores by lead.

Every function returns a :class:`matplotlib.figure.Figure` (a notebook shows it, a script
saves it) and computes what it needs from labelled arrays.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from sciml.weather import metrics

__all__ = [
    "ensemble_maps",
    "format_value",
    "rank_histogram_plot",
    "reliability_histograms",
    "scores_by_lead",
    "spread_skill_plot",
]

#: Most panels in a row of a figure with one panel per coordinate value.
_MAX_COLUMNS = 4


def _format_seconds(seconds: int) -> str:
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    parts += [f"{n} {unit}" for n, unit in ((hours, "h"), (minutes, "min"), (seconds, "s")) if n]
    return sign + (" ".join(parts) or "0 h")


def format_value(value: object) -> str:
    """A coordinate value as a reader expects it in a title or a legend.

    Timedeltas read ``1 day 6 h`` (not ``108000000000000 nanoseconds``), datetimes
    ``2000-01-03`` or ``2000-01-03 06:00``; anything else as ``str``.
    """
    array = np.asarray(value)
    if array.ndim == 0 and np.issubdtype(array.dtype, np.timedelta64):
        return "NaT" if np.isnat(array) else _format_seconds(int(array / np.timedelta64(1, "s")))
    if array.ndim == 0 and np.issubdtype(array.dtype, np.datetime64):
        if np.isnat(array):
            return "NaT"
        minutes = str(np.datetime_as_string(array.astype("datetime64[m]")))
        return minutes[:10] if minutes.endswith("T00:00") else minutes.replace("T", " ")
    return str(array.item() if array.ndim == 0 else value)


def _one_unit_labels(values: np.ndarray) -> list[str]:
    """Labels of coordinate values; timedeltas all in days or all in hours where they allow it.

    ``[0, 1, 2]`` days read ``0 days``, ``1 day``, ``2 days`` (not ``0 h``, ``1 day``), and
    ``[0, 6, 30]`` hours read ``0 h``, ``6 h``, ``30 h``; other values as :func:`format_value`.
    """
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.timedelta64) or np.isnat(values).any():
        return [format_value(v) for v in values]
    seconds = (values / np.timedelta64(1, "s")).astype(np.int64)
    if np.all(seconds % 86400 == 0):
        return [f"{d} day{'s' if abs(d) != 1 else ''}" for d in seconds // 86400]
    if np.all(seconds % 3600 == 0):
        return [f"{h} h" for h in seconds // 3600]
    return [format_value(v) for v in values]


def _robust_limits(values: np.ndarray) -> tuple[float, float]:
    """The 2nd and 98th percentiles of the finite ``values`` (xarray's ``robust=True``).

    A colour scale spanning these is not set by a few outlying pixels; the colour bar's
    arrows mark the clipped ends.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    low, high = (float(v) for v in np.percentile(finite, [2, 98]))
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def _require_dims(da: xr.DataArray, dims: tuple[str, ...], what: str) -> None:
    if set(da.dims) != set(dims):
        raise ValueError(f"{what} must have dimensions {dims} (select the rest), got {da.dims}")


def ensemble_maps(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    title: str | None = None,
) -> Figure:
    """Maps of the ensemble mean, the ensemble spread and the error of the mean.

    Each colour scale spans the field's 2nd to 98th percentile (the error's symmetric
    about 0), so that a few outlying pixels do not wash out the map.

    Args:
        observations: Verifying field with dimensions ``(lat, lon)``.
        forecasts: Ensemble with dimensions ``(member_dim, lat, lon)``.
        member_dim: Name of the member dimension.
        title: Figure title.
    """
    _require_dims(observations, ("lat", "lon"), "observations")
    _require_dims(forecasts, (member_dim, "lat", "lon"), "forecasts")
    metrics.ensemble_mean_rmse(observations, forecasts, member_dim=member_dim, dim=[])  # same grid
    mean = forecasts.mean(member_dim)
    spread = forecasts.std(member_dim, ddof=1)
    error = mean - observations
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), constrained_layout=True)
    limit = _robust_limits(np.abs(error.values))[1]
    panels: list[tuple[xr.DataArray, str, str, tuple[float, float]]] = [
        (mean, "ensemble mean", "viridis", _robust_limits(mean.values)),
        (spread, "ensemble spread", "magma", (0.0, _robust_limits(spread.values)[1])),
        (error, "error of the mean", "RdBu_r", (-limit, limit)),
    ]
    units = observations.attrs.get("units", "")
    for ax, (field, label, cmap, (low, high)) in zip(axes, panels, strict=True):
        image = ax.pcolormesh(
            field["lon"],
            field["lat"],
            field.transpose("lat", "lon"),
            cmap=cmap,
            shading="auto",
            vmin=low,
            vmax=high,
        )
        fig.colorbar(image, ax=ax, label=units, extend="both")
        ax.set(title=label, xlabel="longitude", ylabel="latitude")
    if title:
        fig.suptitle(title)
    return fig


def rank_histogram_plot(histogram: xr.DataArray, *, title: str | None = None) -> Figure:
    """Bar chart of a rank histogram (from :func:`sciml.weather.metrics.rank_histogram`).

    Bars are relative frequencies; the dashed line is the flat histogram of a reliable
    ensemble. An extra dimension (e.g. ``lead_time``) gives one panel per value, at most
    four to a row.
    """
    if "rank" not in histogram.dims:
        raise ValueError(f"histogram needs a 'rank' dimension, got {histogram.dims}")
    others = [dim for dim in histogram.dims if dim != "rank"]
    if len(others) > 1:
        raise ValueError(f"at most one dimension besides 'rank', got {others}")
    panels = histogram.transpose(*others, "rank") if others else histogram.expand_dims("_")
    labels = (
        [f"{others[0]} = {v}" for v in _one_unit_labels(panels[others[0]].values)]
        if others
        else [""]
    )
    columns = min(len(labels), _MAX_COLUMNS)
    rows = -(-len(labels) // columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(3.2 * columns + 0.8, 2.6 * rows + 0.6),
        sharey=True,
        squeeze=False,
        constrained_layout=True,
    )
    for ax, counts, label in zip(axes.flat, panels, labels, strict=False):
        freq = counts / counts.sum()
        ax.bar(counts["rank"], freq, color="tab:blue", width=0.85)
        ax.axhline(1 / counts.sizes["rank"], color="k", linestyle="--", linewidth=1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="rank of the observation", title=label)
    for ax in axes.flat[len(labels) :]:
        ax.remove()
    for row in axes:
        row[0].set_ylabel("relative frequency")
    if title:
        fig.suptitle(title)
    return fig


def spread_skill_plot(
    observations: xr.DataArray,
    forecasts: xr.DataArray,
    *,
    member_dim: str = "member",
    bins: int = 10,
    title: str | None = None,
) -> Figure:
    """Binned spread-skill diagram: RMSE of the ensemble mean against the predicted spread.

    Points are pooled, sorted by the ensemble spread (corrected by ``sqrt((M+1)/M)``) into
    ``bins`` equally populated bins; a reliable ensemble lies on the diagonal.
    """
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    error = metrics.ensemble_mean_rmse(observations, forecasts, member_dim=member_dim, dim=[])
    members = forecasts.sizes[member_dim]
    spread = metrics.ensemble_spread(forecasts, member_dim=member_dim, dim=[]) * np.sqrt(
        (members + 1) / members
    )
    spread = spread.reindex_like(error).transpose(*error.dims)  # same labels, error's order
    s, e = np.ravel(spread.values), np.ravel(error.values)
    valid = np.isfinite(s) & np.isfinite(e)
    if valid.sum() < bins:
        raise ValueError(f"need at least {bins} valid points for {bins} bins, got {valid.sum()}")
    order = np.argsort(s[valid])
    groups = np.array_split(order, bins)
    x = np.array([np.sqrt(np.mean(s[valid][g] ** 2)) for g in groups])
    y = np.array([np.sqrt(np.mean(e[valid][g] ** 2)) for g in groups])
    fig, ax = plt.subplots(figsize=(6, 4.2), constrained_layout=True)
    top = float(max(x.max(), y.max())) * 1.05
    ax.plot([0, top], [0, top], "k--", linewidth=1, label="reliable")
    ax.plot(x, y, "o-", color="tab:red", label="binned points")
    units = f" ({observations.attrs['units']})" if "units" in observations.attrs else ""
    ax.set(
        xlabel=f"ensemble spread{units}",
        ylabel=f"RMSE of the mean{units}",
        xlim=(0, top),
        ylim=(0, top),
        title=title or "spread-skill",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig


def scores_by_lead(
    scores: Mapping[str, xr.DataArray],
    *,
    lead_dim: str = "lead_time",
    ylabel: str = "score",
    title: str | None = None,
) -> Figure:
    """Line plot of one or more scores against lead time (e.g. CRPS standard and fair).

    Args:
        scores: Label -> 1-D score along ``lead_dim``.
        lead_dim: Lead-time dimension (timedelta values are shown in days).
        ylabel: Y-axis label.
        title: Axes title.
    """
    fig, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
    for label, score in scores.items():
        _require_dims(score, (lead_dim,), f"score {label!r}")
        lead = score[lead_dim].values
        if np.issubdtype(lead.dtype, np.timedelta64):
            lead = lead / np.timedelta64(1, "D")
        ax.plot(lead, score.values, "o-", label=label)
    ax.set(xlabel="lead time (days)", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig


def reliability_histograms(
    histograms: Mapping[str, xr.DataArray], *, title: str | None = None
) -> Figure:
    """Rank or PIT histograms of one model: a row per variable (and level), a column per lead.

    Args:
        histograms: Variable -> counts along ``rank`` (a rank histogram) or ``bin`` (a PIT
            histogram), with ``lead_time`` and at most one more dimension (e.g. ``level``),
            as :attr:`sciml.weather.postprocess.evaluate.Evaluation.histograms` holds them.
        title: Figure title.

    Bars are relative frequencies; the dashed line is the flat histogram of a reliable
    forecast.
    """
    rows: list[tuple[str, xr.DataArray, str]] = []
    for var, hist in histograms.items():
        kind = next((d for d in ("rank", "bin") if d in hist.dims), None)
        others = [d for d in hist.dims if d not in (kind, "lead_time")]
        if kind is None or "lead_time" not in hist.dims or len(others) > 1:
            raise ValueError(
                f"histogram of {var} needs 'rank' or 'bin', 'lead_time' and at most one more "
                f"dimension, got {hist.dims}"
            )
        hist, xlabel = hist.rename({kind: "_bin"}), "rank" if kind == "rank" else "PIT"
        if not others:
            rows.append((var, hist, xlabel))
            continue
        for value in hist[others[0]].values:
            label = f"{var}, {others[0]} {format_value(value)}"
            rows.append((label, hist.sel({others[0]: value}), xlabel))
    if not rows:
        raise ValueError("no histogram to plot")
    leads = rows[0][1]["lead_time"].values
    lead_labels = _one_unit_labels(leads)
    fig, axes = plt.subplots(
        len(rows),
        len(leads),
        figsize=(2.4 * len(leads) + 1, 1.9 * len(rows) + 0.6),
        sharey=True,
        squeeze=False,
        constrained_layout=True,
    )
    for axes_row, (label, hist, xlabel) in zip(axes, rows, strict=True):
        for ax, lead, lead_label in zip(axes_row, leads, lead_labels, strict=True):
            counts = hist.sel(lead_time=lead)
            if xlabel == "rank":  # ranks 1..M+1, whole numbers
                ax.bar(np.arange(1, counts.size + 1), counts / counts.sum(), width=0.85)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            else:  # equal PIT bins on [0, 1], drawn at their centres
                centres = (np.arange(counts.size) + 0.5) / counts.size
                ax.bar(centres, counts / counts.sum(), width=0.85 / counts.size)
                ax.set_xlim(0, 1)
            ax.axhline(1 / counts.size, color="k", linestyle="--", linewidth=1)
            ax.set_title(f"{label}, lead {lead_label}", fontsize=8)
            ax.set_xlabel(xlabel, fontsize=8)
        axes_row[0].set_ylabel("relative frequency")
    if title:
        fig.suptitle(title)
    return fig
