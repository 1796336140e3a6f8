"""Post-processing an ensemble subset into a Gaussian forecast.

The models are one table (:mod:`.registry`): EMOS (:mod:`.emos`) and the deep models
(:mod:`.models`: MLP, U-Net; :mod:`.mixed`, :mod:`.pooled`). Laid out as
:mod:`sciml.weather.spread`: :mod:`.config` (the options), :mod:`.record` (the run record),
:mod:`.train`, :mod:`.predict`, :mod:`.evaluate` (with :mod:`.evaluate_rows`,
:mod:`.evaluate_climate`, :mod:`.evaluate_blocks` and
:mod:`.evaluate_report`) and ``sciml weather train|evaluate`` (:mod:`.cli`).
"""
