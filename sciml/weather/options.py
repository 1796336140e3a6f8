"""The names the weather commands offer, kept free of heavy imports.

``sciml weather ... --help`` lists them without importing torch, xarray or
pandas; the modules that implement each option import their names from here.
"""

from __future__ import annotations

__all__ = ["DEEP_MODELS", "LOSS_SCALES", "MODELS", "SPREAD_LOSSES"]

#: The deep post-processors of :mod:`sciml.weather.postprocess.train` (they read the lead time).
DEEP_MODELS = ("mlp", "unet", "mixed", "pooled")

#: Every post-processor ``sciml weather train --model`` trains.
MODELS = ("emos", *DEEP_MODELS)

#: ``"raw-crps"``: each channel's and lead time's CRPS divided by the raw ensemble's;
#: ``"none"``: the plain mean CRPS in normalised units (:mod:`.postprocess.loss_scale`).
LOSS_SCALES = ("raw-crps", "none")

#: The spread predictor's losses against the full ensemble's spread (:mod:`sciml.weather.spread`).
SPREAD_LOSSES = ("l1", "mse", "log_l1", "crps")
