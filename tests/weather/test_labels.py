"""Recorded labels are matched (another order, another longitude convention) or refused."""

import numpy as np
import pytest

from sciml.weather.labels import LabelMismatch, coordinate_record, match_labels

SIDES = ("the run in R (--run-dir)", "the data (test.nc)")


def test_labels_in_another_order_or_convention_are_found() -> None:
    lat = np.linspace(-90.0, 90.0, 1801)  # 0.1 degrees: most labels round in float32
    record = coordinate_record(lat, size=lat.size)
    # north to south (as ERA5's run), in float32: the same points (a float32 rounding moves
    # a label by at most 2**-24 of 90, within the tolerance of two roundings)
    north_first = lat[::-1].astype(np.float32)
    assert not np.array_equal(north_first.astype(np.float64), lat[::-1])
    np.testing.assert_array_equal(
        match_labels(record, north_first, dim="lat", sides=SIDES), np.arange(1801)[::-1]
    )
    lon = np.arange(0.0, 360.0, 0.25)
    shifted = (lon + 180) % 360 - 180  # -180..180, sorted: positions shift by half a turn
    order = np.argsort(shifted)
    positions = match_labels(
        coordinate_record(lon, size=lon.size), shifted[order], dim="lon", sides=SIDES, period=360
    )
    np.testing.assert_array_equal(shifted[order][positions] % 360, lon)


@pytest.mark.parametrize(
    ("found", "options", "message"),
    [
        (np.linspace(-89.0, 91.0, 5), {}, r"it lacks the labels \[-90.0, -45.0"),
        (np.linspace(-90.0, 90.0, 4), {}, "another number of points"),
        (5, {}, "only one side is labelled"),
        (np.linspace(-90.0, 90.0, 5) + 1e-3, {}, "it lacks the labels"),  # 1e-3 > 2 roundings
        (np.array([-90.0, 0.0, 95.0]), {"subset": True}, r"its labels \[95.0\] are not among"),
    ],
)
def test_other_labels_are_refused_naming_both_sides(
    found: np.ndarray | int, options: dict[str, bool], message: str
) -> None:
    record = coordinate_record(np.linspace(-90.0, 90.0, 5), size=5)
    with pytest.raises(LabelMismatch, match=message) as caught:
        match_labels(record, found, dim="lat", sides=SIDES, **options)
    assert str(caught.value).startswith(f"'lat': {SIDES[0]} has 5 labels") and SIDES[1] in str(
        caught.value
    )


def test_a_fingerprint_checks_long_labels_in_their_order() -> None:
    times = np.datetime64("2000-01-01") + np.arange(10) * np.timedelta64(1, "D")
    record = coordinate_record(times, size=10, values_up_to=0)
    assert "values" not in record and record["first"] != record["last"]
    np.testing.assert_array_equal(match_labels(record, times, dim="time", sides=SIDES), range(10))
    with pytest.raises(LabelMismatch, match=r"2000-01-01 00:00:00 .. 2000-01-10.*fingerprints"):
        match_labels(record, times[:-1], dim="time", sides=SIDES)
