"""Training from data larger than memory: streamed chunk by chunk, --memory-limit, rechunk."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from sciml.cli import main
from sciml.datasets.channels import compute_stats
from sciml.datasets.sampling import chunk_order
from sciml.datasets.store import MANIFEST, StoreError
from sciml.training import TrainConfig, fit
from sciml.weather import streamed as streamed_module
from sciml.weather.data import open_ensemble
from sciml.weather.dataset import EnsembleDataset
from sciml.weather.postprocess.models import gaussian_crps_loss
from sciml.weather.postprocess.pooled import PooledPostProcessor
from sciml.weather.spread.data import SpreadDataset
from sciml.weather.streamed import StreamedEnsemble
from tests.weather.postprocess.test_train_evaluate import _write
from tests.weather.spread.test_data import tiny_ensemble
from tests.weather.spread.test_train import _spread_cli

VARIABLES = ["psi", "q"]


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 start dates of 2 lead times, stored 4 dates per chunk (3 for the truths)."""
    folder = tmp_path_factory.mktemp("streaming")
    ds = xr.open_dataset(_write(folder / "plain.nc", dates=12, seed=3)).load()
    encoding = {v: {"chunksizes": (4, 4, 2, 2, 8, 8)} for v in VARIABLES}
    encoding |= {f"{v}_truth": {"chunksizes": (3, 2, 2, 8, 8)} for v in VARIABLES}
    ds.to_netcdf(folder / "chunked.nc", encoding=encoding)
    return folder / "chunked.nc"


def _options(ds: xr.Dataset) -> dict:
    stats = compute_stats(ds, VARIABLES, channel_dims=("level",))
    return {"members": 2, "choice": "random", "stats": stats, "static": ("topography",)}


def test_streamed_samples_follow_the_common_chunks_and_equal_those_in_memory(
    chunked: Path,
) -> None:
    ds = open_ensemble(chunked)
    options = _options(ds)
    streamed = StreamedEnsemble(ds, VARIABLES, **options)
    assert streamed.dates == (0, 12)  # 4-date and 3-date chunks: whole at 0 and 12 only
    smaller = StreamedEnsemble(ds.isel(time=slice(0, 8)), VARIABLES, **options)
    assert smaller.dates == (0, 8)
    plain = open_ensemble(chunked, chunks={"time": 2})
    two = StreamedEnsemble(plain, VARIABLES, buffer_bytes=1, **options)
    assert two.dates == tuple(range(0, 13, 2)) and two.chunk_layout.buffer == 1
    assert two.chunk_layout.bounds == tuple(range(0, 25, 4))  # 2 lead times per date
    memory = EnsembleDataset(ds.load(), VARIABLES, **options)
    indices = [5, 23, 0, 6, 7, 11]
    torch.manual_seed(0)
    got = two.__getitems__(indices)
    torch.manual_seed(0)
    expected = memory.__getitems__(indices)
    for a, b in zip(got, expected, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_masked_missing_values_stream_as_in_memory(chunked: Path, tmp_path: Path) -> None:
    ds = xr.open_dataset(chunked).load()
    ds["psi"][1, 3, 0, 0, 2, 2] = np.nan
    ds["q_truth"][5, 1, 1, 4, 4] = np.nan
    ds.to_netcdf(tmp_path / "gaps.nc")
    lazy = open_ensemble(tmp_path / "gaps.nc", chunks={"time": 3})
    options = _options(lazy) | {"missing": "mask"}
    streamed = StreamedEnsemble(lazy, VARIABLES, buffer_bytes=1, **options)
    memory = EnsembleDataset(lazy.compute(), VARIABLES, **options)
    indices = list(range(len(memory)))[::-1]
    torch.manual_seed(2)
    got = streamed.__getitems__(indices)
    torch.manual_seed(2)
    expected = memory.__getitems__(indices)
    assert sum(int((~s["mask"]).sum()) for s in got) > 0
    for a, b in zip(got, expected, strict=True):
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_streaming_trains_as_in_memory_in_the_same_order(chunked: Path, tmp_path: Path) -> None:
    ds = open_ensemble(chunked, chunks={"time": 2})
    options = _options(ds) | {"dtype": torch.float64}
    streamed = StreamedEnsemble(ds, VARIABLES, buffer_bytes=1, **options)
    memory = EnsembleDataset(ds.load(), VARIABLES, **options)
    memory.chunk_layout = streamed.chunk_layout  # type: ignore[attr-defined]
    loop = TrainConfig(epochs=2, batch_size=5, progress=False, tensorboard=False)
    frames = []
    for name, data in (("stream", streamed), ("memory", memory)):
        torch.manual_seed(1)
        model = PooledPostProcessor(4, static=1).double()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        fit(model, optimizer, data, gaussian_crps_loss, run_dir=tmp_path / name, config=loop)
        frames.append(pd.read_csv(tmp_path / name / "metrics.csv"))
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)
    assert set(streamed.loads.values()) == {2}  # each chunk once per epoch


