"""The benchmarks' one JSON writer (``benchmarks/_report.py``) and its use by every script."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
import xarray as xr

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if "def main(" in p.read_text())


def _report_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_report", BENCHMARKS / "_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_report_records_the_machine_and_the_rows(tmp_path: Path) -> None:
    path = _report_module().write_report(tmp_path / "b.json", "b", [{"x": 1}], note="n")
    report = json.loads(path.read_text())
    assert report["benchmark"] == "b" and report["rows"] == [{"x": 1}] and report["note"] == "n"
    assert {"platform", "python", "cpus", "numpy", "torch", "date_utc"} <= set(report["machine"])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_writes_its_json_through_write_report(script: Path) -> None:
    tree = ast.parse(script.read_text())
    calls = {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert "write_report" in calls
    assert "atomic_write_text" not in calls and "machine_info" not in calls


def _validation_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    path = BENCHMARKS / "spatial_plan_validation.py"
    spec = importlib.util.spec_from_file_location("spatial_plan_validation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_validations_kendall_tau_is_scipys(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = pytest.importorskip("scipy.stats")
    validation = _validation_module(monkeypatch)
    rng = np.random.default_rng(0)
    for n in (2, 5, 8):
        for _ in range(20):
            x, y = rng.permutation(n).tolist(), rng.permutation(n).tolist()
            # no ties: scipy's tau-b is tau-a
            expected = stats.kendalltau(x, y).statistic
            assert validation.kendall_tau(x, y) == pytest.approx(expected, abs=1e-12)


def test_misordered_counts_only_pairs_measured_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    misordered = _validation_module(monkeypatch).misordered
    measured = [1.0, 1.1, 2.0, 4.0]  # pairs apart by more than 15%: all but (1.0, 1.1)
    assert misordered([1.0, 0.9, 2.0, 4.0], measured) == (0, 5)  # the near-tie swapped
    assert misordered([1.0, 1.1, 5.0, 4.0], measured) == (1, 5)
    assert misordered([4.0, 3.0, 2.0, 1.0], measured) == (5, 5)


def test_the_validation_keeps_each_grids_median_round(monkeypatch: pytest.MonkeyPatch) -> None:
    median_sample = _validation_module(monkeypatch).median_sample
    rounds = [{"s": 3.0, "cpu": "a"}, {"s": 1.0, "cpu": "b"}, {"s": 2.0, "cpu": "c"}]
    assert median_sample(rounds, key=lambda r: r["s"]) == {"s": 2.0, "cpu": "c"}  # one sample
    assert median_sample([4.0, 1.0, 3.0, 2.0], key=float) == 2.0  # the lower middle
    assert median_sample([5.0], key=float) == 5.0
    with pytest.raises(ValueError, match="at least one sample"):
        median_sample([], key=float)


def test_steal_is_the_share_of_ticks_the_host_took(tmp_path: Path) -> None:
    report = _report_module()
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
    stat.write_text("cpu  100 0 50 800 10 0 5 35 40 0\ncpu0 50 0 25 400 5 0 2 18 20 0\n")
    before = report.cpu_times(stat=stat)
    assert before == (35, 1000)
    stat.write_text("cpu  400 0 80 1300 10 0 5 105 300 0\n")
    after = report.cpu_times(stat=stat)
    assert report.steal_fraction(before, after) == pytest.approx(70 / 900, rel=1e-15)
    assert report.steal_fraction(after, after) is None  # no tick passed
    assert report.steal_fraction(None, after) is None
    assert report.cpu_times(stat=tmp_path / "absent") is None
    stat.write_text("intr 1 2 3\n")
    with pytest.raises(ValueError, match="expected a 'cpu' line"):
        report.cpu_times(stat=stat)
    live = report.cpu_times()  # this machine's, where Linux has one
    assert live is None or 0 <= live[0] <= live[1]


def _benchmark(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module(name)  # by name: the spawned ranks import it too


def test_the_median_interval_is_the_bootstrap_quantile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five values: a resample's median is x_(k) or less with probability P(Bin(5, k/5) >= 3).

    That is 0.058, 0.317, 0.683, 0.942, 1 for k = 1..5, so the 2.5% and 97.5%
    quantiles of the resampled medians are x_(1) and x_(5), the 25% and 75%
    ones x_(2) and x_(4), each far from a boundary for 10,000 resamples.
    """
    interval = _benchmark(monkeypatch, "_spatial_workloads").median_interval
    values = [3.0, 1.0, 5.0, 2.0, 4.0]
    assert interval(values) == (1.0, 5.0)
    assert interval(values, level=0.5) == (2.0, 4.0)
    assert interval([2.0] * 7) == (2.0, 2.0)
    with pytest.raises(ValueError, match="at least one value"):
        interval([])


