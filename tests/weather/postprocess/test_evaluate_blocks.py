"""Block-wise evaluation: the whole-file scores, a block of start dates at a time."""

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from sciml.training import TrainConfig
from sciml.weather.blocks import auto_block_dates, date_blocks
from sciml.weather.labels import LabelMismatch
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate import score_runs
from sciml.weather.postprocess.evaluate_rows import SCORES
from sciml.weather.postprocess.train import train_postprocessor
from tests.weather.postprocess.test_evaluate import _ensemble

#: Sums of a few hundred float64 terms in another order: about n * 2**-53 apart, relative.
RTOL = 1e-12


@pytest.fixture(scope="module")
def data() -> tuple[xr.Dataset, xr.Dataset]:
    """Training data and 7 test dates whose truth has missing points and ties with members."""
    train, test = _ensemble(dates=6, seed=0), _ensemble(dates=7, seed=1)
    truth = test["psi_truth"].values.copy()
    truth[2, 0, 1, 0, :2] = np.nan
    truth[5, 1, :, 2, 3] = np.nan
    members = test["psi"].values
    truth[:, 1, 0, 1, 1] = members[0, :, 1, 0, 1, 1]  # the observation equals a member
    truth[3, 0, 1, 2, :] = members[1, 3, 0, 1, 2, :]
    return train, test.assign(psi_truth=test["psi_truth"].copy(data=truth))


@pytest.fixture(scope="module")
def runs(data: tuple[xr.Dataset, xr.Dataset], tmp_path_factory: pytest.TempPathFactory) -> list:
    """EMOS and a deep model of two seeds (seed rows, their mean and the combined forecast)."""
    folder = tmp_path_factory.mktemp("runs")
    out = []
    for name, model, seed in (("emos", "emos", 0), ("mlp0", "mlp", 0), ("mlp1", "mlp", 1)):
        out.append(folder / name)
        config = PostprocessConfig(
            model=model,
            members=2,
            missing="mask",  # the test truth has missing points
            train=TrainConfig(epochs=1, seed=seed, progress=False, tensorboard=False),
        )
        train_postprocessor(data[0], config, out[-1])
    return out


def _assert_same_table(whole: pd.DataFrame, blocks: pd.DataFrame) -> None:
    """The same rows and labels; scores to the rounding of sums taken in another order."""
    assert list(blocks.columns) == list(whole.columns)
    assert len(blocks) == len(whole)
    for column in whole.columns:
        a, b = whole[column], blocks[column]
        if not pd.api.types.is_float_dtype(a):
            pd.testing.assert_series_equal(b, a)
            continue
        assert (a.isna() == b.isna()).all(), column
        if column.endswith("_std"):  # a difference of seeds' scores: to their scale
            scale = whole[column.removesuffix("_std")].abs().to_numpy()
            np.testing.assert_allclose(b, a, rtol=0, atol=RTOL * np.nanmax(scale), err_msg=column)
        elif column.endswith("_skill") and column != "spread_skill":  # 1 - a ratio
            np.testing.assert_allclose(1 - b, 1 - a, rtol=RTOL, err_msg=column)
        else:
            np.testing.assert_allclose(b, a, rtol=RTOL, err_msg=column)


@pytest.mark.parametrize("climate", [False, True], ids=["test-climate", "train-climate"])
@pytest.mark.parametrize("block", [1, 3, 100])
def test_blocks_score_as_the_whole_file(
    data: tuple[xr.Dataset, xr.Dataset], runs: list, block: int, climate: bool
) -> None:
    train, test = data
    other = train if climate else None
    whole = score_runs(runs, test, climate=other, extreme_fraction=0.1, block_dates=0)
    blocks = score_runs(runs, test, climate=other, extreme_fraction=0.1, block_dates=block)
    assert {"raw_4", "raw_2", "emos_2", "mlp_2", "mlp_2_seed0", "mlp_2_combined"} <= set(
        whole.table.model
    )
    _assert_same_table(whole.table, blocks.table)
    assert whole.table[list(SCORES)].notna().any().all()
    assert blocks.climate == whole.climate
    assert blocks.histograms.keys() == whole.histograms.keys()
    for model, histograms in whole.histograms.items():
        for var, histogram in histograms.items():
            xr.testing.assert_identical(blocks.histograms[model][var], histogram)


