"""Plain ``torch.nn`` models that know nothing of distribution."""

from sciml.models.cosmoflow import CosmoFlow
from sciml.models.unet import UNet

__all__ = ["CosmoFlow", "UNet"]
