"""Score summaries, leave-one-out scoring and the ``sciml weather`` commands."""

import json

import numpy as np
import pytest
import xarray as xr

from sciml.cli import main
from sciml.weather import metrics
from sciml.weather.verify import leave_one_out_scores, score_summary

from .conftest import ERA5


def test_score_summary_matches_metrics():
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


def test_leave_one_out_on_real_era5(era5):
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


def test_cli_toy_and_score(tmp_path, capsys):
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
    with pytest.raises(ValueError, match="--by"):
        main(["weather", "score", str(ERA5), "--variable", "z", "--by", "step"])


def test_cli_help_for_every_subcommand(capsys):
    for argv in (
        ["weather", "--help"],
        ["weather", "toy", "--help"],
        ["weather", "score", "--help"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    assert "--variable" in capsys.readouterr().out
