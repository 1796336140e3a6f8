"""The channels of an xarray dataset and their normalisation statistics.

Variables (optionally split along dims such as ``level``) become named
channels (:func:`channel_arrays`, after :func:`check_names`), and
:func:`compute_stats` gives each channel's mean and standard deviation as
:class:`NormStats`, in one lazy Dask pass. :mod:`sciml.xrdata` re-exports
``NormStats`` and ``compute_stats``; its datasets read these channels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dask
import xarray as xr

__all__ = ["NormStats", "channel_arrays", "check_names", "compute_stats"]


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

    def to_json(self, path: Path | str) -> None:
        """Save as JSON (atomically)."""
        from sciml.io_utils import atomic_write_text

        atomic_write_text(path, json.dumps(self.__dict__, indent=2))

    @classmethod
    def from_json(cls, path: Path | str) -> NormStats:
        """Load statistics saved by :meth:`to_json`."""
        raw = json.loads(Path(path).read_text())
        missing = [key for key in ("channels", "mean", "std") if key not in raw]
        if not isinstance(raw, dict) or missing:
            raise ValueError(f"{path} is not a NormStats file (missing {missing or 'everything'})")
        return cls(tuple(raw["channels"]), tuple(raw["mean"]), tuple(raw["std"]))


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
            name = var + "".join(f"[{d}={v}]" for d, v in zip(own, label, strict=True))
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
