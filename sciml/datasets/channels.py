"""The channels of an xarray dataset and their normalisation statistics.

Variables (optionally split along dims such as ``level``) become named
channels (:func:`channel_arrays`, after :func:`check_names`), and
:func:`compute_stats` gives each channel's mean and standard deviation as
:class:`NormStats`, in one lazy Dask pass. :func:`normalise` applies them to an
xarray dataset lazily (and :func:`denormalise` undoes it), channel by channel,
matched by name. :mod:`sciml.datasets.xarray_dataset` re-exports ``NormStats``,
``compute_stats``, ``normalise`` and ``denormalise``; its datasets read these channels.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import numpy as np
import xarray as xr

__all__ = [
    "NormStats",
    "channel_arrays",
    "channel_name",
    "check_names",
    "compute_stats",
    "denormalise",
    "normalise",
]


@dataclass(frozen=True)
class NormStats:
    """Per-channel mean and standard deviation, in the dataset's channel order."""

    channels: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        """Require one finite mean and one positive std per distinct channel."""
        sizes = (len(self.channels), len(self.mean), len(self.std))
        if len(set(sizes)) != 1 or sizes[0] == 0:
            raise ValueError(
                f"NormStats needs one mean and one std per channel, got {sizes[0]} channels, "
                f"{sizes[1]} means and {sizes[2]} stds"
            )
        if len(set(self.channels)) != len(self.channels):
            raise ValueError(f"NormStats channels repeat a name: {self.channels}")
        bad = [
            name
            for name, m, sd in zip(self.channels, self.mean, self.std, strict=True)
            if not (math.isfinite(m) and math.isfinite(sd) and sd > 0)
        ]
        if bad:
            raise ValueError(
                f"NormStats for channels {bad} have a non-finite mean or a std that is not > 0"
            )

    def record(self) -> dict[str, list[Any]]:
        """As plain JSON data (what :meth:`to_json` writes, and a run record keeps)."""
        return {"channels": list(self.channels), "mean": list(self.mean), "std": list(self.std)}

    def to_json(self, path: Path | str) -> None:
        """Save as JSON (atomically)."""
        from sciml.io_utils import atomic_write_text

        atomic_write_text(path, json.dumps(self.record(), indent=2))

    @classmethod
    def from_record(cls, raw: Any, where: str) -> NormStats:
        """Statistics from :meth:`record`'s data, read from ``where`` (named when refused)."""
        found = raw if isinstance(raw, dict) else {}
        missing = [key for key in ("channels", "mean", "std") if key not in found]
        if missing:
            raise ValueError(f"{where} is not a NormStats record (missing {missing})")
        return cls(tuple(raw["channels"]), tuple(raw["mean"]), tuple(raw["std"]))

    @classmethod
    def from_json(cls, path: Path | str) -> NormStats:
        """Load statistics saved by :meth:`to_json`."""
        return cls.from_record(json.loads(Path(path).read_text()), str(path))


def check_names(
    ds: xr.Dataset, variables: Sequence[str], dims: Sequence[str], channel_dims: Sequence[str]
) -> None:
    """Every variable exists and has ``dims``; every channel dim belongs to some variable."""
    if isinstance(variables, str) or not variables:
        raise ValueError(f"variables must be a non-empty list of names, got {variables!r}")
    if len(set(variables)) != len(variables):
        raise ValueError(f"variables repeat a name: {list(variables)}")
    if isinstance(channel_dims, str):
        raise ValueError(f"channel_dims must be a sequence of names, got {channel_dims!r}")
    missing = [v for v in variables if v not in ds.data_vars]
    if missing:
        available = sorted(map(str, ds.data_vars))
        raise KeyError(f"variables {missing} not in the dataset; it has {available}")
    for var in variables:
        absent = [d for d in dims if d not in ds[var].dims]
        if absent:
            raise ValueError(
                f"variable {var!r} has dims {ds[var].dims}, missing {absent} "
                f"(expected every variable to have {tuple(dims)})"
            )
    unused = [d for d in channel_dims if not any(d in ds[v].dims for v in variables)]
    if unused:
        raise ValueError(
            f"channel_dims {unused} are not dims of any of the variables {list(variables)} "
            f"(their dims: { {v: ds[v].dims for v in variables} })"
        )
    both = sorted(set(dims) & set(channel_dims))
    if both:
        raise ValueError(f"dims {both} are given both as sample_dims and as channel_dims")


def channel_name(variable: str, dims: Sequence[str], label: Sequence[Hashable]) -> str:
    """The name of one channel: ``t[level=500]`` for ``t`` at label 500 of dim ``level``."""
    return variable + "".join(f"[{d}={v}]" for d, v in zip(dims, label, strict=True))


def channel_arrays(
    ds: xr.Dataset, variables: Sequence[str], channel_dims: Sequence[str]
) -> list[tuple[str, xr.DataArray]]:
    """Split variables along ``channel_dims`` into one named array per channel."""
    channels: list[tuple[str, xr.DataArray]] = []
    for var in variables:
        array = ds[var]
        own = [d for d in channel_dims if d in array.dims]
        if not own:
            channels.append((var, array))
            continue
        stacked = array.stack(_channel=own)
        for k in range(stacked.sizes["_channel"]):
            label = stacked["_channel"].values[k]
            label = label if isinstance(label, tuple) else (label,)
            name = channel_name(var, own, label)
            channels.append((name, stacked.isel(_channel=k).drop_vars(["_channel", *own])))
    return channels


