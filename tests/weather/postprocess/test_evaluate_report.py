"""``sciml weather evaluate``'s outputs: JSON, CSV, Markdown and figures, from a 2-date test set."""

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

from sciml.cli import main
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.train import train_postprocessor

from .test_evaluate import _ensemble


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("evaluate_report")
    train = _ensemble(dates=6, seed=0)
    paths = {"train": folder / "train.nc", "test": folder / "test.nc"}
    train.to_netcdf(paths["train"])
    _ensemble(dates=2, seed=1).to_netcdf(paths["test"])
    paths["emos"] = (
        folder / "emos"
    )  # the deep models' forecasts: tests/weather/postprocess/test_evaluate.py
    train_postprocessor(
        train,
        PostprocessConfig(
            model="emos", members=2, train=TrainConfig(progress=False, tensorboard=False)
        ),
        paths["emos"],
    )
    return paths


def test_evaluate_writes_every_output_in_seconds(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = {name: tmp_path / f"scores.{name}" for name in ("json", "csv", "md")}
    argv = ["weather", "evaluate", str(files["test"]), "--run-dir", str(files["emos"])]
    argv += ["--climate", str(files["train"]), "--figures", str(tmp_path)]
    argv += ["--json", str(out["json"]), "--csv", str(out["csv"]), "--markdown", str(out["md"])]
    start = time.perf_counter()
    assert main(argv) == 0
    seconds = time.perf_counter() - start
    assert seconds < 60, f"evaluate took {seconds:.1f} s on a 2-date set"
    shown = capsys.readouterr()
    printed = shown.out
    assert "climate data's start dates" in printed and "raw_4" in printed
    # stderr says what each phase does when it starts, and when it is done
    started = [line[: -len(" ...")] for line in shown.err.splitlines() if line.endswith(" ...")]
    psi = "psi (1/1 variables)"
    assert started == [
        f"{psi}: its climates and extreme events (1 block of 2 dates)",
        "block 1/1 (dates 1-2 of 2): predicting emos_2, scoring",
        f"drawing 4 figures into {tmp_path}",
    ]
    done = [line.split(": done in ")[0] for line in shown.err.splitlines() if ": done in " in line]
    assert done == started
    rows = json.loads(out["json"].read_text())
    # the DESIGN contract: one row per (model, variable, level, lead time), raw_4 and raw_2
    assert {r["model"] for r in rows} == {"raw_4", "raw_2", "emos_2"}
    assert len(rows) == 3 * 1 * 2 * 2
    need = {"crps", "crps_kind", "crps_skill", "spread_skill", "crps_efi", "crps_extreme"}
    assert need <= set(rows[0])
    table = pd.read_csv(out["csv"])
    assert len(table) == len(rows) and table.crps.tolist() == pytest.approx(
        [r["crps"] for r in rows]
    )
    markdown = out["md"].read_text()
    assert "| model | members | seeds | variable | level | lead_days | crps |" in markdown
    assert markdown.count("\n| emos_2 |") == 4
    figures = sorted(p.name for p in tmp_path.glob("*.png"))
    assert figures == [
        "crps_skill_psi.png",
        "reliability_emos_2.png",
        "reliability_raw_2.png",
        "reliability_raw_4.png",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--extreme-fraction", "1.5"], "extreme fraction must lie in (0, 1]"),
        (["--climate", "{test}"], "coordinates differ"),
    ],
)
def test_evaluate_rejects_bad_options_before_writing(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    other = tmp_path / "other.nc"
    xr.open_dataset(files["test"]).assign_coords(lat=[0.0, 1.0, 2.0]).to_netcdf(other)
    extra = [e.replace("{test}", str(other)) for e in extra]
    out = tmp_path / "out"
    argv = ["weather", "evaluate", str(files["test"]), "--run-dir", str(files["emos"])]
    assert main([*argv, *extra, "--json", str(out / "s.json"), "--figures", str(out)]) == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_blocks_of_dates_write_the_whole_files_scores(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["weather", "evaluate", str(files["test"]), "--run-dir", str(files["emos"])]
    tables = {}
    for block in ("0", "1"):
        out = tmp_path / f"{block}.json"
        assert main([*argv, "--block-dates", block, "--json", str(out)]) == 0
        tables[block] = pd.DataFrame(json.loads(out.read_text()))
    assert "block 2/2 (dates 2-2 of 2)" in capsys.readouterr().err
    pd.testing.assert_frame_equal(tables["1"], tables["0"], rtol=1e-12)
    for bad in ("-1", "two"):
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--block-dates", bad])
        assert exit_info.value.code == 2
        assert "a number of start dates >= 0" in capsys.readouterr().err


def test_evaluate_rejects_a_fraction_of_zero_in_argparse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["weather", "evaluate", "t.nc", "--run-dir", "r", "--extreme-fraction", "0"])
    assert exit_info.value.code == 2
    assert "--extreme-fraction" in capsys.readouterr().err


def test_test_data_may_follow_the_run_folders(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.json"
    argv = ["weather", "evaluate", "--json", str(out), "--run-dir", str(files["emos"])]
    assert main([*argv, str(files["test"])]) == 0  # --run-dir R TEST: TEST is no run folder
    assert {r["model"] for r in json.loads(out.read_text())} == {"raw_4", "raw_2", "emos_2"}
    assert main(argv) == 1
    assert "no test data given" in capsys.readouterr().err
    assert main([*argv[:-1], str(tmp_path / "typo"), str(files["test"])]) == 1
    assert "no run folder among --run-dir" in capsys.readouterr().err


def test_a_sweep_folder_stands_for_its_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train, test = tmp_path / "train.nc", tmp_path / "test.nc"
    _ensemble(dates=6, seed=0).to_netcdf(train)
    _ensemble(dates=2, seed=1).to_netcdf(test)
    sweep, out = tmp_path / "sweep", tmp_path / "s.json"
    argv = ["weather", "train", str(train), "--model", "mlp", "--members", "2", "--epochs", "1"]
    assert main([*argv, "--seeds", "0,1", "--run-dir", str(sweep), "--quiet"]) == 0
    assert (
        main(["weather", "evaluate", "--run-dir", str(sweep), str(test), "--json", str(out)]) == 0
    )
    models = {r["model"] for r in json.loads(out.read_text())}
    assert {"mlp_2_seed0", "mlp_2_seed1", "mlp_2", "mlp_2_combined"} <= models
    assert main(["weather", "evaluate", str(test), "--run-dir", str(tmp_path)]) == 1
    assert f"--run-dir ['{tmp_path}']: not a run folder" in capsys.readouterr().err
