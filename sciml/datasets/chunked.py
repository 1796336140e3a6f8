"""Samples read chunk by chunk, with read-ahead: training from archives larger than memory.

A random sample of a compressed archive is a sliver of a chunk, and a read of it
decompresses the whole chunk; reading samples in a random order decompresses each chunk
once per sample it holds. :class:`ChunkStream` serves samples from whole chunks instead,
for an order that follows the chunks (:func:`sciml.datasets.sampling.chunk_order`: the
chunks in a random order, ``buffer`` at a time, their samples shuffled among themselves).
:func:`sciml.training.fit` reads a dataset's :attr:`ChunkStream.chunk_layout` and draws
such an order; its loader announces each epoch's order (:meth:`ChunkStream.plan`), so that
background threads read the next chunks while the steps run. Each chunk is read once per
epoch and dropped once its last planned sample is served; at most ``buffer + ahead``
chunks are held at a time::

    stream = ChunkStream(bounds, load, buffer=8)   # load(c): chunk c's samples, in memory
    fit(model, optimizer, stream, loss_fn, run_dir=..., config=TrainConfig(num_workers=0))

The read-ahead runs in the process that reads batches (``num_workers=0``); the order and
the values do not depend on it (the same order on every resume, and the same samples as
an in-memory dataset in that order). A read out of the plan (no plan, or two readers of
one stream, as the runs of a fused sweep) is served too, its chunk read then; the least
recently used chunks beyond ``buffer + ahead`` are dropped, so memory stays bounded,
though such a chunk may be read more than once an epoch.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset

__all__ = ["ChunkLayout", "ChunkStream", "coalesce_chunks", "common_bounds"]


@dataclass(frozen=True)
class ChunkLayout:
    """How a dataset's samples lie in chunks, as :func:`sciml.training.fit` orders them.

    Attributes:
        bounds: Chunk ``c`` holds samples ``bounds[c]`` to ``bounds[c + 1] - 1``.
        buffer: Chunks whose samples are shuffled together.
    """

    bounds: tuple[int, ...]
    buffer: int


def common_bounds(bounds: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The bounds common to several chunkings of one axis: each part whole chunks of every one.

    Args:
        bounds: Each chunking's bounds (from 0 to the axis' length).

    Raises:
        ValueError: Chunkings of axes of different lengths.
    """
    ends = {int(b[-1]) for b in bounds}
    if len(ends) != 1:
        raise ValueError(f"chunkings of axes of different lengths: {sorted(ends)}")
    common = set.intersection(*(set(map(int, b)) for b in bounds))
    return tuple(sorted(common))


def coalesce_chunks(
    bounds: Sequence[int], item_bytes: float, least_bytes: float
) -> tuple[int, ...]:
    """Bounds of reads of whole consecutive chunks, each of at least ``least_bytes`` decoded.

    A read has a cost of its own beside its bytes (building the arrays, the task graph),
    which a small chunk (one start date, a few MiB) pays once per chunk: reading several
    neighbours at once pays it once for all. Chunks of ``least_bytes`` or more are read
    alone; a short last read joins the one before it.

    Args:
        bounds: Chunk ``c`` holds items ``bounds[c]`` to ``bounds[c + 1] - 1``.
        item_bytes: Decoded bytes of one item.
        least_bytes: Decoded bytes a read covers at least (``0``: each chunk alone).
    """
    reads = [int(bounds[0])]
    for end in map(int, bounds[1:]):
        if (end - reads[-1]) * item_bytes >= least_bytes:
            reads.append(end)
    if reads[-1] != int(bounds[-1]):  # a short last read joins the one before it
        if len(reads) > 1:
            reads.pop()
        reads.append(int(bounds[-1]))
    return tuple(reads)