def test_memory_limit_picks_the_path_and_the_run_keeps_it(chunked: Path, tmp_path: Path) -> None:
    args = ["weather", "train", "--model", "pooled", "--members", "2", "--epochs", "1"]
    args += ["--batch-size", "6", "--quiet"]
    for limit, path in (("0", "stream"), ("1MiB", "memory"), ("1kB", "stream")):
        run = tmp_path / limit
        assert main([*args, "--memory-limit", limit, "--run-dir", str(run), str(chunked)]) == 0
        reads = json.loads((run / "reads.json").read_text())
        assert reads["train"]["path"] == path
        assert reads["memory_limit"] == {"0": 0, "1MiB": 2**20, "1kB": 1000}[limit]
        assert ("exceed" in reads["train"]["why"]) == (limit == "1kB")
    # the same order on either path (the file's chunks): the limit changes no result
    metrics = [pd.read_csv(tmp_path / limit / "metrics.csv") for limit in ("0", "1MiB", "1kB")]
    for other in metrics[1:]:
        pd.testing.assert_frame_equal(metrics[0], other, check_exact=True)
    # a runtime option, not the run's record: the same run goes on under another limit
    run = str(tmp_path / "0")
    assert main([*args, "--memory-limit", "1GiB", "--run-dir", run, str(chunked)]) == 0
    assert json.loads((tmp_path / "0" / "reads.json").read_text())["train"]["path"] == "memory"


