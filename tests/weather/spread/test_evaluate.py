"""Spread scores align their inputs by label."""

import pytest

from sciml.weather.spread.evaluate import spread_scores
from tests.weather.spread.test_data import tiny_ensemble


def test_scores_align_by_label() -> None:
    ds = tiny_ensemble(dates=2)
    full = ds["psi"].std("member", ddof=1)
    with pytest.raises(ValueError, match="other coordinates"):
        spread_scores(full.assign_coords(level=[2, 1]), full)
    with pytest.raises(ValueError, match="dims differ"):
        spread_scores(full.isel(level=0), full)
