"""Ensemble weather: data, verification, toy QG ensembles, post-processing, spread, plots.

Modules: :mod:`.data` (``open_ensemble``, splits by start date), :mod:`.metrics` (CRPS
family, spread-skill, rank histogram; kernels in :mod:`.kernels`), :mod:`.losses` (torch
CRPS losses), :mod:`.qg`, :mod:`.toy` and :mod:`.toy_presets` (two-layer QG model, ensemble
generator, the fixed evaluation presets), :mod:`.verify` (score tables), :mod:`.dataset`
(torch samples of k members, truth, spread, lead time, static fields), :mod:`.emos` (EMOS),
the deep post-processors :mod:`.postprocess` (per-point MLP and U-Net, the residual
Gaussian head), :mod:`.mixed` (U-Net + :mod:`.locally_connected` output layer) and
:mod:`.pooled` (member-permutation invariant), with longitude wrap-around in
:mod:`.periodic`; :mod:`.train`, :mod:`.predict` and :mod:`.evaluate` (``sciml weather
train`` / ``evaluate``; extreme events in :mod:`.extremes`, PIT histograms and the
reliability index in :mod:`.reliability`, the written outputs in :mod:`.evaluate_report`);
spread prediction in :mod:`.spread` (the 3-D U-Net and its losses), :mod:`.spread_data`,
:mod:`.spread_config` (the run folder), :mod:`.spread_train`, :mod:`.spread_evaluate` and
:mod:`.spread_cli` (``sciml weather spread train|evaluate``); cross-validation of a real sample
without a truth in :mod:`.crossval`; ``sciml weather toy|preset`` in :mod:`.toy_cli`;
:mod:`.plots`.
"""