@pytest.mark.parametrize("bad", ["2Gb", "12XB", "-1GiB", "100", "GiB"])
def test_a_memory_limit_without_a_unit_of_bytes_is_refused(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["weather", "train", f"--memory-limit={bad}", "--run-dir", str(tmp_path), "x.nc"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--memory-limit" in error and bad in error
    assert ("bits" in error) == (bad == "2Gb")
    assert not any(tmp_path.iterdir())


def test_rechunk_writes_one_date_per_chunk_with_a_checked_manifest(
    chunked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "train.zarr"
    assert main(["weather", "rechunk", str(chunked), str(store)]) == 0
    assert (store / MANIFEST).exists()
    source, converted = open_ensemble(chunked), open_ensemble(store)
    xr.testing.assert_identical(source.compute(), converted.compute())
    assert converted["psi"].chunks[1] == (1,) * 12
    assert converted["psi_truth"].chunks[0] == (1,) * 12
    options = _options(source)
    # one-date chunks are read four at a time when a read must cover a sixteenth of the buffer
    date_bytes = sum(converted[n].nbytes for n in [*VARIABLES, "psi_truth", "q_truth"]) / 12
    four = StreamedEnsemble(converted, VARIABLES, buffer_bytes=int(64 * date_bytes), **options)
    assert four.stored == tuple(range(13)) and four.dates == (0, 4, 8, 12)
    assert four.chunk_layout.buffer == 3
    memory = EnsembleDataset(source.load(), VARIABLES, **options)
    indices = [23, 0, 9, 16, 8, 7]
    torch.manual_seed(4)
    got = four.__getitems__(indices)
    torch.manual_seed(4)
    for a, b in zip(got, memory.__getitems__(indices), strict=True):
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    assert dict(four.loads) == {0: 1, 1: 1, 2: 1}
    capsys.readouterr()
    assert main(["weather", "rechunk", str(chunked), str(store)]) != 0
    assert "exists; remove it or give --overwrite" in capsys.readouterr().err
    chunk = next(p for p in (store / "psi").iterdir() if not p.name.startswith("."))
    chunk.write_bytes(chunk.read_bytes() + b"changed")  # the store changed after its manifest
    with pytest.raises(StoreError, match=r"array 'psi', chunk .*changed after it was written"):
        open_ensemble(store)


def test_the_package_writes_one_start_date_per_chunk(chunked: Path, tmp_path: Path) -> None:
    out = tmp_path / "split"
    assert main(["weather", "split", str(chunked), "--out", str(out)]) == 0
    with xr.open_dataset(out / "train.nc") as part:
        assert part["psi"].encoding["chunksizes"][1] == 1
        assert part["psi_truth"].encoding["chunksizes"][0] == 1
    from sciml.weather.toy.io import write_ensemble

    written = write_ensemble(xr.open_dataset(chunked).load(), tmp_path / "toy.nc")
    with xr.open_dataset(written) as toy:
        assert toy["psi"].encoding["chunksizes"] == (4, 1, 2, 2, 8, 8)
        source = xr.open_dataset(chunked)["psi"].values.astype("float32")  # its on-disk type
        assert np.array_equal(toy["psi"].values, source)


@pytest.fixture(scope="module")
def spread_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spread data's tiny ensemble: 10 dates of 3 lead times, stored 3 dates per chunk."""
    path = tmp_path_factory.mktemp("spread_streaming") / "spread.nc"
    ds = tiny_ensemble(dates=10, seed=4)
    encoding = {v: {"chunksizes": (4, 3, 3, 2, 8, 8)} for v in VARIABLES}
    encoding |= {f"{v}_truth": {"chunksizes": (3, 3, 2, 8, 8)} for v in VARIABLES}
    ds.to_netcdf(path, encoding=encoding)
    return path


def test_streamed_spread_samples_stack_their_lead_times_as_in_memory(
    spread_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streamed_module, "READS_PER_BUFFER", 2**62)  # each chunk read alone
    lazy = open_ensemble(spread_file)
    stats = compute_stats(lazy, VARIABLES, channel_dims=("level",))
    options = {"members": 2, "history": 3, "choice": "random", "stats": stats}
    streamed = SpreadDataset(lazy, VARIABLES, stream=True, **options)
    memory = SpreadDataset(lazy.compute(), VARIABLES, **options)
    assert streamed.chunk_layout.bounds == (0, 9, 18, 27, 30)  # 3 dates of 3 lead times
    order = chunk_order(streamed.chunk_layout.bounds, buffer=1, seed=0, epoch=0)
    streamed.plan(order)
    for start in range(0, len(order), 7):
        batch = order[start : start + 7]
        torch.manual_seed(start)
        got = streamed.__getitems__(batch)
        torch.manual_seed(start)
        for a, b in zip(got, memory.__getitems__(batch), strict=True):
            assert a.keys() == b.keys()
            for key in a:
                torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    assert set(streamed.base.loads.values()) == {1}  # earlier lead times read no chunk again


def test_spread_training_streams_and_trains_as_in_memory(spread_file: Path, tmp_path: Path) -> None:
    args = ["train", "--members", "2", "--temporal", "2", "--choice", "random", "--epochs", "2"]
    args += ["--batch-size", "4", "--quiet"]
    for limit, path in (("0", "stream"), ("1GiB", "memory")):
        run = tmp_path / limit
        assert (
            _spread_cli([*args, "--memory-limit", limit, "--run-dir", str(run), str(spread_file)])
            == 0
        )
        reads = json.loads((run / "reads.json").read_text())
        assert reads["train"]["path"] == path and reads["memory_limit"] == {"0": 0}.get(
            limit, 2**30
        )
    metrics = [pd.read_csv(tmp_path / limit / "metrics.csv") for limit in ("0", "1GiB")]
    pd.testing.assert_frame_equal(metrics[0], metrics[1], check_exact=True)
