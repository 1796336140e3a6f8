"""Torch samples of ensemble forecasts for post-processing, read lazily from xarray.

:class:`EnsembleDataset` turns a Dask-backed ensemble dataset (the layout of
:mod:`sciml.weather.toy` and :func:`sciml.weather.data.open_ensemble`: variables with
``member``, their verifying values as ``<variable>_truth`` without it) into samples, one per
start date and lead time. Each sample is a dict of tensors:

* ``members``: ``(k, C, lat, lon)``, a subset of ``k`` members, the first ``k`` or ``k``
  drawn at random for every read (augmentation; drawn from torch's generator, which
  :func:`sciml.training.fit` seeds for every batch read in a loader worker);
* ``truth``: ``(C, lat, lon)``, the verifying values;
* ``spread``: ``(C, lat, lon)``, the standard deviation (ddof=1) of the *full* ensemble
  (the target of spread prediction);
* ``static``: ``(S, lat, lon)``, static fields (e.g. ``topography``), when asked for;
* ``lead_time``: the lead time in days (a scalar), when ``lead_time`` is a sample dim with
  a timedelta coordinate (the deep post-processors read it);
* ``crps_scale``: ``(C, 1, 1)``, the loss scale of the sample's lead time per channel,
  when ``crps_scale`` is given (:mod:`sciml.weather.postprocess.loss_scale`);
* ``index``: the sample's flat index (``time`` major, then ``lead_time``);
* ``mask``: ``(C, lat, lon)`` bool, the points where the truth and every member read are
  present, when missing values are masked (``missing="mask"``): there the members, truth,
  spread and static fields hold 0 (the channel's mean, once normalised) instead of NaN.

Channels are the variables split along ``channel_dims`` (``psi[level=1]``, ...), as in
:mod:`sciml.datasets.channels`. Members and truth are normalised with the same per-channel
statistics (those of the forecasts: :func:`~sciml.datasets.channels.compute_stats` of the training
split), the spread is divided by the same standard deviations, the static fields are
standardised by their own. Reads go through :class:`sciml.datasets.xarray_dataset.XarrayDataset`: a
batch is one vectorised selection and one compute per part.

:class:`~sciml.weather.streamed.StreamedEnsemble` serves the same samples from data larger
than memory, a chunk of start dates at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Literal

import numpy as np
import pandas as pd
import torch
import xarray as xr
from torch.utils.data import Dataset

from sciml.datasets.channels import NormStats, compute_stats, normalise
from sciml.datasets.chunked import ChunkLayout
from sciml.datasets.xarray_dataset import XarrayDataset

__all__ = ["EnsembleDataset", "Sample"]

Sample = dict[str, torch.Tensor]


def _truth_view(ds: xr.Dataset, variables: Sequence[str]) -> xr.Dataset:
    missing = [f"{v}_truth" for v in variables if f"{v}_truth" not in ds.data_vars]
    if missing:
        raise KeyError(
            f"no verifying values {missing} in the dataset (the truth of variable v is v_truth); "
            f"it has {sorted(map(str, ds.data_vars))}"
        )
    return ds[[f"{v}_truth" for v in variables]].rename({f"{v}_truth": v for v in variables})


def _per_sample(ds: xr.Dataset, sample_dims: tuple[str, ...], values: np.ndarray) -> np.ndarray:
    """``values`` along ``lead_time`` (first axis) for every sample (flat, row-major)."""
    shape = [ds.sizes[d] for d in sample_dims]
    axis = sample_dims.index("lead_time")
    along = [values.shape[0] if d == axis else 1 for d in range(len(shape))]
    grid = np.broadcast_to(values.reshape(*along, *values.shape[1:]), (*shape, *values.shape[1:]))
    return grid.reshape(-1, *values.shape[1:])


def _lead_days(
    ds: xr.Dataset, sample_dims: tuple[str, ...], dtype: torch.dtype
) -> torch.Tensor | None:
    """Lead time in days of every sample (flat, row-major), or None without a timedelta one."""
    if "lead_time" not in sample_dims or "lead_time" not in ds.coords:
        return None
    lead = ds["lead_time"]
    if lead.ndim != 1 or not np.issubdtype(lead.dtype, np.timedelta64):
        return None
    days = lead.values / np.timedelta64(1, "D")
    if not np.isfinite(days).all():
        raise ValueError(
            f"the lead_time coordinate must hold lead times, got NaT at position(s) "
            f"{np.flatnonzero(~np.isfinite(days)).tolist()}"
        )
    return torch.tensor(_per_sample(ds, sample_dims, days), dtype=dtype)


def _crps_scale(
    ds: xr.Dataset,
    scale: xr.DataArray,
    channels: tuple[str, ...],
    sample_dims: tuple[str, ...],
    dtype: torch.dtype,
) -> torch.Tensor:
    """The ``(C, 1, 1)`` loss scale of every sample (flat), ``scale`` matched by label."""
    if set(scale.dims) != {"channel", "lead_time"}:
        raise ValueError(f"crps_scale must have dims (channel, lead_time), got {scale.dims}")
    if "lead_time" not in sample_dims:
        raise ValueError(f"crps_scale needs lead_time among the sample dims {sample_dims}")
    wanted = {"channel": list(channels), "lead_time": ds["lead_time"].values}
    for dim, labels in wanted.items():
        needed = np.asarray(labels)
        missing = list(pd.Index(needed[~np.isin(needed, scale[dim].values)]).astype(str))
        if missing:
            raise ValueError(f"crps_scale has no {dim} {missing}; it has {scale[dim].values}")
    table = scale.sel(wanted).transpose("lead_time", "channel").values
    return torch.tensor(_per_sample(ds, sample_dims, table), dtype=dtype)[:, :, None, None]


class EnsembleDataset(Dataset[Sample]):
    """Samples of ``k`` members, the truth, the full ensemble's spread and static fields.

    Args:
        ds: Dataset with the ``variables`` (with ``member_dim``) and ``<variable>_truth``.
        variables: Forecast variables, in channel order.
        members: ``k``, the members in each sample (1 <= k <= the ensemble size).
        choice: ``"first"`` (members ``0..k-1``, in order) or ``"random"`` (``k`` distinct
            members drawn for every read).
        stats: Per-channel statistics of the forecasts (``"compute"``: from ``ds``; compute
            them on the training split and pass them to the others).
        channel_dims: Dims folded into channels (e.g. ``("level",)``).
        static: Static variables (no sample dims), e.g. ``("topography",)``.
        crps_scale: The loss scale per ``(channel, lead_time)``
            (:func:`~sciml.weather.postprocess.loss_scale.raw_crps_scale`), matched by label.
        member_dim: Name of the member dimension.
        sample_dims: Dims whose combinations are the samples.
        dtype: Floating-point dtype of the tensors.
        missing: ``"refuse"`` (a read of a missing (NaN) value raises) or ``"mask"``
            (missing values read as 0, and each sample's ``mask`` marks the points where
            nothing is missing).

    Raises:
        KeyError: A variable, its truth or a static field is missing.
        ValueError: ``members`` or ``choice`` out of range, a static field with sample
            dims, statistics for other channels, or a ``crps_scale`` without a channel or
            lead time of the data.
    """

    def __init__(
        self,
        ds: xr.Dataset,
        variables: Sequence[str],
        *,
        members: int,
        choice: Literal["first", "random"] = "first",
        stats: NormStats | Literal["compute"] = "compute",
        channel_dims: Sequence[str] = ("level",),
        static: Sequence[str] = (),
        crps_scale: xr.DataArray | None = None,
        member_dim: str = "member",
        sample_dims: Sequence[str] = ("time", "lead_time"),
        dtype: torch.dtype = torch.float32,
        missing: Literal["refuse", "mask"] = "refuse",
    ) -> None:
        """Check the options and prepare the lazy readers (arguments: see the class)."""
        if member_dim not in ds.dims:
            raise ValueError(
                f"the dataset has no member dimension {member_dim!r}: {dict(ds.sizes)}"
            )
        size = ds.sizes[member_dim]
        if isinstance(members, bool) or not isinstance(members, int) or not 1 <= members <= size:
            raise ValueError(f"members must be an integer in [1, {size}], got {members!r}")
        if choice not in ("first", "random"):
            raise ValueError(f"choice must be 'first' or 'random', got {choice!r}")
        if missing not in ("refuse", "mask"):
            raise ValueError(f"missing must be 'refuse' or 'mask', got {missing!r}")
        variables, sample_dims = list(variables), tuple(sample_dims)
        if isinstance(stats, str):
            if stats != "compute":
                raise ValueError(f"stats must be NormStats or 'compute', got {stats!r}")
            stats = compute_stats(ds, variables, channel_dims=channel_dims)
        self.masked = missing == "mask"
        #: The chunks :func:`sciml.training.fit` orders the samples by (:func:`chunk_layout`;
        #: ``None``: a plain permutation).
        self.chunk_layout: ChunkLayout | None = None
        reader = partial(
            XarrayDataset, channel_dims=channel_dims, dtype=dtype, allow_nan=self.masked
        )
        self.members = members
        self.choice = choice
        self.stats = stats
        self._ensemble = reader(ds, variables, sample_dims=(*sample_dims, member_dim), stats=stats)
        self._truth = reader(
            _truth_view(ds, variables), variables, sample_dims=sample_dims, stats=stats
        )
        spread = ds[variables].std(member_dim, ddof=1, keep_attrs=True)
        self._spread = reader(spread, variables, sample_dims=sample_dims)
        self._size = size
        self._scale = torch.tensor(stats.std, dtype=dtype)[:, None, None]
        self.static = self._static_fields(ds, list(static), sample_dims, member_dim, dtype)
        if self.static is not None and self.masked:
            self.static = self.static.nan_to_num(nan=0.0)
        self._lead_days = _lead_days(ds, sample_dims, dtype)
        self._crps_scale = (
            None
            if crps_scale is None
            else _crps_scale(ds, crps_scale, self.channels, sample_dims, dtype)
        )

    @staticmethod
    def _static_fields(
        ds: xr.Dataset,
        names: list[str],
        sample_dims: tuple[str, ...],
        member_dim: str,
        dtype: torch.dtype,
    ) -> torch.Tensor | None:
        if not names:
            return None
        missing = [name for name in names if name not in ds.data_vars]
        if missing:
            raise KeyError(f"static fields {missing} not in the dataset")
        for name in names:
            varying = [d for d in ds[name].dims if d in (*sample_dims, member_dim)]
            if varying:
                raise ValueError(f"static field {name!r} varies along {varying}")
        fields = ds[names]
        scaled = normalise(fields, compute_stats(fields, names)).compute()
        return torch.from_numpy(np.stack([scaled[name].values for name in names])).to(dtype)

    @property
    def channels(self) -> tuple[str, ...]:
        """Channel names, e.g. ``("psi[level=1]", "psi[level=2]")``."""
        return self._truth.channels

    def __len__(self) -> int:
        """Number of samples (start dates x lead times)."""
        return len(self._truth)

    def _member_indices(self, count: int) -> torch.Tensor:
        if self.choice == "first":
            return torch.arange(self.members).expand(count, -1)
        return torch.stack([torch.randperm(self._size)[: self.members] for _ in range(count)])

    def __getitems__(self, indices: list[int]) -> list[Sample]:
        """A batch of samples, each part read in one go."""
        return self.read(indices, self._member_indices(len(indices)))

    def read(self, indices: list[int], chosen: torch.Tensor) -> list[Sample]:
        """The samples at ``indices`` with the members ``chosen`` (one row per sample)."""
        if any(not -len(self) <= i < len(self) for i in indices):
            raise IndexError(f"sample index out of range for {len(self)} samples: {indices}")
        flat = [i % len(self) for i in indices]
        return self.assemble(flat, *self.fetch(flat, chosen))

    def fetch(
        self, flat: list[int], chosen: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The normalised members ``chosen``, truth and spread of samples ``flat``, batched."""
        rows = (torch.tensor(flat)[:, None] * self._size + chosen).reshape(-1).tolist()
        ensemble = torch.stack(self._ensemble.__getitems__(rows))
        ensemble = ensemble.reshape(len(flat), chosen.shape[1], *ensemble.shape[1:])
        truth = torch.stack(self._truth.__getitems__(flat))
        spread = torch.stack(self._spread.__getitems__(flat))
        return ensemble, truth, spread

    def assemble(
        self, flat: list[int], ensemble: torch.Tensor, truth: torch.Tensor, spread: torch.Tensor
    ) -> list[Sample]:
        """The samples ``flat`` of what :meth:`fetch` read: masks, static fields, lead times."""
        mask = None
        if self.masked:
            mask = truth.isfinite() & ensemble.isfinite().all(dim=1)
            ensemble, truth, spread = (x.nan_to_num(nan=0.0) for x in (ensemble, truth, spread))
        samples = []
        for k, index in enumerate(flat):
            sample = {
                "members": ensemble[k],
                "truth": truth[k],
                "spread": spread[k] / self._scale,
                "index": torch.tensor(index),
            }
            if self.static is not None:
                sample["static"] = self.static
            if self._lead_days is not None:
                sample["lead_time"] = self._lead_days[index]
            if self._crps_scale is not None:
                sample["crps_scale"] = self._crps_scale[index]
            if mask is not None:
                sample["mask"] = mask[k]
            samples.append(sample)
        return samples

    def __getitem__(self, index: int) -> Sample:
        """Sample ``index``."""
        return self.__getitems__([index])[0]
