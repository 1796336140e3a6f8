"""Samples for spread prediction: ``k`` members at a lead time and the lead times before it.

:class:`SpreadDataset` builds on :class:`sciml.weather.dataset.EnsembleDataset` (one sample
per start date and lead time, ``level`` folded into channels) and stacks, for the sample at
lead index ``j``, the same ``k`` members at lead indices ``j, j-1, ..., j-history+1``. The
members are one choice per sample for every step (a member is a trajectory: the first ``k``,
or ``k`` drawn at random for every read). Each sample is a dict of tensors:

* ``history``: ``(T, k, C, lat, lon)``, step ``t`` the ``t``-th lead time before the
  sample's (step 0 its own);
* ``available``: ``(T,)``, 1 for a step that exists, 0 for one that would precede the
  first lead time. Such a step is filled with zeros (the climatological mean in normalised
  units) and flagged by ``available``, which the model sees; nothing is repeated or
  invented, and at the first lead time the temporal model sees the current step only;
* ``spread``: ``(C, lat, lon)``, the full ensemble's standard deviation (ddof=1) over the
  channel std (the target);
* ``truth``: ``(C, lat, lon)``, the verifying values;
* ``index``: the flat index (``time`` major, then ``lead_time``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
import xarray as xr
from torch.utils.data import Dataset

from sciml.datasets.channels import NormStats
from sciml.datasets.chunked import ChunkLayout
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.streamed import StreamedEnsemble

__all__ = ["SpreadDataset", "check_spread_data", "lead_days"]

Sample = dict[str, torch.Tensor]


def lead_days(ds: xr.Dataset) -> tuple[float, ...]:
    """The lead times of ``ds`` in days (a timedelta coordinate, or numbers taken as days)."""
    values = ds["lead_time"].values
    if np.issubdtype(values.dtype, np.timedelta64):
        values = values / np.timedelta64(1, "D")
    return tuple(float(v) for v in np.atleast_1d(values))


def check_spread_data(
    ds: xr.Dataset, variables: Sequence[str], *, members: int, history: int
) -> None:
    """Reject data that cannot give ``history`` steps of ``members`` members per variable.

    Raises:
        KeyError: A variable or its ``<variable>_truth`` is missing.
        ValueError: No ``member``, ``lead_time`` or ``level`` dim where needed, lead times
            not ascending, ``members`` not in [2, ensemble size] or ``history`` not in
            [1, number of lead times].
    """
    for dim in ("member", "lead_time"):
        if dim not in ds.dims:
            raise ValueError(f"spread prediction needs a {dim!r} dimension: {dict(ds.sizes)}")
    size = ds.sizes["member"]
    if isinstance(members, bool) or not isinstance(members, int) or not 2 <= members <= size:
        raise ValueError(
            f"members must be an integer in [2, {size}] (the ensemble has {size} members), "
            f"got {members!r}"
        )
    leads = ds.sizes["lead_time"]
    if isinstance(history, bool) or not isinstance(history, int) or not 1 <= history <= leads:
        raise ValueError(
            f"history (lead times stacked, --temporal) must be an integer in [1, {leads}] "
            f"(the data have {leads} lead times), got {history!r}"
        )
    values = ds["lead_time"].values
    if leads > 1 and not bool(np.all(values[1:] > values[:-1])):
        raise ValueError(f"lead_time must be strictly ascending, got {values}")
    missing = [v for v in variables if v not in ds.data_vars or f"{v}_truth" not in ds.data_vars]
    if missing:
        raise KeyError(
            f"variables {missing} or their truth (<variable>_truth) not in the dataset "
            f"({sorted(map(str, ds.data_vars))})"
        )
    memberless = [v for v in variables if "member" not in ds[v].dims]
    if memberless:
        raise ValueError(f"variables {memberless} have no 'member' dim: they are no ensemble")
    flat = [v for v in variables if "level" not in ds[v].dims]
    if flat:
        raise ValueError(
            f"variables {flat} have no 'level' dim; the spread model is 3-D over (level, lat, lon)"
        )


class SpreadDataset(Dataset[Sample]):
    """``k`` members at ``history`` lead times, the full ensemble's spread and the truth.

    Args:
        ds: Ensemble with ``member``, ``time``, ``lead_time``, ``level``, ``lat``, ``lon``
            and ``<variable>_truth``.
        variables: Forecast variables, in channel order.
        members: ``k``, members per sample (2 <= k <= the ensemble size).
        history: Lead times per sample (1 <= history <= the number of lead times).
        choice: ``"first"`` or ``"random"`` members (one choice for all steps).
        stats: Channel statistics (``"compute"``: from ``ds``; pass the training split's).
        stream: Read ``ds`` a chunk of start dates at a time, ahead of the steps
            (:class:`~sciml.weather.streamed.StreamedEnsemble`; ``stats`` must be given), for
            data larger than memory: in the order :func:`sciml.training.fit` draws from
            :attr:`chunk_layout`, the samples are those of the data in memory, bit for bit.
    """

    def __init__(
        self,
        ds: xr.Dataset,
        variables: Sequence[str],
        *,
        members: int,
        history: int = 1,
        choice: Literal["first", "random"] = "first",
        stats: NormStats | Literal["compute"] = "compute",
        stream: bool = False,
    ) -> None:
        """Check the data and prepare the lazy reader (arguments: see the class)."""
        check_spread_data(ds, variables, members=members, history=history)
        if choice not in ("first", "random"):
            raise ValueError(f"choice must be 'first' or 'random', got {choice!r}")
        self.size = ds.sizes["member"]
        reader = StreamedEnsemble if stream else EnsembleDataset
        self.base: EnsembleDataset | StreamedEnsemble = reader(
            ds,
            variables,
            members=members if choice == "first" else self.size,
            stats=stats,
            channel_dims=("level",),
        )
        #: The chunks :func:`sciml.training.fit` orders the samples by: the file's, when
        #: streamed (set it on data in memory for the order streaming would take).
        self.chunk_layout: ChunkLayout | None = getattr(self.base, "chunk_layout", None)
        self.members, self.history, self.choice = members, history, choice
        self.leads = ds.sizes["lead_time"]
        self.levels = ds.sizes["level"]

    @property
    def stats(self) -> NormStats:
        """The channel statistics the samples are normalised with."""
        base = self.base
        return base.template.stats if isinstance(base, StreamedEnsemble) else base.stats

    def __len__(self) -> int:
        """Number of samples (start dates x lead times)."""
        return len(self.base)

    def _chosen(self) -> torch.Tensor:
        if self.choice == "first":
            return torch.arange(self.members)
        return torch.randperm(self.size)[: self.members]

    def __getitems__(self, indices: list[int]) -> list[Sample]:
        """A batch of samples; each needed (date, lead time) is read once."""
        if any(not -len(self) <= i < len(self) for i in indices):
            raise IndexError(f"sample index out of range for {len(self)} samples: {indices}")
        flat = [i % len(self) for i in indices]
        read = self._read(flat)
        samples = []
        for index in flat:
            own = read[index]
            chosen = self._chosen()
            history = own["members"].new_zeros((self.history, self.members, *own["truth"].shape))
            available = torch.zeros(self.history, dtype=history.dtype)
            for s in range(min(self.history, index % self.leads + 1)):
                history[s] = read[index - s]["members"][chosen]
                available[s] = 1
            samples.append(
                {
                    "history": history,
                    "available": available,
                    "spread": own["spread"],
                    "truth": own["truth"],
                    "index": own["index"],
                }
            )
        return samples

    def _steps(self, index: int) -> range:
        """The samples stacked for sample ``index``: its lead time and those before it."""
        return range(index, index - min(self.history, index % self.leads + 1), -1)

    def _read(self, flat: list[int]) -> dict[int, Sample]:
        """The base samples the samples ``flat`` stack, each read once, by index."""
        if isinstance(self.base, StreamedEnsemble):
            return self.base.read_with(flat, self._steps)
        needed = sorted({n for i in flat for n in self._steps(i)})
        return dict(zip(needed, self.base.__getitems__(needed), strict=True))

    def plan(self, indices: Sequence[int] | None) -> None:
        """The samples read next, in order: a streamed dataset reads their chunks ahead."""
        if isinstance(self.base, StreamedEnsemble):
            self.base.plan(indices)

    def __getitem__(self, index: int) -> Sample:
        """Sample ``index``."""
        return self.__getitems__([index])[0]