class ChunkStream(Dataset[Any]):
    """Samples served from whole chunks, held in a buffer and read ahead in threads.

    Args:
        bounds: Chunk ``c`` holds samples ``bounds[c]`` to ``bounds[c + 1] - 1``.
        load: ``load(c)``: chunk ``c``'s samples in memory, as a dataset with
            ``__getitems__`` over local indices (``0`` is sample ``bounds[c]``); called in a
            background thread.
        buffer: Chunks whose samples an epoch shuffles together (:attr:`chunk_layout`).
        ahead: Chunks read ahead beyond the buffer (default: ``buffer``).
        workers: Threads that read chunks.

    Attributes:
        loads: How many times each chunk was read (for tests and benchmarks).
    """

    def __init__(
        self,
        bounds: Sequence[int],
        load: Callable[[int], Any],
        *,
        buffer: int,
        ahead: int | None = None,
        workers: int = 2,
    ) -> None:
        """Check the layout; nothing is read until a sample is (arguments: see the class)."""
        edges = np.asarray(bounds, dtype=np.int64)
        if edges.ndim != 1 or edges.size < 2 or edges[0] != 0 or np.any(np.diff(edges) <= 0):
            raise ValueError(f"chunk bounds must rise strictly from 0, got {list(bounds)[:8]}")
        for name, value, least in (("buffer", buffer, 1), ("workers", workers, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        ahead = buffer if ahead is None else ahead
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 0:
            raise ValueError(f"ahead must be an integer >= 0, got {ahead!r}")
        self.chunk_layout = ChunkLayout(tuple(edges.tolist()), buffer)
        self._edges = edges
        self._load = load
        self._capacity = buffer + ahead
        self._workers = workers
        self.loads: Counter[int] = Counter()
        self._reset()

    def _reset(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._held: OrderedDict[int, Future[Any]] = OrderedDict()
        self._passes: deque[Counter[int]] = deque()  # planned reads per chunk, one per plan
        self._upcoming: deque[int] = deque()  # chunks to read ahead, in order of first use

    def __getstate__(self) -> dict[str, Any]:
        """Without threads and chunks (a copy in a loader worker reads its own)."""
        state = dict(vars(self))
        for name in ("_pool", "_lock", "_held", "_passes", "_upcoming"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy: no chunk held, nothing planned."""
        vars(self).update(state)
        self._reset()

    def __len__(self) -> int:
        """Number of samples."""
        return int(self._edges[-1])

    def chunk_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The chunk of each sample index."""
        flat = np.asarray(indices, dtype=np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"sample index out of range for {len(self)} samples")
        return np.searchsorted(self._edges, flat, side="right") - 1

    def plan(self, indices: Sequence[int] | None) -> None:
        """The samples that will be read next, in order (after those planned before).

        Their chunks are read ahead, ``buffer + ahead`` at most held at a time. ``None``
        drops what was planned and every chunk held.
        """
        if indices is None:
            for future in self._held.values():
                future.cancel()
            self._held.clear()
            self._passes.clear()
            self._upcoming.clear()
            return
        chunks = self.chunk_of(indices)
        if not chunks.size:
            return
        self._passes.append(Counter(chunks.tolist()))
        _, first = np.unique(chunks, return_index=True)
        self._upcoming.extend(chunks[np.sort(first)].tolist())
        self._top_up()

    def _planned(self, chunk: int) -> bool:
        """Whether a planned sample of ``chunk`` is still to be served."""
        return any(chunk in counts for counts in self._passes)

    def _top_up(self) -> None:
        """Start reading the next planned chunks while there is room."""
        while self._upcoming and len(self._held) >= self._capacity:
            idle = [c for c in self._held if not self._planned(c)]
            if not idle:
                return
            del self._held[idle[0]]
        while self._upcoming and len(self._held) < self._capacity:
            chunk = self._upcoming.popleft()
            if chunk not in self._held:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        self._workers, thread_name_prefix="sciml-read-ahead"
                    )
                self._held[chunk] = self._pool.submit(self._read, chunk)

    def _read(self, chunk: int) -> Any:
        with self._lock:
            self.loads[chunk] += 1
        return self._load(chunk)

    def _chunk(self, chunk: int) -> Any:
        """Chunk ``chunk``'s samples, waiting for its read (or reading it now)."""
        future = self._held.get(chunk)
        if future is None:  # not read ahead (yet): read now, and not again for this use
            if chunk in self._upcoming:
                self._upcoming.remove(chunk)
            future = Future()
            future.set_result(self._read(chunk))
            self._held[chunk] = future
        else:
            self._held.move_to_end(chunk)
        return future.result()

    def _served(self, chunks: np.ndarray) -> None:
        """Count the samples served; drop the chunks whose planned samples are all served."""
        for chunk, count in Counter(chunks.tolist()).items():
            if not self._passes or chunk not in self._passes[0]:
                continue
            current = self._passes[0]
            current[chunk] -= count
            if current[chunk] <= 0:
                del current[chunk]
                self._held.pop(chunk, None)
            if not current:
                self._passes.popleft()
        # beyond the capacity, the least recently used chunks go first: those never planned,
        # then those planned for later (read out of plan: two readers of one stream)
        now = self._passes[0] if self._passes else Counter()
        for spare in (
            [c for c in self._held if not self._planned(c)],
            [c for c in self._held if c not in now],
        ):
            while len(self._held) > self._capacity and spare:
                del self._held[spare.pop(0)]
        self._top_up()

    def parts(self, indices: Sequence[int]) -> list[tuple[Any, np.ndarray, np.ndarray]]:
        """The samples at ``indices`` by chunk: ``(chunk's samples, positions, local indices)``.

        ``positions`` are where the chunk's samples are in ``indices``, ``local`` their
        indices in the chunk. The chunks come in the order of their first sample.
        """
        flat = np.asarray(indices, dtype=np.int64)
        chunks = self.chunk_of(flat)
        _, first = np.unique(chunks, return_index=True)
        found = []
        for chunk in chunks[np.sort(first)].tolist():
            positions = np.flatnonzero(chunks == chunk)
            found.append((self._chunk(chunk), positions, flat[positions] - self._edges[chunk]))
        self._served(chunks)
        return found

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """A batch of samples, in the order of ``indices``."""
        out: list[Any] = [None] * len(indices)
        for data, positions, local in self.parts(indices):
            for position, sample in zip(positions, data.__getitems__(local.tolist()), strict=True):
                out[position] = sample
        return out

    def __getitem__(self, index: int) -> Any:
        """Sample ``index``."""
        return self.__getitems__([index])[0]

    def close(self) -> None:
        """Drop every chunk held and stop the reading threads."""
        self.plan(None)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
