"""Chunk-aware order and read-ahead: every sample once, every chunk read once per epoch."""

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from sciml.datasets.chunked import ChunkStream, coalesce_chunks, common_bounds
from sciml.datasets.sampling import chunk_order, epoch_batches
from sciml.distributed import spawn
from sciml.training import TrainConfig, fit

BOUNDS = (0, 5, 10, 12, 20, 30, 31, 40)


class _Chunk:
    """A chunk's samples in memory: sample ``i`` is ``(start + i, value)``."""

    def __init__(self, start: int, stop: int) -> None:
        self.values = torch.arange(start, stop, dtype=torch.float64)

    def __getitems__(self, local: list[int]) -> list[torch.Tensor]:
        return [self.values[i] for i in local]


class _Counted(ChunkStream):
    """A stream over :data:`BOUNDS` that records the most chunks held at once."""

    def __init__(self, buffer: int) -> None:
        self.most = 0
        self.lock = threading.Lock()

        def load(chunk: int) -> _Chunk:
            time.sleep(0.001)
            with self.lock:
                self.most = max(self.most, len(self._held))
            return _Chunk(BOUNDS[chunk], BOUNDS[chunk + 1])

        super().__init__(BOUNDS, load, buffer=buffer)


def test_chunk_order_visits_every_sample_once_a_window_of_chunks_at_a_time() -> None:
    chunks = np.searchsorted(BOUNDS, np.arange(40), side="right") - 1
    for epoch in range(4):
        order = chunk_order(BOUNDS, buffer=3, seed=7, epoch=epoch)
        assert sorted(order) == list(range(40))
        seen: list[int] = []  # each window of samples comes from 3 chunks, none seen before
        position = 0
        while position < len(order):
            window = set()
            while position < len(order) and (len(window) < 3 or chunks[order[position]] in window):
                if chunks[order[position]] not in window:
                    assert chunks[order[position]] not in seen
                    window.add(chunks[order[position]])
                position += 1
            seen += sorted(window)
        assert sorted(seen) == list(range(len(BOUNDS) - 1))
        assert order == chunk_order(BOUNDS, buffer=3, seed=7, epoch=epoch)  # (seed, epoch)
    assert chunk_order(BOUNDS, buffer=3, seed=7, epoch=0) != chunk_order(
        BOUNDS, buffer=3, seed=7, epoch=1
    )


@pytest.mark.parametrize("replicas", [2, 3, 4, 7, 45])
def test_replicas_take_stretches_of_the_chunks_each_sample_once_between_them(
    replicas: int,
) -> None:
    chunks = np.searchsorted(BOUNDS, np.arange(40), side="right") - 1
    whole = chunk_order(BOUNDS, buffer=2, seed=7, epoch=3)
    parts = [
        chunk_order(BOUNDS, buffer=2, seed=7, epoch=3, replica=(r, replicas))
        for r in range(replicas)
    ]
    assert {len(part) for part in parts} == {-(-40 // replicas)}  # padded as DistributedSampler
    assert sorted({i for part in parts for i in part}) == list(range(40))
    if replicas <= 40:  # no sample twice: the padding repeats the epoch's first samples only
        counts = np.bincount(sum(parts, []), minlength=40)
        assert counts.min() == 1 and counts.max() <= 2
    # stretches of the chunks: neighbours share at most one, each padded sample adds one
    reads = sum(len(set(chunks[part].tolist())) for part in parts)
    padding = len(parts[0]) * replicas - 40
    assert reads <= len(BOUNDS) - 1 + replicas - 1 + padding
    assert chunk_order(BOUNDS, buffer=2, seed=7, epoch=3, replica=(0, 1)) == whole
    batches = epoch_batches(40, 4, epoch=3, seed=7, chunks=BOUNDS, buffer=2, replica=(1, replicas))
    assert sum(batches, []) == parts[1]


def test_chunk_order_and_epoch_batches_refuse_bad_layouts() -> None:
    with pytest.raises(ValueError, match="rise strictly from 0"):
        chunk_order((0, 5, 5, 9), buffer=1, seed=0, epoch=0)
    with pytest.raises(ValueError, match="buffer must be"):
        chunk_order(BOUNDS, buffer=0, seed=0, epoch=0)
    with pytest.raises(ValueError, match="not at the 41 samples"):
        epoch_batches(41, 4, epoch=0, seed=0, chunks=BOUNDS, buffer=2)


def test_common_bounds_keep_whole_chunks_of_every_chunking() -> None:
    assert common_bounds([(0, 4, 8, 12), (0, 6, 12)]) == (0, 12)
    assert common_bounds([(0, 2, 4, 6), (0, 4, 6)]) == (0, 4, 6)
    with pytest.raises(ValueError, match="different lengths"):
        common_bounds([(0, 4), (0, 5)])


@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=30),
    item_bytes=st.sampled_from([0.5, 1.0, 3.0]),
    least=st.integers(0, 40),
)
def test_coalesced_reads_are_whole_chunks_each_just_large_enough(
    sizes: list[int], item_bytes: float, least: int
) -> None:
    bounds = tuple(np.cumsum([0, *sizes]).tolist())
    reads = coalesce_chunks(bounds, item_bytes, least)
    assert reads[0] == 0 and reads[-1] == bounds[-1] and set(reads) <= set(bounds)
    spans = list(zip(reads[:-1], reads[1:], strict=True))
    assert all((end - start) * item_bytes >= least for start, end in spans) or len(spans) == 1
    for start, end in spans[:-1]:  # no chunk more than needed
        inner = [b for b in bounds if start < b < end]
        assert not inner or (inner[-1] - start) * item_bytes < least
    start, end = spans[-1]  # the last: as the others, or with a short tail joined to it
    enough = [b for b in bounds if start < b < end and (b - start) * item_bytes >= least]
    assert not enough or (end - enough[0]) * item_bytes < least
    if least == 0:
        assert reads == bounds


