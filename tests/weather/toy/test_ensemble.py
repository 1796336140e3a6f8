"""The toy ensemble generator."""

import signal
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.cli import main
from sciml.weather import metrics
from sciml.weather.data import open_ensemble
from sciml.weather.toy import ensemble as toy_module
from sciml.weather.toy.ensemble import generate_ensemble, write_ensemble
from sciml.weather.toy.qg import QGParams
from tests.signals import signal_when_handled

SMALL = QGParams(n=16, kd=4.0, beta=4.0, shear=1.0, drag=0.5, dt=0.025)


@pytest.fixture(scope="module")
def toy() -> xr.Dataset:
    return generate_ensemble(
        members=6,
        start_dates=4,
        lead_times=(0, 3, 6),
        interval=3.0,
        spin_up=50.0,
        seed=3,
        params=SMALL,
    )


def test_toy_dataset_layout_and_cf(toy: xr.Dataset, tmp_path: Path) -> None:
    assert toy["psi"].dims == ("member", "time", "lead_time", "level", "lat", "lon")
    assert toy["psi_truth"].dims == ("time", "lead_time", "level", "lat", "lon")
    assert dict(toy.sizes) == {
        "member": 6,
        "time": 4,
        "lead_time": 3,
        "level": 2,
        "lat": 16,
        "lon": 16,
    }
    assert toy.attrs["Conventions"] == "CF-1.8"
    assert toy["time"].attrs["standard_name"] == "forecast_reference_time"
    assert toy["lead_time"].attrs["standard_name"] == "forecast_period"
    assert toy["member"].attrs["standard_name"] == "realization"
    assert toy["lat"].attrs["units"] == "degrees_north"
    np.testing.assert_array_equal(toy["valid_time"], toy["time"] + toy["lead_time"])
    path = write_ensemble(toy, tmp_path / "toy.nc")
    back = open_ensemble(path)
    assert back["psi"].dims == toy["psi"].dims
    xr.testing.assert_allclose(back["psi"].compute(), toy["psi"])