def compute_stats(
    ds: xr.Dataset, variables: Sequence[str], *, channel_dims: Sequence[str] = ()
) -> NormStats:
    """Mean and standard deviation of every channel, in one lazy Dask pass.

    NaNs are skipped. Raises ``ValueError`` for a channel with zero or
    undefined spread (it cannot be normalised), and for a channel dim that no
    variable has (it would be pooled silently).
    """
    check_names(ds, variables, (), channel_dims)
    channels = channel_arrays(ds, variables, channel_dims)
    moments = [(a.mean(skipna=True), a.std(skipna=True)) for _, a in channels]
    computed = dask.compute(*moments)
    means = tuple(float(m) for m, _ in computed)
    stds = tuple(float(s) for _, s in computed)
    for (name, _), std in zip(channels, stds, strict=True):
        if not math.isfinite(std) or std == 0.0:
            raise ValueError(f"channel {name!r} has standard deviation {std}; cannot normalise it")
    return NormStats(tuple(name for name, _ in channels), means, stds)


def _channel_moments(
    ds: xr.Dataset, variable: str, stats: NormStats, channel_dims: Sequence[str]
) -> tuple[xr.DataArray, xr.DataArray]:
    """Mean and std of ``variable``'s channels, labelled along its channel dims."""
    array = ds[variable]
    own = [d for d in channel_dims if d in array.dims]
    labels = [ds[d].values for d in own]
    index = {name: k for k, name in enumerate(stats.channels)}
    rows = [index[channel_name(variable, own, label)] for label in itertools.product(*labels)]
    shape = tuple(len(values) for values in labels)
    dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.float64
    coords = {d: ds[d] for d in own}

    def table(values: tuple[float, ...]) -> xr.DataArray:
        picked = np.asarray([values[k] for k in rows], dtype=dtype).reshape(shape)
        return xr.DataArray(picked, dims=own, coords=coords)

    return table(stats.mean), table(stats.std)


def _check_channels(ds: xr.Dataset, stats: NormStats, channel_dims: Sequence[str]) -> None:
    """The statistics hold exactly the dataset's channels (in any order)."""
    if not isinstance(stats, NormStats):
        raise TypeError(f"stats must be NormStats, got {type(stats).__name__}")
    variables = [str(name) for name in ds.data_vars]
    check_names(ds, variables, (), channel_dims)
    wanted = []
    for var in variables:
        own = [d for d in channel_dims if d in ds[var].dims]
        labels = itertools.product(*(ds[d].values for d in own))
        wanted += [channel_name(var, own, label) for label in labels]
    missing = [name for name in wanted if name not in stats.channels]
    extra = [name for name in stats.channels if name not in wanted]
    if missing or extra:
        raise ValueError(
            f"the statistics do not match the dataset's channels: no statistics for {missing}, "
            f"statistics for channels the dataset lacks {extra} (select the same variables and "
            "labels, or compute the statistics with the same channel_dims)"
        )


def _rescale(
    ds: xr.Dataset, stats: NormStats, channel_dims: Sequence[str], *, inverse: bool
) -> xr.Dataset:
    _check_channels(ds, stats, channel_dims)
    scaled = {}
    for name in ds.data_vars:
        var = str(name)
        mean, std = _channel_moments(ds, var, stats, channel_dims)
        array = ds[var]
        attrs = dict(array.attrs)
        if inverse:
            result = array * std + mean
            units = attrs.pop("normalised_from_units", None)
            attrs.pop("units", None)
            if units is not None:
                attrs["units"] = units
        else:
            result = (array - mean) / std
            if "units" in attrs:
                attrs["normalised_from_units"] = attrs["units"]
            attrs["units"] = "1"
        result = result.transpose(*array.dims)
        result.attrs = attrs
        scaled[var] = result
    return ds.assign(scaled)


def normalise(ds: xr.Dataset, stats: NormStats, *, channel_dims: Sequence[str] = ()) -> xr.Dataset:
    """``(x - mean) / std`` of every channel of every data variable, lazily.

    Channels are matched by name (``t[level=500]``, see :func:`channel_arrays`), so
    statistics apply whatever the order of the labels. Units become ``"1"`` (the original
    ones are kept in ``normalised_from_units``, which :func:`denormalise` restores).

    Args:
        ds: Dataset; every data variable is normalised.
        stats: Statistics of exactly the dataset's channels (:func:`compute_stats` with the
            same ``channel_dims``).
        channel_dims: Dims along which a variable splits into channels (e.g. ``("level",)``).

    Raises:
        TypeError: ``stats`` is not :class:`NormStats`.
        ValueError: A channel without statistics, or statistics for a channel (a variable,
            or a label) the dataset lacks.
    """
    return _rescale(ds, stats, channel_dims, inverse=False)


def denormalise(
    ds: xr.Dataset, stats: NormStats, *, channel_dims: Sequence[str] = ()
) -> xr.Dataset:
    """The inverse of :func:`normalise`: ``x * std + mean``, lazily, by channel name.

    Raises:
        TypeError: ``stats`` is not :class:`NormStats`.
        ValueError: As :func:`normalise`.
    """
    return _rescale(ds, stats, channel_dims, inverse=True)
