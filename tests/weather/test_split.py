"""``sciml weather split``: whole start dates in time order, three files or none."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.cli import main
from sciml.weather.split import split_start_dates
from sciml.weather.toy.cli import PRESET_NAMES
from sciml.weather.toy.presets import PRESETS

DATES = np.datetime64("2000-01-01T00", "ns") + np.arange(10) * np.timedelta64(2, "D")


@pytest.fixture()
def ensemble(tmp_path: Path) -> Path:
    """Ten start dates of a 3-member ensemble: ``t`` float32 and ``z`` float64."""
    rng = np.random.default_rng(0)
    dims = ("member", "time", "lat", "lon")
    ds = xr.Dataset(
        {
            "t": (dims, rng.standard_normal((3, 10, 4, 5)).astype(np.float32), {"units": "K"}),
            "z": (dims, rng.standard_normal((3, 10, 4, 5))),
        },
        coords={"time": DATES, "lat": [60.0, 30.0, 0.0, -30.0], "lon": np.arange(5) * 72.0},
    )
    path = tmp_path / "ens.nc"
    ds.to_netcdf(path)
    return path


def _read(folder: Path) -> dict[str, xr.Dataset]:
    parts = {}
    for name in ("train", "validation", "test"):
        with xr.open_dataset(folder / f"{name}.nc") as part:
            parts[name] = part.load()
    return parts


def test_split_by_fractions_keeps_whole_dates_in_order_and_the_values(
    ensemble: Path, tmp_path: Path
) -> None:
    out = tmp_path / "splits"
    assert main(["weather", "split", str(ensemble), "--out", str(out), "--validation", "0.3"]) == 0
    parts = _read(out)
    # 10 dates: the last 20 % (2) test, the 30 % before them (3) validate, 5 train
    expected = {"train": DATES[:5], "validation": DATES[5:8], "test": DATES[8:]}
    with xr.open_dataset(ensemble) as source:
        for name, part in parts.items():
            np.testing.assert_array_equal(part["time"].values, expected[name])
            xr.testing.assert_identical(part, source.sel(time=expected[name]).load())
            assert part["t"].dtype == np.float32 and part["z"].dtype == np.float64
    assert sorted(path.name for path in out.iterdir()) == ["test.nc", "train.nc", "validation.nc"]


def test_split_by_dates(ensemble: Path, tmp_path: Path) -> None:
    out = tmp_path / "splits"
    argv = ["weather", "split", str(ensemble), "--out", str(out)]
    assert main([*argv, "--val-start", "2000-01-07", "--test-start", "2000-01-15"]) == 0
    sizes = {name: part.sizes["time"] for name, part in _read(out).items()}
    assert sizes == {"train": 3, "validation": 4, "test": 3}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--val-start", "2000-01-15", "--test-start", "2000-01-07"], "must come before"),
        (["--val-start", "2000-01-07", "--test-start", "2001-01-01"], "test split is empty"),
        (["--val-start", "1999-01-01", "--test-start", "2000-01-07"], "train split is empty"),
        (["--val-start", "2000-01-07"], "needs both val_start and test_start"),
        (["--test", "0.2", "--val-start", "2000-01-07", "--test-start", "2000-01-15"], "not both"),
        (["--validation", "0.5", "--test", "0.5"], "sum to less than 1"),
        (["--val-start", "soon", "--test-start", "2000-01-15"], "'soon' is not a date"),
    ],
)
def test_split_refuses_overlapping_or_empty_splits_before_writing(
    ensemble: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    message: str,
) -> None:
    out = tmp_path / "splits"
    assert main(["weather", "split", str(ensemble), "--out", str(out), *options]) == 1
    assert message in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_split_refuses_fractions_outside_zero_one_as_a_usage_error(
    ensemble: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["weather", "split", str(ensemble), "--out", str(tmp_path), "--test", "1.5"])
    assert exit_info.value.code == 2
    assert "a fraction between 0 and 1" in capsys.readouterr().err


def test_split_never_replaces_an_input_and_overwrites_only_when_asked(
    ensemble: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "splits"
    argv = ["weather", "split", str(ensemble), "--out", str(out)]
    assert main(argv) == 0
    before = (out / "train.nc").read_bytes()
    assert main([*argv, "--validation", "0.3"]) == 1
    assert "splits/train.nc exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "train.nc").read_bytes() == before
    assert main([*argv, "--validation", "0.3", "--overwrite"]) == 0
    assert xr.open_dataset(out / "train.nc").sizes["time"] == 5
    # the input is one of the outputs: refused even with --overwrite
    assert main(["weather", "split", str(out / "test.nc"), "--out", str(out), "--overwrite"]) == 1
    assert f"the test output {out / 'test.nc'} is the input file" in capsys.readouterr().err


def test_split_writes_all_three_files_or_none(
    ensemble: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = []
    to_netcdf = xr.Dataset.to_netcdf

    def fail_on_the_third(self: xr.Dataset, path: Path, **kwargs: object) -> None:
        if len(written) == 2:
            raise OSError("disk full")
        written.append(path)
        to_netcdf(self, path, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(xr.Dataset, "to_netcdf", fail_on_the_third)
    out = tmp_path / "splits"
    assert main(["weather", "split", str(ensemble), "--out", str(out)]) == 1
    assert len(written) == 2 and not out.exists()  # the folder it created goes too


def test_preset_help_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(PRESET_NAMES) == set(PRESETS)
    with pytest.raises(SystemExit):
        main(["weather", "preset", "--help"])
    usage = capsys.readouterr().out
    assert all(name in usage for name in PRESETS)


def test_the_trainers_split_has_no_test_part() -> None:
    """``test=0``: training and validation dates only, as the trainers split their file."""
    ds = xr.Dataset({"t": (("time",), np.arange(10.0))}, coords={"time": DATES})
    train, val, test = split_start_dates(ds, validation=0.2, test=0)
    assert (train.sizes["time"], val.sizes["time"], test.sizes["time"]) == (8, 2, 0)
    assert train.time.max() < val.time.min()
    with pytest.raises(ValueError, match=r"cannot be split into training and validation \(1\)"):
        split_start_dates(ds.isel(time=[0]), validation=0.2, test=0)
    with pytest.raises(ValueError, match="as fractions or as dates, not both"):
        split_start_dates(ds, validation=0.2, val_start="2000-01-05", test_start="2000-01-09")
    with pytest.raises(ValueError, match="needs both val_start and test_start"):
        split_start_dates(ds, val_start="2000-01-05")
