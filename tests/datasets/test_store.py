"""sciml.datasets.store: a missing or damaged chunk is an error naming store, array and chunk."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from sciml.cli import main
from sciml.datasets.store import (
    MANIFEST,
    StoreError,
    check_blosc_chunks,
    check_store,
    decode_failure,
    register_store,
)
from sciml.volumes.data import write_cosmology
from sciml.volumes.dataset import ShardedVolumes
from sciml.weather.data import open_ensemble
from tests.file_digests import digests

SIZE = 8


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of sciml's writer: 3 samples, chunks (1, 4, 4, 4, 4), with its manifest."""
    return write_cosmology(tmp_path_factory.mktemp("s") / "c.zarr", samples=3, size=SIZE, chunks=4)


@pytest.fixture(scope="module")
def foreign(written: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same data written by plain xarray (Zarr 3, compressed, no manifest)."""
    path = tmp_path_factory.mktemp("s") / "other.zarr"
    ds = xr.open_zarr(written).load().drop_encoding()
    ds.to_zarr(path, encoding={"volume": {"chunks": (1, 4, 4, 4, 4)}}, write_empty_chunks=True)
    return path


def _copy(store: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(store, tmp_path / store.name))


def test_the_writer_inventories_every_chunk(written: Path) -> None:
    inventory = check_store(written)
    assert (written / MANIFEST).exists()
    assert inventory.chunks["volume/2.0.1.0.1"] == ("volume", (2, 0, 1, 0, 1))
    assert len([k for k in inventory.files if k.startswith("volume/")]) == 3 * 8 + 2


@pytest.mark.parametrize("store", ["written", "foreign"])
def test_a_missing_chunk_is_named_not_read_as_zeros(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Before: Zarr read the missing chunk as the fill value (zeros) and the run trained on it.
    path = _copy(request.getfixturevalue(store), tmp_path)
    chunk = "volume/1.0.1.0.0" if store == "written" else "volume/c/1/0/1/0/0"
    (path / chunk).unlink()
    with pytest.raises(
        StoreError,
        match=f"{path}: array 'volume', chunk \\(1, 0, 1, 0, 0\\) .*"
        "is missing; copy the store again",
    ):
        ShardedVolumes(path)


def test_a_truncated_chunk_is_named_when_the_store_is_opened(written: Path, tmp_path: Path) -> None:
    # Before: a reshape error at the first read, naming neither store nor chunk.
    path = _copy(written, tmp_path)
    chunk = path / "volume" / "0.0.0.1.1"
    chunk.write_bytes(chunk.read_bytes()[:100])
    with pytest.raises(
        StoreError,
        match="array 'volume', chunk \\(0, 0, 0, 1, 1\\) .*has 100 bytes, its "
        "uncompressed chunk holds 512",
    ):
        ShardedVolumes(path)
    (path / MANIFEST).unlink()  # without the manifest, the uncompressed size tells it too
    with pytest.raises(StoreError, match="chunk \\(0, 0, 0, 1, 1\\) .*has 100 bytes"):
        ShardedVolumes(path)


def test_a_damaged_chunk_of_the_same_size_is_named_when_it_is_read(
    written: Path, tmp_path: Path
) -> None:
    # Before: the damaged counts were read as data.
    path = _copy(written, tmp_path)
    chunk = path / "volume" / "2.0.0.0.1"
    data = bytearray(chunk.read_bytes())
    data[10] ^= 0xFF
    chunk.write_bytes(bytes(data))
    volumes = ShardedVolumes(path)  # sizes are right: opening only lists the store
    volumes[0]
    with pytest.raises(
        StoreError, match=f"{path}: array 'volume', chunk \\(2, 0, 0, 0, 1\\) .*is damaged"
    ):
        volumes[2]


def test_a_chunk_that_does_not_decode_is_named(foreign: Path, tmp_path: Path) -> None:
    # Before: the codec's error, naming neither store nor chunk.
    path = _copy(foreign, tmp_path)
    chunk = path / "volume" / "c" / "1" / "0" / "1" / "1" / "0"
    chunk.write_bytes(b"\0" * len(chunk.read_bytes()))
    volumes = ShardedVolumes(path)
    with pytest.raises(
        StoreError, match=f"{path}: array 'volume', chunk \\(1, 0, 1, 1, 0\\) cannot be read"
    ):
        volumes[1]
    np.testing.assert_array_equal(volumes[0][0].numpy(), ShardedVolumes(foreign)[0][0].numpy())


def test_a_codec_failure_read_through_xarray_names_the_stores_read(
    foreign: Path, tmp_path: Path
) -> None:
    path = _copy(foreign, tmp_path)
    chunk = path / "volume" / "c" / "1" / "0" / "1" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-7])  # cut short, as an interrupted copy leaves it
    with pytest.raises(Exception) as raised:  # the codec's own error, raised by dask
        xr.open_zarr(path)["volume"].load()
    named = decode_failure(raised.value, ["weather", str(path), str(tmp_path / "out.json")])
    assert isinstance(named, StoreError)
    assert f"a chunk of the Zarr store {path} could not be decoded" in str(named)
    assert str(raised.value) in str(named)
    assert decode_failure(ValueError("not a codec's"), [str(path)]) is None


@pytest.mark.parametrize("cut", [0.5, 0.99, 0.0])
def test_a_blosc_chunk_cut_short_is_refused_before_blosc_reads_beyond_it(
    cut: float, tmp_path: Path
) -> None:
    # Before: Blosc decoded the rest of the frame from beyond its buffer: an error, or
    # plausible values, from one read to the next (zarr format 2 compresses with Blosc).
    path = tmp_path / "blosc.zarr"
    values = np.random.default_rng(0).standard_normal((4, 5000)).astype("float32")
    xr.Dataset({"psi": (("t", "x"), values)}).chunk({"t": 1}).to_zarr(path, zarr_format=2)
    check_blosc_chunks(path)  # whole
    chunk = path / "psi" / "2.0"
    data = chunk.read_bytes()
    chunk.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(StoreError, match=rf"{path}: array 'psi', chunk \(2, 0\) .* cut short"):
        check_blosc_chunks(path)
    with pytest.raises(StoreError, match="cut short"):
        open_ensemble(path)
    (path / "psi" / "2.0").unlink()  # a chunk not written: the fill value, as zarr reads it
    check_blosc_chunks(path)


def test_a_store_changed_on_purpose_is_named_changed_and_can_be_registered(
    written: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "... is damaged ...; copy the store again", although the user wrote to it.
    path = _copy(written, tmp_path)
    zarr.open_array(path / "volume", mode="r+")[1] = 5  # values rewritten, chunk sizes kept
    before = digests(path)
    volumes = ShardedVolumes(path)
    with pytest.raises(StoreError) as refused:
        volumes[1]
    message = str(refused.value)
    assert re.match(f"{path}: array 'volume', chunk \\(1, 0, [01], [01], [01]\\) ", message)
    assert (
        f"{path} was changed after it was written (8 file(s) modified since its manifest" in message
    )
    assert "array 'volume', chunk (1, 0, 1, 1, 1)" in message
    assert f"register it as it now is: sciml cosmoflow register {path}" in message
    assert digests(path) == before  # the refusal changed nothing
    xr.Dataset({"extra": ("sample", np.arange(3.0))}).to_zarr(path, mode="a")  # a new variable
    with pytest.raises(StoreError, match=r"file \.z\w+ has \d+ bytes, .*changed after it"):
        ShardedVolumes(path)  # a size that differs: named when the store is opened
    assert main(["cosmoflow", "register", str(path)]) == 0
    shown = capsys.readouterr().out
    assert f"registered {path} as it now is" in shown
    assert ".zmetadata" in shown and "extra/.zarray" in shown and "volume/1.0.0.0.0" in shown
    np.testing.assert_array_equal(ShardedVolumes(path).read_volume(1), np.log1p(5.0))
    np.testing.assert_array_equal(ShardedVolumes(path)[0][0], ShardedVolumes(written)[0][0])


def test_a_damaged_store_is_not_registered(written: Path, tmp_path: Path) -> None:
    path = _copy(written, tmp_path)
    chunk = path / "volume" / "0.0.0.1.1"
    chunk.write_bytes(chunk.read_bytes()[:100])
    before = digests(path)
    with pytest.raises(StoreError, match="chunk \\(0, 0, 0, 1, 1\\) .*has 100 bytes"):
        register_store(path)
    assert digests(path) == before
    with pytest.raises(StoreError, match="not a Zarr store"):
        register_store(path / "volume" / ".zarray")
