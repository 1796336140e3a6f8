"""The named toy presets: fixed configurations, the truth shared, the forecast model wrong."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from sciml.cli import main
from sciml.weather.toy.ensemble import write_ensemble
from sciml.weather.toy.presets import PRESETS, generate_preset, toy_preset
from sciml.weather.toy.qg import QGParams


def test_presets_are_the_documented_configurations() -> None:
    imperfect, perfect = PRESETS["qg-imperfect-v1"], PRESETS["qg-perfect-v1"]
    assert imperfect.params == perfect.params and imperfect.params.topography == 2.0
    assert imperfect.forecast_params is not None and perfect.forecast_params is None
    wrong = imperfect.forecast_params
    assert (wrong.drag, wrong.shear, wrong.topography) == (0.45, 0.95, 1.6)
    assert (imperfect.settings.spread_factor, perfect.settings.spread_factor) == (0.7, 1.0)
    assert imperfect.settings.members == 10 and imperfect.settings.start_dates == 160


@pytest.fixture
def small_presets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrunken copies of the presets (the presets' plumbing; their real size is a benchmark's)."""
    small = QGParams(n=16, kd=4.0, beta=4.0, shear=1.0, drag=0.5, topography=2.0)
    for name, preset in PRESETS.items():
        settings = replace(preset.settings, members=3, lead_times=(0, 1), spin_up=5.0)
        wrong = preset.forecast_params and replace(small, drag=preset.forecast_params.drag)
        shrunk = replace(preset, settings=settings, params=small, forecast_params=wrong)
        monkeypatch.setitem(PRESETS, name, shrunk)


@pytest.mark.usefixtures("small_presets")
def test_generate_preset_shares_the_truth_and_names_itself() -> None:
    imperfect = generate_preset("qg-imperfect-v1", start_dates=2)
    perfect = generate_preset("qg-perfect-v1", start_dates=2)
    xr.testing.assert_identical(imperfect["psi_truth"], perfect["psi_truth"])
    assert not np.allclose(imperfect["psi"].isel(lead_time=-1), perfect["psi"].isel(lead_time=-1))
    assert imperfect.attrs["preset"] == "qg-imperfect-v1"
    assert "spread_factor=0.7" in imperfect.attrs["source"]
    assert imperfect["topography"].dims == ("lat", "lon")
    assert imperfect.sizes["time"] == 2


def test_unknown_presets_and_sizes_are_rejected() -> None:
    with pytest.raises(KeyError, match=r"no toy preset 'qg'; presets: \['qg-imperfect-v1'"):
        toy_preset("qg")
    with pytest.raises(ValueError, match=r"start_dates must lie in \[1, 160\]"):
        generate_preset("qg-perfect-v1", start_dates=161)


@pytest.mark.usefixtures("small_presets")
def test_the_preset_command_writes_what_generate_preset_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "preset.nc"
    argv = ["weather", "preset", "qg-imperfect-v1", "--out", str(out), "--quiet"]
    assert main([*argv, "--start-dates", "2", "--seed", "3"]) == 0
    assert "wrote" in capsys.readouterr().out
    expected = tmp_path / "expected.nc"
    write_ensemble(generate_preset("qg-imperfect-v1", start_dates=2, seed=3), expected)
    with xr.open_dataset(out) as written, xr.open_dataset(expected) as reference:
        xr.testing.assert_identical(written.load(), reference.load())
        assert written.attrs["preset"] == "qg-imperfect-v1"
    assert not out.with_name(out.name + ".partial").exists()


def test_the_preset_command_names_an_unknown_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "preset.nc"
    # a usage error, before anything is imported or written
    with pytest.raises(SystemExit) as exit_info:
        main(["weather", "preset", "qg", "--out", str(out), "--quiet"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'qg' (choose from 'qg-imperfect-v1'" in capsys.readouterr().err
    assert not out.exists()
