"""The resumable batched writer of :mod:`sciml.weather.toy.io`, tested without the QG model."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.weather.toy.io import Batches, Generate, OnBatch, write_ensemble, write_resumably

BATCHES = 3


def _batch(index: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((2, 3), float(index)), np.full((2, 3), -float(index))


def _generator(calls: list[int], *, stop_after: int | None = None) -> Generate:
    """A batched computation: records the batches it integrates; stops after ``stop_after``."""

    def generate(done: Batches, on_batch: OnBatch, stop: Callable[[], bool]) -> xr.Dataset | None:
        parts = {}
        for index in range(BATCHES):
            if index in done:
                parts[index] = done[index]
                continue
            if stop_after is not None and len(calls) == stop_after:
                return None
            calls.append(index)
            parts[index] = _batch(index)
            on_batch(index, *parts[index])
        psi = np.stack([parts[index][0] for index in range(BATCHES)])
        return xr.Dataset({"psi": (("batch", "y", "x"), psi)})

    return generate


def test_interrupted_run_keeps_its_batches_and_resumes_the_missing_ones(tmp_path: Path) -> None:
    path = tmp_path / "out.nc"
    partial = tmp_path / "out.nc.partial"
    first: list[int] = []
    stopped = write_resumably(path, "a\n", _generator(first, stop_after=1), handle_signals=False)
    assert stopped is None and first == [0] and not path.exists()
    assert sorted(p.name for p in partial.iterdir()) == ["batch_00000.npz", "config.json"]
    assert (partial / "config.json").read_text() == "a\n"
    second: list[int] = []
    ds = write_resumably(path, "a\n", _generator(second), handle_signals=False)
    assert second == [1, 2]  # the kept batch is not integrated again
    assert ds is not None and not partial.exists() and list(tmp_path.iterdir()) == [path]
    with xr.open_dataset(path) as written:
        np.testing.assert_array_equal(written["psi"].values[:, 0, 0], [0.0, 1.0, 2.0])


def test_batches_of_another_configuration_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.nc"
    write_resumably(path, "a\n", _generator([], stop_after=1), handle_signals=False)
    calls: list[int] = []
    with pytest.raises(ValueError, match="out.nc.partial holds the finished batches of a run"):
        write_resumably(path, "b\n", _generator(calls), handle_signals=False)
    assert calls == [] and not path.exists()


def test_write_ensemble_is_compressed_float32_by_default(tmp_path: Path) -> None:
    ds = xr.Dataset({"psi": (("x",), np.linspace(0.0, 1.0, 5))})
    path = write_ensemble(ds, tmp_path / "e.nc")
    with xr.open_dataset(path) as written:
        assert written["psi"].dtype == np.float32
        assert written["psi"].encoding["zlib"] and written["psi"].encoding["complevel"] == 4
    assert list(tmp_path.iterdir()) == [path]
