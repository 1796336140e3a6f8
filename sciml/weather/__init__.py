"""Ensemble weather: data readers, verification metrics, toy QG ensembles, plots.

Modules: :mod:`.data` (``open_ensemble``), :mod:`.metrics` (CRPS family, spread-skill,
rank histogram), :mod:`.losses` (torch CRPS losses), :mod:`.qg` and :mod:`.toy` (two-layer
QG model and ensemble generator), :mod:`.verify` (score tables), :mod:`.plots`.
"""