def test_the_test_data_have_ties_and_missing_truth(data: tuple[xr.Dataset, xr.Dataset]) -> None:
    """The comparison above sees ties (broken by random draws) and missing points (counts)."""
    _, test = data
    assert int((test["psi"] == test["psi_truth"]).sum()) >= 10
    assert int(test["psi_truth"].isnull().sum()) == 4


def test_block_sizes() -> None:
    assert date_blocks(7, 3) == [slice(0, 3), slice(3, 6), slice(6, 7)]
    assert date_blocks(2, 100) == [slice(0, 2)]
    with pytest.raises(ValueError, match="at least one start date"):
        date_blocks(7, 0)
    test = _ensemble(dates=10, seed=0)  # 4 members x 2 lead times x 2 levels x 12 points
    assert auto_block_dates(test, ["psi"], budget=8 * 192 * 3) == 3
    assert auto_block_dates(test, ["psi"], budget=1) == 1


def test_negative_block_is_refused(data: tuple[xr.Dataset, xr.Dataset], runs: list) -> None:
    with pytest.raises(ValueError, match="block_dates must be >= 0"):
        score_runs(runs[:1], data[1], block_dates=-1)


_PEAK = """
import sys, tempfile, tracemalloc
from pathlib import Path
import numpy as np, xarray as xr
from sciml.training import TrainConfig
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.evaluate import score_runs
from sciml.weather.postprocess.train import train_postprocessor

def ensemble(dates, seed):
    rng = np.random.default_rng(seed)
    dims = ("member", "time", "lead_time", "lat", "lon")
    shape = (8, dates, 2, 24, 48)
    signal = rng.standard_normal(shape[1:])
    coords = {
        "time": np.datetime64("2000-01-01") + np.arange(dates) * np.timedelta64(1, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "lat": np.linspace(-60, 60, shape[3]),
        "lon": np.arange(shape[4]) * 7.5,
    }
    members = (signal + 0.5 * rng.standard_normal(shape)).astype(np.float32)
    truth = (1.2 * signal + 0.3 * rng.standard_normal(shape[1:])).astype(np.float32)
    data = {"t": (dims, members, {"units": "K"}), "t_truth": (dims[1:], truth, {"units": "K"})}
    return xr.Dataset(data, coords=coords)

folder = Path(sys.argv[1])
config = PostprocessConfig(
    model="emos", members=4, variables=("t",), channel_dims=(),
    train=TrainConfig(progress=False, tensorboard=False),
)
train_postprocessor(ensemble(4, 0), config, folder / "run")
peaks = []
for dates in (6, 24):
    path = folder / f"test{dates}.nc"
    ensemble(dates, 1).to_netcdf(path)
    with xr.open_dataset(path, chunks={}) as test:  # one Dask chunk: the whole file
        if not peaks:  # compile and import outside the measurement
            score_runs([folder / "run"], test, block_dates=2)
        tracemalloc.start()
        score_runs([folder / "run"], test, block_dates=2)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
print(*peaks, ensemble(2, 0)["t"].nbytes)
"""


def test_peak_memory_follows_the_block_not_the_file(tmp_path: Path) -> None:
    """A file of 4x the start dates, the same blocks: about the same peak.

    Measured in a fresh interpreter: tracemalloc counts every thread of its process, and a
    test process may hold other tests' threads allocating meanwhile.
    """
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    small, large, block = map(int, done.stdout.split())
    # a whole-file evaluation holds the ensemble in float64 several times: 4x the dates, 4x
    assert large < 1.3 * small, (
        f"peaks {small / 1e6:.2f} and {large / 1e6:.2f} MB, a block {block / 1e6:.2f} MB"
    )


def test_data_a_run_refuses_are_refused_before_the_climates_are_read(
    data: tuple[xr.Dataset, xr.Dataset], runs: list, caplog: pytest.LogCaptureFixture
) -> None:
    """Another grid is refused by the first date's prediction, not after passes over the file."""
    other = data[1].assign_coords(lat=[11.0, 21.0, 31.0])
    with caplog.at_level(logging.INFO), pytest.raises(LabelMismatch, match="lat"):
        score_runs(runs, other, block_dates=2)
    assert not [r for r in caplog.records if "climates" in r.getMessage()]
