"""Score summaries, leave-one-out scoring and the ``sciml weather`` commands."""

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.cli import main
from sciml.weather import metrics
from sciml.weather.verify import leave_one_out_scores, score_summary

from .conftest import ERA5


def test_score_summary_matches_metrics() -> None:
    rng = np.random.default_rng(0)
    fc = xr.DataArray(rng.standard_normal((5, 3, 4)), dims=("member", "lead_time", "x"))
    ob = xr.DataArray(rng.standard_normal((3, 4)), dims=("lead_time", "x"))
    ob[0, 0] = np.nan
    got = score_summary(ob, fc, dim="x")
    xr.testing.assert_allclose(got["crps"], metrics.crps_ensemble(ob, fc, dim="x"))
    xr.testing.assert_allclose(got["crps_fair"], metrics.crps_ensemble(ob, fc, dim="x", fair=True))
    xr.testing.assert_allclose(got["spread_skill"], metrics.spread_skill_ratio(ob, fc, dim="x"))
    # the spread is taken over the points with an observation, like the RMSE
    expected = np.sqrt(fc.var("member", ddof=1).where(ob.notnull()).mean("x"))
    xr.testing.assert_allclose(got["spread"], expected)


def test_leave_one_out_on_real_era5(era5: xr.Dataset) -> None:
    t = era5["t"].rename(number="member").isel(time=[0, 3])
    got = leave_one_out_scores(t, dim=["time", "latitude", "longitude"])
    x = t.values.astype(np.float64)  # (member, time, level, lat, lon)
    crps = []
    for k in range(10):
        others = np.delete(x, k, axis=0)
        y = x[k]
        crps.append(
            np.abs(others - y).mean(0) - np.abs(others[:, None] - others[None, :]).mean((0, 1)) / 2
        )
    np.testing.assert_allclose(got["crps"], np.mean(crps, 0).mean((0, 2, 3)), rtol=1e-6)
    # the identity of the module docstring: corrected pooled ratio is exactly one
    ratio = got["spread"] / got["rmse"] * np.sqrt(10 / 9)
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-9)
    with pytest.raises(ValueError, match="at least 3 members"):
        leave_one_out_scores(t.isel(member=[0, 1]))


def test_cli_toy_and_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "toy.nc"
    assert (
        main(
            [
                "weather",
                "toy",
                "--out",
                str(out),
                "--members",
                "3",
                "--start-dates",
                "2",
                "--lead-times",
                "0,1",
                "--spin-up",
                "5",
                "--quiet",
            ]
        )
        == 0
    )
    ds = xr.open_dataset(out)
    assert ds["psi"].sizes["member"] == 3 and "psi_truth" in ds
    report = tmp_path / "scores.json"
    assert main(["weather", "score", str(out), "--variable", "psi", "--json", str(report)]) == 0
    text = capsys.readouterr().out
    assert "against psi_truth" in text and "crps_fair" in text
    rows = json.loads(report.read_text())
    assert len(rows) == 2 and {"crps", "spread_skill", "lead_time"} <= set(rows[0])
    assert main(["weather", "score", str(ERA5), "--variable", "z", "--by", "level"]) == 0
    assert "each member against the others" in capsys.readouterr().out
    assert main(["weather", "score", str(ERA5), "--variable", "z", "--by", "step"]) == 1
    assert "--by ['step']" in capsys.readouterr().err


def test_cli_help_for_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["weather", "--help"],
        ["weather", "toy", "--help"],
        ["weather", "score", "--help"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    assert "--variable" in capsys.readouterr().out


TOY = ["weather", "toy", "--quiet", "--members", "3", "--start-dates", "2", "--spin-up", "1"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--threads", "0"),
        ("--members", "0"),
        ("--members", "-2"),
        ("--members", "2.5"),
        ("--start-dates", "-1"),
        ("--interval", "0"),
        ("--interval", "-2"),
        ("--interval", "nan"),
        ("--spin-up", "-1"),
        ("--perturbation", "nan"),
        ("--perturbation", "-0.1"),
        ("--model-error", "inf"),
        ("--seed", "-1"),
        ("--lead-times", "0,2,1"),
        ("--lead-times", "0,1,1"),
        ("--lead-times", "0,-1"),
        ("--lead-times", "0,nan"),
        ("--lead-times", "0,,1"),
        ("--lead-times", "zero"),
    ],
)
def test_cli_toy_rejects_bad_numbers_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    out = tmp_path / "toy.nc"
    with pytest.raises(SystemExit) as exit_info:
        main([*TOY, "--out", str(out), option, value])
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--lead-times", "0,1e9", "lead_times must lie in"),
        ("--spin-up", "1e7", "spin_up must lie in"),
        ("--interval", "0.01", "multiple of the model step"),
        ("--lead-times", "0,0.01", "multiples of dt"),
    ],
)
def test_cli_toy_rejects_impossible_spans_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    out = tmp_path / "toy.nc"
    assert main([*TOY, "--out", str(out), option, value]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sciml: error: ValueError:") and message in err
    assert not list(tmp_path.iterdir())


def test_cli_score_member_dim_and_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = tmp_path / "renamed.nc"
    with xr.open_dataset(ERA5) as ds:
        ds.rename(number="realisation").to_netcdf(renamed)
    assert main(["weather", "score", str(renamed), "--variable", "t"]) == 1
    err = capsys.readouterr().err
    assert "no member dimension 'member'" in err and "--member-dim" in err
    argv = ["weather", "score", str(renamed), "--variable", "t", "--member-dim", "realisation"]
    assert main([*argv, "--by", "level"]) == 0
    assert "each member against the others" in capsys.readouterr().out
    for bad, message in (
        (["--by", "realisation"], "--by ['realisation']"),
        (["--by", "lat", "--lat-weights"], "weights have dimensions ['lat']"),
    ):
        assert main([*argv, *bad]) == 1
        assert message in capsys.readouterr().err
    assert main(["weather", "score", str(ERA5), "--variable", "nope"]) == 1
    assert "no variable 'nope'" in capsys.readouterr().err


def test_score_ensemble_against_observations_at_valid_time() -> None:
    """Observations indexed by valid time are taken at start + lead, never by start time."""
    from sciml.weather.verify import at_valid_time, score_ensemble

    rng = np.random.default_rng(1)
    start = np.datetime64("2000-01-01", "ns") + np.arange(3) * np.timedelta64(1, "D")
    lead = np.arange(2) * np.timedelta64(1, "D")
    fc = xr.DataArray(
        rng.standard_normal((4, 3, 2, 5)),
        dims=("member", "time", "lead_time", "x"),
        coords={"time": start, "lead_time": lead},
    )
    days = np.datetime64("2000-01-01", "ns") + np.arange(4) * np.timedelta64(1, "D")
    obs = xr.DataArray(rng.standard_normal((4, 5)), dims=("time", "x"), coords={"time": days})
    picked = at_valid_time(obs, fc)
    assert picked.dims == ("time", "lead_time", "x")
    np.testing.assert_array_equal(picked.isel(time=1, lead_time=1), obs.isel(time=2))
    got = score_ensemble(fc.to_dataset(name="t"), "t", observations=obs.to_dataset(name="t"))
    expected = metrics.crps_ensemble(picked, fc, dim=["time", "x"])
    np.testing.assert_allclose(got["crps"], expected)
    with pytest.raises(ValueError, match="no value at 1 valid time"):
        at_valid_time(obs.isel(time=slice(0, 3)), fc)
    with pytest.raises(ValueError, match="missing \\['lead_time'\\]"):
        metrics.crps_ensemble(obs.isel(time=slice(0, 3)), fc)
