"""Plots return figures with the expected content and reject badly shaped input."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from sciml.weather import metrics, plots  # noqa: E402


@pytest.fixture
def fields() -> tuple[xr.DataArray, xr.DataArray]:
    rng = np.random.default_rng(0)
    coords = {"lat": np.linspace(-30, 30, 5), "lon": np.arange(8.0)}
    fc = xr.DataArray(
        rng.standard_normal((4, 3, 5, 8)),
        dims=("member", "lead_time", "lat", "lon"),
        coords={**coords, "lead_time": np.array([0, 1, 2], "timedelta64[D]")},
    )
    ob = xr.DataArray(
        rng.standard_normal((3, 5, 8)),
        dims=("lead_time", "lat", "lon"),
        coords=fc.isel(member=0).coords,
        attrs={"units": "K"},
    )
    return ob, fc


def test_ensemble_maps(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    fig = plots.ensemble_maps(ob.isel(lead_time=0), fc.isel(lead_time=0), title="day 0")
    assert isinstance(fig, Figure)
    titles = [ax.get_title() for ax in fig.axes]
    assert {"ensemble mean", "ensemble spread", "error of the mean"} <= set(titles)
    with pytest.raises(ValueError, match="must have dimensions"):
        plots.ensemble_maps(ob, fc)


def test_rank_histogram_plot(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    hist = metrics.rank_histogram(ob, fc, dim=["lat", "lon"])
    fig = plots.rank_histogram_plot(hist)
    assert len(fig.axes) == 3
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    assert len(heights) == 5 and sum(heights) == pytest.approx(1.0)
    assert len(plots.rank_histogram_plot(metrics.rank_histogram(ob, fc)).axes) == 1
    with pytest.raises(ValueError, match="'rank'"):
        plots.rank_histogram_plot(ob)


def test_spread_skill_and_scores_by_lead(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    fig = plots.spread_skill_plot(ob, fc, bins=4)
    line = fig.axes[0].lines[1]
    assert len(line.get_xdata()) == 4
    crps = metrics.crps_ensemble(ob, fc, dim=["lat", "lon"])
    fig = plots.scores_by_lead({"CRPS": crps}, ylabel="CRPS")
    np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata(), [0, 1, 2])
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), crps.values)
    with pytest.raises(ValueError, match="bins"):
        plots.spread_skill_plot(ob.isel(lat=0, lon=0), fc.isel(lat=0, lon=0), bins=10)


def test_panel_titles_read_timedeltas_and_datetimes(
    fields: tuple[xr.DataArray, xr.DataArray],
) -> None:
    ob, fc = fields
    hist = metrics.rank_histogram(ob, fc, dim=["lat", "lon"])
    titles = [ax.get_title() for ax in plots.rank_histogram_plot(hist).axes]
    assert titles == ["lead_time = 0 days", "lead_time = 1 day", "lead_time = 2 days"]
    assert plots.format_value(np.timedelta64(30, "h")) == "1 day 6 h"
    assert plots.format_value(np.timedelta64(-90, "m")) == "-1 h 30 min"
    assert plots.format_value(np.datetime64("2000-01-03T00:00:00.000000000")) == "2000-01-03"
    assert plots.format_value(np.datetime64("2000-01-03T06:00", "ns")) == "2000-01-03 06:00"
    assert plots.format_value(np.datetime64("NaT", "ns")) == "NaT"
    assert plots.format_value(np.int64(4)) == "4"


def test_plots_reject_misaligned_inputs(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    shifted = fc.assign_coords(lon=fc["lon"] + 0.5)
    with pytest.raises(ValueError, match="'lon' coordinates differ"):
        plots.spread_skill_plot(ob, shifted, bins=4)
    with pytest.raises(ValueError, match="'lon' coordinates differ"):
        plots.ensemble_maps(ob.isel(lead_time=0), shifted.isel(lead_time=0))
    with pytest.raises(ValueError, match=r"missing \['lead_time'\]"):
        plots.spread_skill_plot(ob.isel(lead_time=0, drop=True), fc, bins=4)
    with pytest.raises(ValueError, match="bins must be an integer >= 1"):
        plots.spread_skill_plot(ob, fc, bins=0)
    # the same labels in another order give the same diagram
    flipped = fc.isel(lat=slice(None, None, -1))
    a = plots.spread_skill_plot(ob, fc, bins=4).axes[0].lines[1].get_xydata()
    b = plots.spread_skill_plot(ob, flipped, bins=4).axes[0].lines[1].get_xydata()
    np.testing.assert_array_equal(a, b)


def test_reliability_histograms(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    ranks = metrics.rank_histogram(ob, fc, dim=["lat", "lon"])  # (lead_time, rank)
    pit = ranks.rename(rank="bin").expand_dims(level=[1, 2])  # a PIT histogram's layout
    fig = plots.reliability_histograms({"t": ranks, "u": pit}, title="model")
    assert len(fig.axes) == 3 * 3  # rows: t, u at two levels; a column per lead time
    assert fig.axes[3].get_title() == "u, level 1, lead 0 days"
    assert fig.axes[0].get_xlabel() == "rank" and fig.axes[3].get_xlabel() == "PIT"
    assert fig.axes[0].patches[0].get_height() == pytest.approx(float(ranks[0, 0] / 40))
    with pytest.raises(ValueError, match="'rank' or 'bin'"):
        plots.reliability_histograms({"t": ranks.rename(rank="r")})
    with pytest.raises(ValueError, match="at most one more"):
        plots.reliability_histograms({"t": pit.expand_dims(x=[0])})


def test_map_colour_scales_are_not_set_by_an_outlier() -> None:
    rng = np.random.default_rng(1)
    coords = {"lat": np.linspace(-30, 30, 20), "lon": np.arange(20.0)}
    fc = xr.DataArray(
        rng.standard_normal((4, 20, 20)), dims=("member", "lat", "lon"), coords=coords
    )
    ob = xr.DataArray(rng.standard_normal((20, 20)), dims=("lat", "lon"), coords=coords)
    ob[2, 3] = 1e3  # one bad pixel of 400
    fig = plots.ensemble_maps(ob, fc)
    limit = np.percentile(np.abs(fc.mean("member") - ob).values, 98)  # xarray's robust range
    mean = np.percentile(fc.mean("member").values, [2, 98])
    spread = np.percentile(fc.std("member", ddof=1).values, 98)
    mesh = {ax.get_title(): ax.collections[0].get_clim() for ax in fig.axes if ax.collections}
    assert mesh["error of the mean"] == pytest.approx((-limit, limit))
    assert mesh["ensemble mean"] == pytest.approx(tuple(mean))
    assert mesh["ensemble spread"] == pytest.approx((0.0, spread))
    assert limit < 10  # the outlier is off the scale, not its end


def test_many_rank_histograms_fill_a_grid(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    lead = np.arange(8).astype("timedelta64[h]") * 6
    hist = metrics.rank_histogram(ob, fc, dim=["lat", "lon"]).isel(lead_time=[0] * 8)
    fig = plots.rank_histogram_plot(hist.assign_coords(lead_time=lead))
    rows = {round(ax.get_position().y0, 3) for ax in fig.axes}
    columns = {round(ax.get_position().x0, 3) for ax in fig.axes}
    assert len(fig.axes) == 8 and len(rows) == 2 and len(columns) == 4
    width, height = fig.get_size_inches()
    assert width / height < 3  # not a strip
    assert [ax.get_title() for ax in fig.axes][:3] == [
        "lead_time = 0 h",
        "lead_time = 6 h",
        "lead_time = 12 h",
    ]
    for ax in fig.axes:
        np.testing.assert_array_equal(ax.get_xticks(), np.round(ax.get_xticks()))


def test_pit_histograms_are_drawn_on_the_unit_interval(
    fields: tuple[xr.DataArray, xr.DataArray],
) -> None:
    ob, fc = fields
    pit = metrics.rank_histogram(ob, fc, dim=["lat", "lon"]).rename(rank="bin")
    ax = plots.reliability_histograms({"t": pit}).axes[0]
    assert ax.get_xlim() == (0.0, 1.0)
    centres = [bar.get_x() + bar.get_width() / 2 for bar in ax.patches]
    np.testing.assert_allclose(centres, (np.arange(5) + 0.5) / 5)


def test_legends_do_not_cover_the_data(fields: tuple[xr.DataArray, xr.DataArray]) -> None:
    ob, fc = fields
    crps = metrics.crps_ensemble(ob, fc, dim=["lat", "lon"])
    for fig in (
        plots.spread_skill_plot(ob, fc, bins=4),
        plots.scores_by_lead({"CRPS": crps, "twice": 2 * crps}, ylabel="CRPS"),
    ):
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent()
        assert not legend.overlaps(ax.get_window_extent())
