"""Ensemble weather: data, verification, toy QG ensembles, post-processing, spread, plots.

Subpackages: :mod:`.metrics` (CRPS family, spread-skill, rank histograms, dispersion,
reliability, extremes; NumPy kernels and torch losses), :mod:`.toy` (two-layer QG model,
ensemble generator, evaluation presets), :mod:`.postprocess` (EMOS and the deep
post-processors, ``sciml weather train|evaluate``) and :mod:`.spread` (the 3-D U-Net
spread predictor, ``sciml weather spread``). Modules: :mod:`.data` (``open_ensemble``),
:mod:`.dataset` (torch samples of k members, truth, spread, lead time, static fields),
:mod:`.grid` (the grid a run was trained on), :mod:`.periodic` (longitude wrap-around),
:mod:`.verify` (score tables), :mod:`.crossval` (cross-validation of a real sample without
a truth), :mod:`.split` (the one split by start date), :mod:`.plots`, :mod:`.options` and
:mod:`.cli`.
"""
