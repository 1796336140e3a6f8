"""Verification of ensemble forecasts.

The CRPS family, spread-skill, rank histograms, dispersion, reliability and
extremes, with their NumPy kernels and torch losses.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.weather.metrics.dispersion import (
        ensemble_mean_rmse,
        ensemble_spread,
        rank_histogram,
        spread_skill_ratio,
    )
    from sciml.weather.metrics.scores import (
        crps_ensemble,
        crps_ensemble_efi_weighted,
        crps_gaussian,
        crps_skill_score,
        extreme_forecast_index,
        latitude_weights,
        twcrps_ensemble,
    )

#: The module of each public name (imported on first use).
_HOMES = {
    "crps_ensemble": "scores",
    "crps_ensemble_efi_weighted": "scores",
    "crps_gaussian": "scores",
    "crps_skill_score": "scores",
    "ensemble_mean_rmse": "dispersion",
    "ensemble_spread": "dispersion",
    "extreme_forecast_index": "scores",
    "latitude_weights": "scores",
    "rank_histogram": "dispersion",
    "spread_skill_ratio": "dispersion",
    "twcrps_ensemble": "scores",
}

__all__ = [
    "crps_ensemble",
    "crps_ensemble_efi_weighted",
    "crps_gaussian",
    "crps_skill_score",
    "ensemble_mean_rmse",
    "ensemble_spread",
    "extreme_forecast_index",
    "latitude_weights",
    "rank_histogram",
    "spread_skill_ratio",
    "twcrps_ensemble",
]

make_lazy(__name__, _HOMES)
