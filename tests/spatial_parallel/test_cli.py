"""``sciml spatial plan``: the grid planner's command line and its bad inputs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from sciml.cli import main
from sciml.spatial_parallel.planner import calibrate as planner_calibrate
from sciml.spatial_parallel.planner import plan as planner
from sciml.spatial_parallel.planner.layers import ConvCost, load_costs
from tests.spatial_parallel.planner.test_cost import PROFILE


def test_plan_prints_the_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["spatial", "plan", "--model", "cosmoflow", "--shape", "4x64x64x64", "--world", "8"]
    assert main([*args, "--memory", "80GiB", "--profile", "h100"]) == 0
    out = capsys.readouterr().out
    assert "(1, 4, 64, 64, 64) on 8 ranks, 80 GiB each, profile h100" in out
    assert out.count("\n*") == 1 and "memory of the recommendation" in out


def test_plan_json_is_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["spatial", "plan", "--model", "unet", "--shape", "2x1x32x32x32", "--world", "4"]
    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["world"] == 4 and plan["sample_shape"] == [2, 1, 32, 32, 32]
    best = plan["recommended"]
    assert best["peak_memory_bytes"] <= plan["memory_limit_bytes"]
    assert set(best["time_s"]) == {"compute", "halo", "norm", "allreduce", "optimizer", "read"}


def test_plan_prices_one_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["spatial", "plan", "--model", "cosmoflow", "--shape", "4x32x32x32"]
    assert main([*args, "--mesh", "depth=2,width=2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mesh"] == {"data": 1, "depth": 2, "height": 1, "width": 2} and result["fits"]


def test_calibrate_caches_and_plans_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(planner_calibrate, "calibrate", lambda **kwargs: PROFILE)
    measured = ConvCost(1e-3, 2e-3, 0.0, 0.0)
    monkeypatch.setattr(
        planner, "measure_convs", lambda convs, **kwargs: {c.key: measured for c in convs}
    )
    cache = tmp_path / "profile.json"
    args = ["spatial", "plan", "--model", "cosmoflow", "--shape", "4x32x32x32", "--world", "2"]
    assert main([*args, "--memory", "1GiB", "--calibrate", "--cache", str(cache)]) == 0
    shown = capsys.readouterr()
    assert f"profile cached at {cache}" in shown.out
    timing = r"timing [0-9]+ local convolutions of the model on this CPU"
    assert re.search(rf"^{timing} \.\.\.\n{timing}: done in ", shown.err, re.MULTILINE), shown.err
    costs = load_costs(tmp_path / "profile_convs.json")  # the planned grids' convolutions
    assert costs and set(costs.values()) == {measured}
    assert main([*args, "--memory", "1GiB", "--profile", "calibrated", "--cache", str(cache)]) == 0
    assert "profile test" in capsys.readouterr().out


def test_nothing_fits_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["spatial", "plan", "--model", "cosmoflow", "--shape", "4x32x32x32", "--world", "2"]
    assert main([*args, "--memory", "1MiB"]) == 1
    assert "no grid fits" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--memory", "80"], "memory must be a number with a unit"),
        (["--world", "0"], "--world: expected an integer >= 1"),
        (["--shape", "4x32x32"], "--shape expects 5 sizes NxCxDxHxW or 4 sizes CxDxHxW"),
        (["--model", "resnet"], "invalid choice: 'resnet'"),
    ],
)
def test_bad_arguments_are_named(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["spatial", "plan", "--model", "cosmoflow", "--world", "2", *extra])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "unet", "--shape", "2x1x8x8x8", "--batch", "4"], "--batch 4 contradicts"),
        (["--model", "unet"], "--model needs --world"),
        (["--world", "8"], "--world needs --model"),
        (["--model", "unet", "--mesh", "depth=2", "--world", "4"], "has 2 ranks but --world is 4"),
        (["--model", "unet", "--world", "2", "--profile", "v100"], "unknown profile 'v100'"),
    ],
)
def test_inconsistent_options_are_named(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["spatial", "plan", *args]) == 1
    assert message in capsys.readouterr().err


def test_the_design_contract_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--model", "cosmoflow", "--shape", "4x512x512x512", "--world", "2048"]
    assert main(["spatial", "plan", *args, "--memory", "80GiB", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    best = plan["recommended"]
    assert best["peak_memory_bytes"] <= 80 * 2**30
    assert math.prod(best["mesh"].values()) == 2048
