"""sciml.io_utils: outputs appear whole or not at all, with the usual permissions."""

import errno
import os
import pickle
import re
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from sciml.cli import main
from sciml.io_utils import (
    WriteError,
    atomic_path,
    atomic_write_text,
    save_figure,
    write_errors,
)
from sciml.training.checkpoint import save_checkpoint
from tests.file_digests import digests


def test_atomic_write_replaces_whole_file_with_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.md"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]


def test_failure_leaves_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "mask.tif"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target, suffix=".tif") as tmp:
        assert tmp.suffix == ".tif" and tmp.parent == tmp_path
        tmp.write_text("half")
        raise RuntimeError("writer crashed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["mask.tif"]


def test_save_figure_is_atomic(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "f.png", dpi=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(fig)

    class Interrupted:  # writes half an image, then the run is killed
        def savefig(self, path: Path, **kwargs: object) -> None:
            Path(path).write_bytes(b"\x89PNG\r\n")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_figure(Interrupted(), tmp_path / "f.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]  # the old figure, whole
    assert path.stat().st_size > 1000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 200 KiB tmpfs file system (root and a sandbox that lets it mount; else skipped)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip() or 'not root'}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def _checkpoint(path: Path) -> None:
    save_checkpoint(path, torch.nn.Linear(300, 300))  # 353 KiB


def _netcdf(path: Path) -> None:
    data = xr.Dataset({"t": (("y", "x"), np.arange(90_000.0).reshape(300, 300))})  # 703 KiB
    with atomic_path(path, suffix=".nc") as tmp:
        data.to_netcdf(tmp)


def _text(path: Path) -> None:
    atomic_write_text(path, "x" * 300_000)


@pytest.mark.parametrize("write", [_checkpoint, _netcdf, _text], ids=lambda w: w.__name__)
def test_a_full_disk_is_named_and_the_old_file_kept(
    write: Callable[[Path], None], small_disk: Path
) -> None:
    # Before: "NetCDF: HDF error" / "[enforce fail at inline_container.cc:672] unexpected pos".
    target = small_disk / "out" / "file"
    target.parent.mkdir()
    target.write_text("old")
    before = digests(small_disk)
    with pytest.raises(WriteError) as failed:
        write(target)
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(target)
    assert re.fullmatch(
        f"cannot write {target}: no space left on its file system \\(\\d+(\\.\\d)? (B|KiB) free of "
        f"200.0 KiB on {small_disk}\\); free space there, or write elsewhere",
        str(failed.value),
    ), failed.value
    assert digests(small_disk) == before  # the old file whole, no temporary left
    assert str(pickle.loads(pickle.dumps(failed.value))) == str(failed.value)  # across ranks


def test_a_store_onto_a_full_disk_is_named_and_nothing_left(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = small_disk / "c.zarr"
    assert main(["cosmoflow", "data", str(store), "--samples", "4", "--size", "32"]) == 1
    err = capsys.readouterr().err
    assert f"WriteError: cannot write {store}: no space left on its file system" in err
    assert list(small_disk.iterdir()) == []  # the partial store removed, whole


def test_a_read_only_file_system_is_named(small_disk: Path) -> None:
    target = small_disk / "report.json"
    target.write_text("old")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        with pytest.raises(
            WriteError, match=f"cannot write {target}: its file system is read-only"
        ):
            atomic_write_text(target, "new")
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert [p.name for p in small_disk.iterdir()] == ["report.json"]
    assert target.read_text() == "old"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, "no space left on its file system"),
        (errno.EACCES, "permission denied"),
        (errno.EROFS, "its file system is read-only"),
    ],
)
def test_file_system_errors_of_any_writer_name_the_file(
    code: int, reason: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "metrics.csv"
    target.write_text("old")
    with pytest.raises(WriteError) as failed, atomic_path(target) as tmp:
        tmp.write_text("half")
        raise OSError(code, os.strerror(code))
    assert str(failed.value).startswith(f"cannot write {target}: {reason} (")
    assert re.search(r"\(\d+(\.\d)? \w+ free of \d+(\.\d)? \w+ on /", str(failed.value))
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"] and target.read_text() == "old"

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(tempfile, "mkstemp", refused)  # the temporary cannot even be made
    with pytest.raises(WriteError, match=f"cannot write {target}: {reason}"):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    with pytest.raises(WriteError, match=f"cannot write {target}: {reason}"), write_errors(target):
        raise OSError(code, os.strerror(code))  # a file appended to in place


def test_other_errors_pass_through(tmp_path: Path) -> None:
    target = tmp_path / "out.nc"
    for error in (
        RuntimeError("NetCDF: HDF error"),
        ValueError("bad data"),
        OSError(errno.EIO, "I/O"),
    ):
        with pytest.raises(type(error)) as raised, atomic_path(target):
            raise error
        assert raised.value is error  # a disk with space left explains none of them
    assert list(tmp_path.iterdir()) == []


def test_an_input_that_may_not_be_read_is_not_a_write_error(tmp_path: Path) -> None:
    source = tmp_path / "inputs" / "ensemble.nc"
    with pytest.raises(PermissionError), atomic_path(tmp_path / "out" / "split.nc"):
        raise PermissionError(errno.EACCES, "Permission denied", str(source))


def test_weather_split_onto_a_full_disk_is_named(
    small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "RuntimeError: NetCDF: HDF error", naming neither the file nor the disk.
    rng = np.random.default_rng(0)
    dates = np.datetime64("2000-01-01", "ns") + np.arange(10) * np.timedelta64(1, "D")
    values = rng.standard_normal((3, 10, 40, 50))  # 469 KiB, little to compress
    ensemble = xr.Dataset(
        {"t": (("member", "time", "lat", "lon"), values, {"units": "K"})},
        coords={"time": dates, "lat": np.linspace(80, -80, 40), "lon": np.arange(50) * 7.2},
    )
    source = tmp_path / "ens.nc"
    ensemble.to_netcdf(source)
    out = small_disk / "splits"
    out.mkdir()
    before = digests(source, small_disk)
    assert main(["weather", "split", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"WriteError: cannot write {out}/" in err
    assert ".nc: no space left on its file system (" in err
    assert digests(source, small_disk) == before  # no split, no temporary


def test_netcdf_files_open_with_a_small_chunk_cache_and_others_keep_theirs(
    tmp_path: Path,
) -> None:
    import netCDF4

    from sciml.datasets.xarray_dataset import open_dataset
    from sciml.io_utils import CHUNK_CACHE_BYTES, small_chunk_cache

    path = tmp_path / "chunked.nc"
    values = np.zeros((4, 3, 8), dtype="float32")
    xr.Dataset({"t": (("time", "member", "x"), values)}).to_netcdf(
        path, encoding={"t": {"chunksizes": (1, 3, 8)}}
    )
    default = netCDF4.get_chunk_cache()
    assert default[0] != CHUNK_CACHE_BYTES  # else this test shows nothing
    with small_chunk_cache(), netCDF4.Dataset(path) as opened:
        assert opened["t"].get_var_chunk_cache()[0] == CHUNK_CACHE_BYTES
    assert netCDF4.get_chunk_cache() == default
    with netCDF4.Dataset(path) as other:  # a file the process opens itself
        assert other["t"].get_var_chunk_cache()[0] == default[0]
    open_dataset(path).close()  # as sciml opens netCDF files
    assert netCDF4.get_chunk_cache() == default