@pytest.mark.system
def test_the_mechanism_cost_benchmark_runs_quick(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Both models, on and off: the median ratio over rounds inside its interval."""
    module = _benchmark(monkeypatch, "spatial_mechanism_cost")
    out = tmp_path / "cost.json"
    assert module.main(["--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["model"] for row in rows] == ["cosmoflow", "unet"]
    for row in rows:
        lo, hi = row["ratio_ci95"]
        cpu_lo, cpu_hi = row["cpu_ratio_ci95"]
        assert row["off_ms"] > 0 and row["on_ms"] > 0 and lo <= row["ratio"] <= hi, row
        assert cpu_lo <= row["cpu_ratio"] <= cpu_hi, row
        over_lo, over_hi = row["overhead_ms_ci95"]
        assert over_lo <= row["overhead_ms"] <= over_hi and row["small"] == row["size"], row


@pytest.mark.system
def test_the_efficiency_benchmark_runs_quick(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Both stacks, one process against two: each ratio inside its interval."""
    module = _benchmark(monkeypatch, "spatial_efficiency")
    out = tmp_path / "efficiency.json"
    assert module.main(["--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["stack"] for row in rows] == ["conv", "conv-pool-conv"]
    for row in rows:
        for mode in ("blocking", "overlap"):
            lo, hi = row[f"ratio_{mode}_ci95"]
            assert row["t1"] > 0 and lo <= row[f"ratio_{mode}"] <= hi, row


@pytest.mark.system
def test_the_compile_benchmark_runs_quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Eager and compiled (aot_eager: the compiler's tracing, no code generation); CosmoFlow
    only: the U-Net's compiled steps are those of tests/spatial_parallel/test_compile.py."""
    module = _benchmark(monkeypatch, "spatial_compile")
    out = tmp_path / "compile.json"
    argv = ["--quick", "--models", "cosmoflow", "--compiler", "aot_eager", "--out", str(out)]
    assert module.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["model"] for row in rows] == ["cosmoflow"]
    for row in rows:
        lo, hi = row["ratio_ci95"]
        assert row["graphs"] > 0 and row["eager_ms"] > 0 and lo <= row["ratio"] <= hi, row


@pytest.mark.system
def test_the_fused_sweeps_benchmark_runs_quick(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The MLP, 1 and 2 copies: fused, sequential, concurrent and the peaks measured."""
    module = _benchmark(monkeypatch, "weather_fused_sweeps")
    out = tmp_path / "fused.json"
    assert module.main(["--quick", "--models", "mlp", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(row["model"], row["copies"]) for row in rows] == [("mlp", 1), ("mlp", 2)]
    for row in rows:
        lo, hi = row["speedup_ci95"]
        assert row["fused_samples_per_s"] > 0 and lo <= row["speedup"] <= hi, row
        assert row["ceiling"] > 0 and row["cores"] == torch.get_num_threads(), row
        assert row["fused_peak_mib"] > 0 and row["one_run_peak_mib"] > 0, row
    assert rows[0]["concurrent_samples_per_s"] is None and rows[1]["concurrent_samples_per_s"] > 0


@pytest.mark.system
def test_the_volumes_benchmark_gives_the_same_rows_fused_and_separate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Quick: two edges, two seeds, each edge's seeds fused or a process per run."""
    module = _benchmark(monkeypatch, "volumes_accuracy")
    reports = {}
    for how in ([], ["--separate"]):
        out = tmp_path / f"volumes{len(how)}.json"
        assert module.main(["--quick", *how, "--out", str(out)]) == 0
        reports[bool(how)] = json.loads(out.read_text())
    fused, separate = reports[False], reports[True]
    assert [(r["size"], r["seed"]) for r in fused["rows"]] == [(8, 0), (8, 1), (16, 0), (16, 1)]
    assert fused["rows"] == separate["rows"]
    assert fused["seconds"] > 0 and not fused["separate"] and separate["separate"]


@pytest.mark.system
def test_the_postprocessing_benchmark_trains_its_seeds_together(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """EMOS and the MLP with two seeds on a small ensemble: one EMOS fit, two fused runs."""
    from tests.weather.postprocess.test_train_evaluate import _write

    module = _benchmark(monkeypatch, "weather_postprocess")
    data, out = _write(tmp_path / "data.nc", dates=10, seed=0), tmp_path / "post.json"
    argv = [str(data), "--members", "3", "--epochs", "1", "--models", "emos", "mlp"]
    argv += ["--seeds", "0", "1", "--work", str(tmp_path / "runs"), "--out", str(out)]
    assert module.main(argv) == 0
    training = json.loads(out.read_text())["training"]
    assert sorted(training) == ["emos_3_seed0", "emos_4_seed0", "mlp_3_seed0", "mlp_3_seed1"]
    assert training["mlp_3_seed1"]["runs_trained_together"] == 2
    assert training["mlp_3_seed0"]["train_seconds"] == training["mlp_3_seed1"]["train_seconds"]
    assert module.main(argv) == 0  # the finished runs are kept, not trained again
    assert json.loads(out.read_text())["training"] == training


@pytest.mark.system
def test_the_spread_benchmark_trains_its_seeds_together(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two seeds of one configuration on a small ensemble: one fused sweep, both scored."""
    from tests.weather.postprocess.test_train_evaluate import _write

    module = _benchmark(monkeypatch, "weather_spread")
    # the benchmark reads a doubly periodic domain (the toy presets'): longitudes closing 360
    written = xr.load_dataset(_write(tmp_path / "raw.nc", dates=12, seed=0))
    data, out = tmp_path / "data.nc", tmp_path / "spread.json"
    written.assign_coords(lon=np.arange(8) * 45.0, lat=np.linspace(-70, 70, 8)).to_netcdf(data)
    argv = [str(data), "--members", "3", "--epochs", "1", "--temporal", "1", "--seeds", "0", "1"]
    argv += ["--base-channels", "4", "--work", str(tmp_path / "runs"), "--out", str(out)]
    assert module.main(argv) == 0
    report = json.loads(out.read_text())
    runs = sorted(name for name in report["seconds"] if name != "evaluate")
    assert [name[-5:] for name in runs] == ["seed0", "seed1"]
    assert report["seconds"][runs[0]] == report["seconds"][runs[1]]  # one sweep's time
    models = {row["model"] for row in report["rows"]}
    assert all(any(model.endswith(run) for model in models) for run in runs), models


@pytest.mark.system
def test_the_defaults_benchmark_selects_on_validation_and_tests_the_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Both stages on a small ensemble, through the command line; EMOS and the raw rows."""
    from tests.weather.postprocess.test_train_evaluate import _write

    module = _benchmark(monkeypatch, "weather_defaults")
    data = _write(tmp_path / "draw.nc", dates=10, seed=0)
    common = [str(data), "--members", "3", "--seeds", "0,1", "--work", str(tmp_path / "runs")]
    out = tmp_path / "select.json"
    argv = [*common, "--stage", "select", "--candidates", "mlp:0.01:1", "--out", str(out)]
    assert module.main(argv) == 0
    report = json.loads(out.read_text())
    models = {row["model"] for row in report["summary"]}
    assert {"mlp_3", "mlp_3_combined", "emos_3", "raw_4", "raw_3"} <= models
    assert {row["draw"] for row in report["summary"]} == {"draw"}
    assert module.main([*common, "--stage", "test", "--out", str(tmp_path / "test.json")]) == 0
    test = json.loads((tmp_path / "test.json").read_text())["summary"]
    emos = next(row for row in test if row["model"] == "emos_3")
    assert emos["vs_emos"] == 0 and 0 < emos["vs_raw_full"] < 1
    assert {"pooled_3_seed0", "pooled_3_seed1", "pooled_3_combined"} <= {r["model"] for r in test}


@pytest.mark.system
def test_the_streaming_benchmark_runs_quick(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every case on both layouts; a streamed chunk read once in its epoch."""
    module = _benchmark(monkeypatch, "weather_streaming")
    out = tmp_path / "streaming.json"
    assert module.main(["--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["case"] for row in rows] == ["stream", "lazy", "memory", "stream", "lazy"]
    for row in rows:
        assert row["samples_per_s"] > 0 and row["cpu_s_per_sample"] > 0, row
        if row["case"] == "stream":
            assert row["chunk_reads"] == 1, row


@pytest.mark.system
def test_the_scale_benchmark_runs_quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each file streamed at the limit, a chunk once an epoch, the float64 losses and the
    scores of blocks those of the whole file."""
    module = _benchmark(monkeypatch, "weather_scale")
    out = tmp_path / "scale.json"
    assert module.main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["rows"]
    training = [row for row in rows if row["case"] in ("memory", "stream")]
    assert [(row["case"], row["file_x_limit"]) for row in training] == 2 * [
        ("memory", 1),
        ("stream", 1),
        ("stream", 4),
        ("stream", 8),
    ]
    for row in training:
        assert row["samples_per_s"] > 0 and row["cpu_s_per_sample"] > 0, row
        assert row["data_mib"] * 2**20 > report["memory_limit"] * row["file_x_limit"], row
        if row["case"] == "stream":
            # every chunk of the file read once, neighbours together
            assert row["chunks_read"] == -(-row["start_dates"] // row["chunk_dates"]), row
            assert 1 <= row["reads"] <= row["chunks_read"], row
        if row["file_x_limit"] == 4 and row["case"] == "stream":
            assert row["loss_diff_f64"] == 0, row
    evaluated = [row for row in rows if row["case"].startswith("evaluate")]
    assert [(row["case"], row["file_x_limit"]) for row in evaluated] == [
        ("evaluate blocks", 1),
        ("evaluate whole", 1),
        ("evaluate blocks", 4),
        ("evaluate blocks", 8),
    ]
    assert all(row["peak_rss_mib"] > 0 for row in evaluated)
    assert evaluated[1]["max_rel_diff"] < 1e-9


@pytest.mark.system
def test_the_token_gathers_benchmark_runs_quick(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """UNETR gathers its keys and values only, on a depth split and on 2 x 2 (its tokens
    merge depth and height there, and stay on the blocks)."""
    pytest.importorskip("einops")
    module = _benchmark(monkeypatch, "spatial_token_gathers")
    out = tmp_path / "gathers.json"
    assert module.main(["--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["ranks"]) for r in rows] == [("UNETR", 2), ("UNETR", 4)]
    assert all(r["same_on_every_rank"] and r["within_bounds"] for r in rows)
    for row in rows:  # k, v a layer: 8 tokens x hidden 12
        assert (row["gathers"], row["largest_elements"]) == (24, 8 * 12), row
