"""``evaluate_runs``: extreme-event scores, rank/PIT reliability and seeds, on tiny toy sets."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy.stats import norm

from sciml.training import TrainConfig
from sciml.weather.metrics.reliability import reliability_index
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.emos import emos_predict, fit_emos
from sciml.weather.postprocess.evaluate import evaluate_runs, score_runs
from sciml.weather.postprocess.evaluate_rows import SCORES
from sciml.weather.postprocess.predict import predict_run
from sciml.weather.postprocess.train import train_postprocessor
from tests.weather.conftest import pairwise_crps


def _ensemble(*, dates: int, seed: int, lat: tuple[float, ...] = (10.0, 20.0, 30.0)) -> xr.Dataset:
    """A biased 4-member ensemble of one variable on 2 levels, 2 lead times, a 3x4 grid."""
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    shape = (4, dates, 2, 2, len(lat), 4)
    signal = rng.standard_normal(shape[1:])
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [1, 2],
        "lat": list(lat),
        "lon": np.arange(4) * 90.0,
    }
    truth = 1.3 * signal + 0.2 + 0.5 * rng.standard_normal(shape[1:])
    data = {
        "psi": (dims, signal + 0.5 * rng.standard_normal(shape), {"units": "1"}),
        "psi_truth": (dims[1:], truth, {"units": "1"}),
    }
    ds = xr.Dataset(data, coords=coords)
    return ds.assign_coords(valid_time=ds["time"] + ds["lead_time"])  # as the toy has it


@pytest.fixture(scope="module")
def data() -> tuple[xr.Dataset, xr.Dataset]:
    return _ensemble(dates=6, seed=0), _ensemble(dates=2, seed=1)


@pytest.fixture(scope="module")
def runs(data: tuple[xr.Dataset, xr.Dataset], tmp_path_factory: pytest.TempPathFactory) -> dict:
    train, _ = data
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for name, model, seed in (("emos", "emos", 0), ("mlp0", "mlp", 0), ("mlp1", "mlp", 1)):
        out[name] = folder / name
        train_postprocessor(
            train,
            PostprocessConfig(
                model=model,
                members=2,
                train=TrainConfig(epochs=1, seed=seed, progress=False, tensorboard=False),
            ),
            out[name],
        )
    return out


def test_extreme_scores_of_the_raw_ensemble_match_a_direct_computation(
    data: tuple[xr.Dataset, xr.Dataset], runs: dict
) -> None:
    train, test = data
    table = evaluate_runs([runs["emos"]], test, climate=train, extreme_fraction=0.25)
    row = table[(table.model == "raw_4") & (table.level == 2) & (table.lead_days == 1.0)]
    assert len(row) == 1
    ens = test["psi"].sel(level=2).isel(lead_time=1).values  # (member, time, lat, lon)
    y = test["psi_truth"].sel(level=2).isel(lead_time=1).values
    crps = pairwise_crps(y, np.moveaxis(ens, 0, -1))
    # the model climate: the training dates' members at each point; EFI from its CDF
    clim = train["psi"].sel(level=2).isel(lead_time=1).values.reshape(-1, 3, 4)
    efi = np.empty(y.shape)
    for t, i, j in np.ndindex(y.shape):
        cdf = np.interp(ens[:, t, i, j], np.sort(clim[:, i, j]), np.linspace(0, 1, clim.shape[0]))
        efi[t, i, j] = 4 / (np.pi * 4) * np.arcsin(np.sqrt(cdf)).sum() - 1
    anomaly = np.abs(y - train["psi_truth"].sel(level=2).isel(lead_time=1).values.mean(0))
    extreme = anomaly >= np.quantile(anomaly, 0.75)
    assert row.crps.item() == pytest.approx(crps.mean(), rel=1e-12)
    assert row.crps_efi.item() == pytest.approx((np.abs(efi) * crps).mean(), rel=1e-12)
    assert row.crps_extreme.item() == pytest.approx(crps[extreme].mean(), rel=1e-12)
    assert (row[["crps_skill", "crps_efi_skill", "crps_extreme_skill"]] == 0).all(axis=None)
    # every model is weighted alike: the skills are those of the scores' ratios
    emos = table[(table.model == "emos_2") & (table.level == 2) & (table.lead_days == 1.0)]
    assert emos.crps_efi_skill.item() == pytest.approx(
        1 - emos.crps_efi.item() / row.crps_efi.item()
    )


def test_reliability_columns_and_histograms(
    data: tuple[xr.Dataset, xr.Dataset], runs: dict
) -> None:
    _, test = data
    evaluation = score_runs([runs["emos"]], test)
    assert evaluation.climate == "test"
    hists = evaluation.histograms
    assert set(hists) == {"raw_4", "raw_2", "emos_2"}
    assert hists["raw_4"]["psi"].sizes["rank"] == 5 and hists["raw_2"]["psi"].sizes["rank"] == 3
    # the Gaussian's PIT histogram has the raw full ensemble's bins, over every point of a row
    assert hists["emos_2"]["psi"].sizes["bin"] == 5
    assert (hists["emos_2"]["psi"].sum("bin") == 2 * 3 * 4).all()
    table = evaluation.table.set_index(["model", "level", "lead_days"])
    expected = reliability_index(hists["emos_2"]["psi"].sel(level=1).isel(lead_time=0))
    assert table.loc[("emos_2", 1, 0.0), "reliability"] == pytest.approx(float(expected))


def test_seeds_are_aggregated_and_kept(data: tuple[xr.Dataset, xr.Dataset], runs: dict) -> None:
    _, test = data
    table = evaluate_runs([runs["emos"], runs["mlp0"], runs["mlp1"]], test)
    counts = table.groupby("model").seeds.first().to_dict()
    assert counts == {
        "raw_4": 0,
        "raw_2": 0,
        "emos_2": 1,
        "mlp_2_seed0": 1,
        "mlp_2_seed1": 1,
        "mlp_2": 2,
        "mlp_2_combined": 2,
    }
    key = ["level", "lead_days"]
    seeds = table[table.model.str.startswith("mlp_2_seed")].groupby(key)[list(SCORES)]
    mean = table[table.model == "mlp_2"].set_index(key).sort_index()
    pd.testing.assert_frame_equal(mean[list(SCORES)], seeds.mean(), check_names=False)
    std = mean[[f"{s}_std" for s in SCORES]].set_axis(list(SCORES), axis=1)
    pd.testing.assert_frame_equal(std, seeds.std(ddof=1), check_names=False)
    assert table[table.model == "emos_2"].crps_std.isna().all()
    # one row per model, variable, level and lead time
    assert not table.duplicated(["model", "variable", "level", "lead_days"]).any()


def test_the_combined_row_scores_the_gaussian_of_the_seeds_mean_quantiles(
    data: tuple[xr.Dataset, xr.Dataset], runs: dict
) -> None:
    _, test = data
    evaluation = score_runs([runs["mlp0"], runs["mlp1"]], test)
    table = evaluation.table.set_index(["model", "level", "lead_days"]).sort_index()
    # the closed form of the Gaussian CRPS (Gneiting et al. 2005), on mean mu and mean sigma
    (mu0, sigma0), (mu1, sigma1) = (predict_run(runs[r], test)["psi"] for r in ("mlp0", "mlp1"))
    mu, sigma = (mu0 + mu1) / 2, (sigma0 + sigma1) / 2
    z = (test["psi_truth"] - mu) / sigma
    crps = sigma * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    expected = crps.mean(["time", "lat", "lon"])
    for level in (1, 2):
        for lead in (0, 1):
            row = table.loc[("mlp_2_combined", level, float(lead))]
            assert row.crps == pytest.approx(float(expected.sel(level=level)[lead]), rel=1e-12)
            assert row.seeds == 2 and np.isnan(row.crps_std)
            # quantile scores are convex in the quantile: never worse than the seeds' mean
            assert row.crps <= table.loc[("mlp_2", level, float(lead)), "crps"] * (1 + 1e-12)
    assert evaluation.histograms["mlp_2_combined"]["psi"].sum("bin").min() == 2 * 3 * 4


def test_runs_that_differ_beyond_the_seed_are_told_apart(
    data: tuple[xr.Dataset, xr.Dataset], runs: dict, tmp_path: Path
) -> None:
    train, test = data
    other = tmp_path / "mlp_lr"
    train_postprocessor(
        train,
        PostprocessConfig(
            model="mlp",
            members=2,
            lr=0.01,
            train=TrainConfig(epochs=1, progress=False, tensorboard=False),
        ),
        other,
    )
    table = evaluate_runs([runs["mlp0"], other, runs["mlp1"]], test)
    # named by the options in which they differ; the seeds of one configuration stay one model
    rate = f"lr{PostprocessConfig().lr}"  # the fixture's runs train at the default rate
    assert {f"mlp_2_{rate}", f"mlp_2_{rate}_seed1", "mlp_2_lr0.01"} <= set(table.model)
    assert {f"mlp_2_{rate}_combined", f"mlp_2_{rate}_seed0"} <= set(table.model)
    with pytest.raises(ValueError, match="the same configuration and seed"):
        evaluate_runs([runs["mlp0"], runs["mlp0"]], test)


def test_climate_must_line_up_with_the_test_data(
    data: tuple[xr.Dataset, xr.Dataset], runs: dict
) -> None:
    train, test = data
    with pytest.raises(ValueError, match=r"the climate data \(--climate\) lack \['psi'\]"):
        evaluate_runs([runs["emos"]], test, climate=train.drop_vars("psi_truth"))
    with pytest.raises(ValueError, match="'lat' coordinates differ"):
        evaluate_runs([runs["emos"]], test, climate=train.assign_coords(lat=[0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="must have the dimensions of the truth"):
        evaluate_runs([runs["emos"]], test, climate=train.isel(level=0))
    with pytest.raises(ValueError, match="extreme fraction must lie in"):
        evaluate_runs([runs["emos"]], test, extreme_fraction=0)
    with pytest.raises(ValueError, match=r"no \['lead_time'\] dimension"):
        evaluate_runs([runs["emos"]], test.isel(lead_time=0))


def _with_surface(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with a surface field ``t2m`` (no level) beside the levelled ``psi``."""
    return ds.assign(
        t2m=(2 * ds["psi"].isel(level=0, drop=True) + 1).assign_attrs(units="K"),
        t2m_truth=(ds["psi_truth"].isel(level=1, drop=True) - 1).assign_attrs(units="K"),
    )