@pytest.mark.parametrize("buffer", [1, 2, 3])
def test_a_planned_epoch_reads_each_chunk_once_and_holds_at_most_two_buffers(
    buffer: int,
) -> None:
    stream = _Counted(buffer)
    for epoch in range(3):
        order = chunk_order(BOUNDS, buffer=buffer, seed=1, epoch=epoch)
        stream.plan(order)
        served = []
        for start in range(0, len(order), 4):
            served += [int(v) for v in stream.__getitems__(order[start : start + 4])]
        assert served == order
        assert set(stream.loads.values()) == {epoch + 1}
        assert stream.most <= 2 * buffer
    stream.close()


def test_reads_without_a_plan_and_a_reset_plan_still_serve_the_samples() -> None:
    stream = _Counted(2)
    assert [int(v) for v in stream.__getitems__([39, 0, 11, 0])] == [39, 0, 11, 0]
    stream.plan([1, 2, 3])
    stream.plan(None)
    assert int(stream[25]) == 25
    with pytest.raises(IndexError):
        stream[40]


def _trained_order(run_dir: Path, *, preempt_after: int | None = None) -> tuple[list[int], str]:
    stream = ChunkStream(BOUNDS, lambda c: _Chunk(BOUNDS[c], BOUNDS[c + 1]), buffer=2)
    model = torch.nn.Linear(1, 1).double()
    seen: list[int] = []

    def loss_fn(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        seen.extend(int(v) for v in batch)
        return model(batch[:, None] / 40).square().mean()

    config = TrainConfig(epochs=3, batch_size=4, progress=False, tensorboard=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    result = fit(
        model,
        optimizer,
        stream,
        loss_fn,
        run_dir=run_dir,
        config=config,
        preempt_after=preempt_after,
    )
    return seen, result.status


def test_fit_follows_the_chunks_reads_each_once_per_epoch_and_resumes_in_the_same_order(
    tmp_path: Path,
) -> None:
    whole, status = _trained_order(tmp_path / "whole")
    assert status == "completed"
    for epoch in range(3):  # the order of chunk_order, every sample once per epoch
        assert whole[40 * epoch : 40 * (epoch + 1)] == chunk_order(
            BOUNDS, buffer=2, seed=0, epoch=epoch
        )
    first, status = _trained_order(tmp_path / "split", preempt_after=13)  # mid-epoch 1
    assert status == "interrupted"
    rest, status = _trained_order(tmp_path / "split")
    assert status == "completed"
    assert first + rest == whole


def test_fit_reads_each_chunk_once_per_epoch(tmp_path: Path) -> None:
    stream = _Counted(2)
    model = torch.nn.Linear(1, 1).double()
    config = TrainConfig(epochs=2, batch_size=3, progress=False, tensorboard=False)
    fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        stream,
        lambda m, b: m(b[:, None] / 40).square().mean(),
        run_dir=tmp_path,
        config=config,
    )
    assert dict(stream.loads) == dict.fromkeys(range(len(BOUNDS) - 1), 2)
    assert stream.most <= 4


def test_reads_out_of_plan_keep_the_chunks_held_bounded() -> None:
    stream = _Counted(2)
    stream.plan(chunk_order(BOUNDS, buffer=2, seed=0, epoch=0))
    other = chunk_order(BOUNDS, buffer=1, seed=5, epoch=3)  # another reader's order
    for start in range(0, 40, 4):
        batch = other[start : start + 4]
        assert [int(v) for v in stream.__getitems__(batch)] == batch
        assert len(stream._held) <= 4


def _replica_reads(run_dir: str) -> tuple[list[int], dict[int, int]]:
    """One data-parallel replica's samples and chunk reads over two epochs of ``fit``."""
    stream = _Counted(2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1).double())
    seen: list[int] = []

    def loss_fn(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        seen.extend(int(v) for v in batch)
        return model(batch[:, None] / 40).square().mean()

    config = TrainConfig(epochs=2, batch_size=4, progress=False, tensorboard=False)
    fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        stream,
        loss_fn,
        run_dir=run_dir,
        config=config,
    )
    return seen, dict(stream.loads)


def test_data_parallel_replicas_read_their_own_chunks_once_per_epoch(tmp_path: Path) -> None:
    (seen_0, loads_0), (seen_1, loads_1) = spawn(_replica_reads, 2, str(tmp_path))
    for epoch in range(2):
        mine = [seen[20 * epoch : 20 * (epoch + 1)] for seen in (seen_0, seen_1)]
        assert sorted(mine[0] + mine[1]) == list(range(40))  # each sample once an epoch
        for r in range(2):
            assert mine[r] == chunk_order(BOUNDS, buffer=2, seed=0, epoch=epoch, replica=(r, 2))
    for loads in (loads_0, loads_1):  # each chunk read at most once an epoch, about half each
        assert set(loads.values()) <= {1, 2}
    assert sum(loads_0.values()) + sum(loads_1.values()) <= 2 * (len(BOUNDS) - 1 + 1)
