"""Verification of ensemble forecasts: the one public face of the metrics.

The CRPS family (:mod:`.crps`), spread-skill, rank histograms and dispersion
(:mod:`.dispersion`) are imported from here (``from sciml.weather.metrics import
crps_ensemble, crps_gaussian``); reliability, extremes, the NumPy kernels, the torch
losses and the input checks are in their own modules.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.weather.metrics.crps import (
        crps_ensemble,
        crps_ensemble_efi_weighted,
        crps_gaussian,
        crps_skill_score,
        extreme_forecast_index,
        latitude_weights,
        twcrps_ensemble,
    )
    from sciml.weather.metrics.dispersion import (
        ensemble_mean_rmse,
        ensemble_spread,
        rank_histogram,
        spread_skill_ratio,
    )

#: The module of each public name (imported on first use).
_HOMES = {
    "crps_ensemble": "crps",
    "crps_ensemble_efi_weighted": "crps",
    "crps_gaussian": "crps",
    "crps_skill_score": "crps",
    "ensemble_mean_rmse": "dispersion",
    "ensemble_spread": "dispersion",
    "extreme_forecast_index": "crps",
    "latitude_weights": "crps",
    "rank_histogram": "dispersion",
    "spread_skill_ratio": "dispersion",
    "twcrps_ensemble": "crps",
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