def test_emos_fits_and_scores_a_surface_field_beside_levelled_ones(
    data: tuple[xr.Dataset, xr.Dataset], tmp_path: Path
) -> None:
    train, test = (_with_surface(ds) for ds in data)
    run = tmp_path / "emos"
    train_postprocessor(
        train,
        PostprocessConfig(
            model="emos", members=2, train=TrainConfig(progress=False, tensorboard=False)
        ),
        run,
    )
    mu, sigma = predict_run(run, test)["t2m"]
    assert mu.dims == sigma.dims == test["t2m_truth"].dims
    # the surface field's forecast is that of its own fit over every date given (EMOS has
    # nothing to choose on validation dates)
    alone = fit_emos(
        train["t2m_truth"], train["t2m"].isel(member=slice(2)), dim=["time", "lat", "lon"]
    )
    expected = emos_predict(alone, test["t2m"].isel(member=slice(2)))
    np.testing.assert_array_equal(mu.values, expected["mu"].values)
    np.testing.assert_array_equal(sigma.values, expected["sigma"].values)
    table = evaluate_runs([run], test, climate=train)
    surface = table[table.variable == "t2m"]
    # one row per model and lead time, without a level; skills against raw_4's t2m rows
    assert len(surface) == 3 * 2 and surface.level.isna().all()
    assert (surface[surface.model == "raw_4"].crps_skill == 0).all()
    assert surface.crps_skill.notna().all() and len(table) == 3 * 2 * 3


def test_emos_coefficients_are_taken_on_the_dims_each_variable_had(
    data: tuple[xr.Dataset, xr.Dataset], tmp_path: Path
) -> None:
    train, test = (_with_surface(ds) for ds in data)
    run = tmp_path / "one_level"
    one_level = train.isel(level=[0])
    train_postprocessor(
        one_level,
        PostprocessConfig(
            model="emos", members=2, train=TrainConfig(progress=False, tensorboard=False)
        ),
        run,
    )
    # psi had a level in training: test data without it are refused, not broadcast
    flat = test.isel(level=0, drop=True)
    with pytest.raises(ValueError, match=r"no 'level' dimension .* trained on data with one"):
        predict_run(run, flat)
    # t2m had none: a test t2m with levels is refused, not given the same coefficients
    levelled = test.isel(level=[0])
    levelled = levelled.assign(t2m=levelled["t2m"].expand_dims(level=levelled["level"]))
    with pytest.raises(ValueError, match=r"'t2m' had channel dims \[\] in training"):
        predict_run(run, levelled)
