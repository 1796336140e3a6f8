"""Toy ensembles from a two-layer QG model.

The model, the ensemble generator, the fixed presets, their files and
``sciml weather toy|preset``.
"""
