"""Spread prediction with a 3-D U-Net.

Laid out as :mod:`sciml.weather.postprocess`: :mod:`.config` (the options),
:mod:`.record` (the run record), :mod:`.train`, :mod:`.predict`, :mod:`.evaluate`, with the
model and its losses (:mod:`.model`), its samples (:mod:`.data`) and
``sciml weather spread`` (:mod:`.cli`).
"""
