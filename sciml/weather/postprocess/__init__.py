"""Post-processing an ensemble subset into a Gaussian forecast.

EMOS and the deep models (MLP, U-Net, mixed, pooled), their training,
prediction and evaluation.
"""
