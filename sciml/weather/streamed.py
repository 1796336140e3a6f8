"""Ensemble samples streamed from data larger than memory, a chunk of start dates at a time.

:class:`StreamedEnsemble` serves the samples of
:class:`~sciml.weather.dataset.EnsembleDataset`, read ahead while the steps run
(:mod:`sciml.datasets.chunked`); :func:`chunk_layout` is the order it gives them, which
data in memory can take too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dask
import numpy as np
import torch
import xarray as xr

from sciml.datasets.channels import NormStats
from sciml.datasets.chunked import ChunkLayout, ChunkStream, coalesce_chunks, common_bounds
from sciml.weather.dataset import EnsembleDataset, Sample

__all__ = ["READS_PER_BUFFER", "SHUFFLE_BYTES", "StreamedEnsemble", "chunk_layout", "date_bounds"]


#: Decoded bytes of the chunks whose samples a streamed epoch shuffles together (about
#: twice this is held: the chunks in use and those read ahead).
SHUFFLE_BYTES = 2**28
#: Reads the shuffle buffer holds: smaller chunks (one start date of a few MiB) are read
#: with their neighbours, a sixteenth of the buffer at a time
#: (:func:`~sciml.datasets.chunked.coalesce_chunks`).
READS_PER_BUFFER = 16


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
) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """Start-date bounds of the chunks and of the reads, the largest read's bytes, the buffer."""
    stored = date_bounds(ds, names)
    date_bytes = sum(ds[n].nbytes for n in names) / ds.sizes["time"]
    reads = coalesce_chunks(stored, date_bytes, buffer_bytes // READS_PER_BUFFER)
    read_bytes = int(max(np.diff(reads)) * date_bytes)
    buffer = min(max(1, buffer_bytes // max(read_bytes, 1)), len(reads) - 1)
    return stored, reads, read_bytes, buffer


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
    _, dates, _, buffer = _date_chunks(ds, names, buffer_bytes)
    per_date = math.prod(ds.sizes[d] for d in ("lead_time",) if d in ds.dims)
    return ChunkLayout(tuple(d * per_date for d in dates), buffer)


class StreamedEnsemble(ChunkStream):
    """The samples of :class:`EnsembleDataset`, read a chunk of start dates at a time.

    For data larger than memory: the samples of the chunks of ``time`` the file is
    stored in (those common to the forecasts and their truths) are read whole, a chunk
    once per epoch, ahead of the steps (:class:`sciml.datasets.chunked.ChunkStream`);
    chunks smaller than a sixteenth of ``buffer_bytes`` are read with their neighbours
    (:data:`READS_PER_BUFFER`), which costs the same bytes and a sixteenth of the reads.
    :func:`sciml.training.fit` draws an order that follows the reads
    (:func:`sciml.datasets.sampling.chunk_order`: as many reads shuffled together as
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
        self.stored, dates, self.chunk_bytes, buffer = _date_chunks(kept, names, buffer_bytes)
        #: Start-date bounds of the reads: whole chunks, neighbours read together.
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
        chunks, layout = len(self.stored) - 1, self.chunk_layout
        reads = len(self.dates) - 1
        line = (
            f"{chunks} chunk(s) of up to {int(max(np.diff(self.stored)))} start date(s), read "
            f"{reads} time(s) an epoch, up to {int(max(np.diff(self.dates)))} date(s) "
            f"({self.chunk_bytes / 2**20:.3g} MiB decoded) at a time, {layout.buffer} read(s) "
            "shuffled together and read ahead"
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
