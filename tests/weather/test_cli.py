"""The ``sciml weather`` commands: toy, score, their help and their errors."""

import json
from pathlib import Path

import pytest
import xarray as xr

from sciml.cli import main

from .conftest import ERA5


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
    for block in ("0", "1"):  # all dates at once, one at a time: the same scores
        argv = ["weather", "score", str(out), "--variable", "psi", "--block-dates", block]
        assert main([*argv, "--json", str(tmp_path / f"{block}.json")]) == 0
        again = json.loads((tmp_path / f"{block}.json").read_text())
        assert [r["lead_time"] for r in again] == [r["lead_time"] for r in rows]
        for name in ("crps", "crps_fair", "spread", "rmse", "spread_skill"):
            assert [r[name] for r in again] == pytest.approx([r[name] for r in rows], rel=1e-12)
    capsys.readouterr()
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
