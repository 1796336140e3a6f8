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

:class:`StreamedEnsemble` serves the same samples from data larger than memory, a chunk
of start dates at a time, read ahead while the steps run
(:mod:`sciml.datasets.chunked`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Literal

import dask
import numpy as np
import pandas as pd
import torch
import xarray as xr
from torch.utils.data import Dataset

from sciml.datasets.channels import NormStats, compute_stats, normalise
from sciml.datasets.chunked import ChunkLayout, ChunkStream, common_bounds
from sciml.datasets.xarray_dataset import XarrayDataset

__all__ = ["SHUFFLE_BYTES", "EnsembleDataset", "StreamedEnsemble", "chunk_layout", "date_bounds"]

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


#: Decoded bytes of the chunks whose samples a streamed epoch shuffles together (about
#: twice this is held: the chunks in use and those read ahead).
SHUFFLE_BYTES = 2**28


def date_bounds(ds: xr.Dataset, names: Sequence[str]) -> tuple[int, ...]:
    """Bounds along ``time`` of the chunks of ``names``: each part whole chunks of every one.

    A variable not chunked (in memory) is one chunk.
    """
    count = ds.sizes["time"]
    found = []
    for name in names:
        var = ds[name]
        if "time" not in var.dims:
            continue
        sizes = (count,) if var.chunks is None else var.chunks[var.dims.index("time")]
        found.append(tuple(np.cumsum((0, *sizes)).tolist()))
    return common_bounds(found or [(0, count)])


def _date_chunks(
    ds: xr.Dataset, names: Sequence[str], buffer_bytes: int
) -> tuple[tuple[int, ...], int, int]:
    """The chunks' start-date bounds, the largest chunk's decoded bytes, the chunks buffered."""
    dates = date_bounds(ds, names)
    date_bytes = sum(ds[n].nbytes for n in names) / ds.sizes["time"]
    chunk_bytes = int(max(np.diff(dates)) * date_bytes)
    return dates, chunk_bytes, min(max(1, buffer_bytes // max(chunk_bytes, 1)), len(dates) - 1)


def chunk_layout(
    ds: xr.Dataset, variables: Sequence[str], *, buffer_bytes: int = SHUFFLE_BYTES
) -> ChunkLayout:
    """The layout :class:`StreamedEnsemble` gives the samples of ``ds`` (time, lead_time).

    An :class:`EnsembleDataset` of the same data in memory given it
    (``dataset.chunk_layout = chunk_layout(lazy, variables)``) is read by
    :func:`sciml.training.fit` in the same order: the order does not depend on whether
    the data are streamed.
    """
    names = [*variables, *(f"{v}_truth" for v in variables)]
    dates, _, buffer = _date_chunks(ds, names, buffer_bytes)
    per_date = math.prod(ds.sizes[d] for d in ("lead_time",) if d in ds.dims)
    return ChunkLayout(tuple(d * per_date for d in dates), buffer)


class StreamedEnsemble(ChunkStream):
    """The samples of :class:`EnsembleDataset`, read a chunk of start dates at a time.

    For data larger than memory: the samples of the chunks of ``time`` the file is
    stored in (those common to the forecasts and their truths) are read whole, a chunk
    once per epoch, ahead of the steps (:class:`sciml.datasets.chunked.ChunkStream`);
    :func:`sciml.training.fit` draws an order that follows the chunks
    (:func:`sciml.datasets.sampling.chunk_order`: as many chunks shuffled together as
    hold ``buffer_bytes``). In that order the samples are those of an
    :class:`EnsembleDataset` of the same data in memory, bit for bit, members drawn alike.

    Args:
        ds: The data, lazy (Dask-backed); ``time`` and ``lead_time`` index the samples.
        variables: Forecast variables, in channel order.
        buffer_bytes: Decoded bytes of the chunks shuffled together.
        workers: Threads that read chunks ahead.
        **options: :class:`EnsembleDataset`'s options; ``stats`` must be given.

    Raises:
        ValueError: As :class:`EnsembleDataset`; ``stats`` not given, or samples not
            indexed by ``time`` first.
    """

    def __init__(
        self,
        ds: xr.Dataset,
        variables: Sequence[str],
        *,
        buffer_bytes: int = SHUFFLE_BYTES,
        workers: int = 2,
        **options: Any,
    ) -> None:
        """Find the chunks; nothing is read until a sample is (arguments: see the class)."""
        if not isinstance(options.get("stats"), NormStats):
            raise ValueError("StreamedEnsemble needs the channels' statistics (stats=NormStats)")
        if tuple(options.get("sample_dims", ("time", "lead_time")))[0] != "time":
            raise ValueError("StreamedEnsemble reads chunks of start dates: time indexes samples")
        variables = list(variables)
        names = [*variables, *(f"{v}_truth" for v in variables)]
        static = list(options.get("static", ()))
        kept = ds[[*names, *static]]
        # the static fields in memory, standardised as those of the data in memory are
        self.template = EnsembleDataset(
            ds.assign({name: ds[name].compute() for name in static}), variables, **options
        )
        per_date = len(self.template) // ds.sizes["time"]
        dates, self.chunk_bytes, buffer = _date_chunks(kept, names, buffer_bytes)
        #: Start-date bounds of the chunks read whole.
        self.dates = dates
        self.buffer_bytes = buffer_bytes

        def load(chunk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            part = kept.isel(time=slice(dates[chunk], dates[chunk + 1]))
            with dask.config.set(scheduler="synchronous"):  # this thread is the parallelism
                data = EnsembleDataset(part.compute(), variables, **options)
            every = torch.arange(data._size).expand(len(data), -1)  # every member, normalised
            return data.fetch(list(range(len(data))), every)

        super().__init__([d * per_date for d in dates], load, buffer=buffer, workers=workers)

    @property
    def channels(self) -> tuple[str, ...]:
        """Channel names, as :class:`EnsembleDataset`'s."""
        return self.template.channels

    @property
    def static(self) -> torch.Tensor | None:
        """The static fields, as :class:`EnsembleDataset`'s."""
        return self.template.static

    def describe(self) -> str:
        """How the samples are read, for the run's status line."""
        chunks, layout = len(self.dates) - 1, self.chunk_layout
        dates = int(max(np.diff(self.dates)))
        line = (
            f"{chunks} chunk(s) of up to {dates} start date(s) ({self.chunk_bytes / 2**20:.3g} "
            f"MiB decoded), {layout.buffer} shuffled together and read ahead"
        )
        if layout.buffer == 1 and chunks > 1 and self.chunk_bytes > 2 * self.buffer_bytes:
            line += (
                f"; a chunk is larger than the shuffle buffer ({self.buffer_bytes / 2**20:.3g} "
                "MiB): samples are shuffled within one chunk at a time. Convert the data once "
                "to a training store of one start date per chunk: sciml weather rechunk IN "
                "OUT.zarr"
            )
        return line

    def __getitems__(self, indices: list[int]) -> list[Sample]:
        """A batch of samples in the order of ``indices``, members drawn as in memory."""
        chosen = self.template._member_indices(len(indices))
        parts = []
        for (ensemble, truth, spread), positions, local in self.parts(indices):
            at = torch.from_numpy(local)
            picked = ensemble[at[:, None], chosen[torch.from_numpy(positions)]]
            parts.append((torch.from_numpy(positions), picked, truth[at], spread[at]))
        batch = []
        for k in range(3):  # members, truth, spread in the order of indices
            first = parts[0][k + 1]
            whole = first.new_empty((len(indices), *first.shape[1:]))
            for part in parts:
                whole[part[0]] = part[k + 1]
            batch.append(whole)
        return self.template.assemble(list(indices), *batch)

    def read_with(
        self, indices: Sequence[int], needed: Callable[[int], Iterable[int]]
    ) -> dict[int, Sample]:
        """The samples ``needed(i)`` for each ``i`` of ``indices``, each read from i's chunk.

        Only ``indices`` count as served (the chunks are dropped as the plan says), so a
        sample that needs others of its chunk (earlier lead times of its start date, as
        :class:`sciml.weather.spread.data.SpreadDataset` stacks them) reads no chunk twice.

        Raises:
            ValueError: Members drawn at random (``choice="random"``: draw them yourself).
            IndexError: An index out of range, or a needed sample outside its index's chunk.
        """
        if self.template.choice != "first":
            raise ValueError("read_with reads the first members (choice='first'), not random ones")
        found: dict[int, Sample] = {}
        for (ensemble, truth, spread), positions, local in self.parts(indices):
            start = int(indices[positions[0]]) - int(local[0])
            wanted = sorted({n - start for i in local.tolist() for n in needed(start + i)})
            if not 0 <= wanted[0] <= wanted[-1] < len(ensemble):
                raise IndexError(
                    f"samples {[start + w for w in wanted]} are not all in the chunk of "
                    f"samples {start} to {start + len(ensemble) - 1}"
                )
            at = torch.tensor(wanted, dtype=torch.long)
            members = ensemble[at, : self.template.members]
            flat = [start + w for w in wanted]
            samples = self.template.assemble(flat, members, truth[at], spread[at])
            found.update(zip(flat, samples, strict=True))
        return found
