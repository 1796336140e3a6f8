"""Spread prediction with a 3-D U-Net.

The model and its losses, data, run folder, training, evaluation and
``sciml weather spread``.
"""
