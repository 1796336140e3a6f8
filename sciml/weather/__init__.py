"""Ensemble weather: data, verification, toy QG ensembles, post-processing, plots.

Modules: :mod:`.data` (``open_ensemble``, splits by start date), :mod:`.metrics` (CRPS
family, spread-skill, rank histogram; kernels in :mod:`.kernels`), :mod:`.losses` (torch
CRPS losses), :mod:`.qg`, :mod:`.toy` and :mod:`.toy_presets` (two-layer QG model, ensemble
generator, the fixed evaluation presets), :mod:`.verify` (score tables), :mod:`.dataset`
(torch samples of k members, truth, spread, static fields), :mod:`.emos` (EMOS),
:mod:`.postprocess` (MLP and U-Net post-processors), :mod:`.train` and :mod:`.evaluate`
(``sciml weather train`` / ``evaluate``; extreme events in :mod:`.extremes`, PIT histograms
and the reliability index in :mod:`.reliability`, the written outputs in
:mod:`.evaluate_report`), :mod:`.plots`.
"""