def test_toy_is_deterministic_and_seed_dependent(
    toy: xr.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    # same seed, integrated one start date at a time instead of all together: identical
    monkeypatch.setattr(toy_module, "BATCH_ENTRIES", 7)
    again = generate_ensemble(
        members=6,
        start_dates=4,
        lead_times=(0, 3, 6),
        interval=3.0,
        spin_up=50.0,
        seed=3,
        params=SMALL,
        threads=2,
    )
    xr.testing.assert_identical(again, toy)
    other = generate_ensemble(
        members=2, start_dates=1, lead_times=(0,), spin_up=50.0, seed=4, params=SMALL
    )
    assert not np.allclose(other["psi_truth"].isel(time=0), toy["psi_truth"].isel(time=0))


def test_truth_continues_between_start_dates(toy: xr.Dataset) -> None:
    # start dates are 3 days apart: the truth at lead 3 is the next start's truth at lead 0
    np.testing.assert_allclose(
        toy["psi_truth"].isel(lead_time=1, time=slice(0, -1)),
        toy["psi_truth"].isel(lead_time=0, time=slice(1, None)),
        rtol=1e-6,
        atol=1e-8,
    )
    assert not np.allclose(
        toy["psi"].isel(lead_time=0, member=0), toy["psi_truth"].isel(lead_time=0)
    )


def test_spread_grows_with_lead_and_depends_on_the_flow(toy: xr.Dataset) -> None:
    spread = metrics.ensemble_spread(toy["psi"], dim=["time", "level", "lat", "lon"])
    assert np.all(np.diff(spread.values) > 0)
    # spatial variation: per-point spread differs strongly across the domain at day 6
    local = toy["psi"].sel(lead_time=np.timedelta64(6, "D")).std("member")
    assert float(local.std() / local.mean()) > 0.2
    ratio = metrics.spread_skill_ratio(
        toy["psi_truth"], toy["psi"], dim=["time", "level", "lat", "lon"]
    )
    assert np.all((ratio > 0.5) & (ratio < 2.0))


def test_model_error_changes_members_only(toy: xr.Dataset) -> None:
    with_error = generate_ensemble(
        members=6,
        start_dates=4,
        lead_times=(0, 3, 6),
        interval=3.0,
        spin_up=50.0,
        seed=3,
        params=SMALL,
        model_error=0.5,
    )
    xr.testing.assert_identical(with_error["psi_truth"], toy["psi_truth"])
    assert not np.allclose(with_error["psi"].isel(lead_time=-1), toy["psi"].isel(lead_time=-1))


def test_forecast_model_and_spread_factor_change_members_only(toy: xr.Dataset) -> None:
    settings = {
        "members": 6,
        "start_dates": 4,
        "lead_times": (0, 3, 6),
        "interval": 3.0,
        "spin_up": 50.0,
        "seed": 3,
        "params": SMALL,
    }
    wrong = replace(SMALL, drag=0.3, shear=0.9)
    other = generate_ensemble(**settings, forecast_params=wrong, spread_factor=0.5)
    xr.testing.assert_identical(other["psi_truth"], toy["psi_truth"])
    assert not np.allclose(other["psi"].isel(lead_time=-1), toy["psi"].isel(lead_time=-1))
    assert other.attrs["comment"].startswith("imperfect-model")
    assert toy.attrs["comment"].startswith("perfect-model")
    # members = analysis + f e_m: at lead 0 the spread about the analysis scales by f
    # exactly (the model has not run yet); float64 rounding of the sums only
    start = {"lead_time": 0}
    ratio = other["q"].isel(start).std("member") / toy["q"].isel(start).std("member")
    np.testing.assert_allclose(ratio, 0.5, rtol=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"members": 0}, "members >= 1"),
        ({"lead_times": (2, 1)}, "ascending"),
        ({"lead_times": (0, 0.01)}, "multiples of dt"),
        ({"lead_times": (0, 1, 1)}, "without repeats"),
        ({"lead_times": (0, np.nan)}, "finite"),
        ({"lead_times": (0, 1e9)}, "lead_times must lie in"),
        ({"lead_times": ()}, "finite numbers"),
        ({"interval": 0.0}, "interval must be > 0"),
        ({"interval": -2.0}, "interval must lie in"),
        ({"interval": 0.01}, "multiple of the model step"),
        ({"spin_up": -1.0}, "spin_up must lie in"),
        ({"perturbation": np.nan}, "perturbation must be a finite number"),
        ({"model_error": -0.5}, "model_error must be a finite number"),
        ({"spread_factor": -0.5}, "spread_factor must be a finite number"),
        ({"forecast_params": QGParams(n=32)}, "must share the truth's grid and step"),
        ({"forecast_params": replace(SMALL, dt=0.05)}, "must share the truth's grid and step"),
        ({"seed": -1}, "seed >= 0"),
        ({"threads": 0}, "threads must be an integer >= 1"),
        ({"start_dates": 2.5}, "start_dates must be an integer"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        generate_ensemble(**{"params": SMALL, "spin_up": 0.0, "start_dates": 1, **kwargs})
    with pytest.raises(ValueError, match="even number"):
        QGParams(n=15)


def test_cli_toy_stops_on_signal_and_resumes_to_the_same_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real SIGUSR1 to ``sciml weather toy``: exit 3, nothing half-written, same file resumed.

    The signal comes to this process once the first batch is kept. SIGTERM reaches the same
    ``PreemptionFlag`` handler; ``tests/training/test_loop.py`` sends it from outside a run.
    """
    # 63 members: 4 start dates per batch, so 2 batches for 8 start dates; half-day
    # leads and intervals keep each batch a second or two long
    args = ["--members", "63", "--start-dates", "8", "--lead-times", "0,0.5", "--spin-up", "1"]
    args += ["--interval", "0.5"]
    out = tmp_path / "toy.nc"
    partial = tmp_path / "toy.nc.partial"
    command = ["weather", "toy", "--quiet", "--out", str(out), *args]
    watcher = signal_when_handled(signal.SIGUSR1, (partial / "batch_00000.npz").exists)
    assert main(command) == 3
    watcher.join()
    assert "run the same command again" in capsys.readouterr().out
    assert not out.exists()
    kept = sorted(path.name for path in partial.iterdir())
    assert kept == ["batch_00000.npz", "config.json"]  # the second batch abandoned, no temporaries
    # another configuration is refused while the finished batches are kept
    assert main([*command, "--seed", "1"]) == 1
    assert "other settings" in capsys.readouterr().err
    assert main(command) == 0
    assert not partial.exists() and list(tmp_path.iterdir()) == [out]
    reference = tmp_path / "reference" / "toy.nc"
    settings = {"members": 63, "start_dates": 8, "lead_times": (0, 0.5), "spin_up": 1.0}
    settings |= {"interval": 0.5}
    toy_module.write_toy_ensemble(reference, handle_signals=False, **settings)
    assert out.read_bytes() == reference.read_bytes()


def test_generation_reports_in_lines_where_no_bar_shows(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level("INFO", logger="sciml")
    settings = {"members": 2, "start_dates": 2, "lead_times": (0, 0.5), "spin_up": 1.0}
    generate_ensemble(**settings, interval=0.5, params=SMALL, progress=True)  # type: ignore[arg-type]
    assert capfd.readouterr().err == ""  # stderr is no terminal here: no bar drawn into it
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3 and lines[0] == "QG ensemble: the truth's 1.5 days to 2 start dates ..."
    assert lines[1].startswith("QG ensemble: the truth's 1.5 days to 2 start dates: done in ")
    # 2 start dates x 20 steps of 0.025 days, in one batch
    assert lines[2].startswith("QG ensemble: 2 start dates x 3 members to day 0.5: 100% (40/40 ")
