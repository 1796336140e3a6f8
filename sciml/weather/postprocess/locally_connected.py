r"""A locally connected output layer: a 1x1 linear map with its own weights at every grid point.

:class:`LocallyConnected2d` maps ``(N, C_in, H, W)`` to ``(N, C_out, H, W)`` with weights
``(C_out, C_in, H, W)`` and biases ``(C_out, H, W)``: each output point depends on the
input at that point only, through parameters of its own (Grönquist et al. 2021's last
layer, which lets a model learn the local systematic errors a convolution shares out).
Both start at zero. :meth:`~LocallyConnected2d.smoothness` penalises differences between
neighbouring points' parameters:

.. math::
    P = \frac{1}{|E|}\sum_{(p, q) \in E} \lVert \theta_p - \theta_q \rVert^2,

over the set :math:`E` of neighbouring pairs (latitude neighbours, and longitude
neighbours, wrapping around when ``periodic``), with :math:`\theta_p` the weights and bias
of point :math:`p`. The mean over pairs keeps the penalty's scale independent of the grid
size, as the mean CRPS it is added to is.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["LocallyConnected2d"]


class LocallyConnected2d(nn.Module):
    """Per-grid-point linear map of the channels, zero-initialised.

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        height: Grid points along the second-to-last dim (latitude).
        width: Grid points along the last dim (longitude).
        periodic: Longitude wraps around (the first and last columns are neighbours in
            :meth:`smoothness`; needs ``width >= 3`` so that no pair counts twice).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        height: int,
        width: int,
        *,
        periodic: bool = False,
    ) -> None:
        """Zero weights and biases for every point (arguments: see the class)."""
        super().__init__()
        for name, value in (
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("height", height),
            ("width", width),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if periodic and width < 3:
            raise ValueError(f"a periodic grid needs width >= 3, got {width}")
        self.periodic = periodic
        self.weight = nn.Parameter(torch.zeros(out_channels, in_channels, height, width))
        self.bias = nn.Parameter(torch.zeros(out_channels, height, width))

    def forward(self, x: Tensor) -> Tensor:
        """``(N, C_out, H, W)`` from ``(N, C_in, H, W)`` on this layer's grid."""
        expected = self.weight.shape[1:]
        if x.ndim != 4 or x.shape[1:] != expected:
            raise ValueError(
                f"input must be (N, C_in={expected[0]}, H={expected[1]}, W={expected[2]}), "
                f"got {tuple(x.shape)}"
            )
        return torch.einsum("nihw,oihw->nohw", x, self.weight) + self.bias

    def smoothness(self) -> Tensor:
        """Mean squared parameter difference over neighbouring pairs (module docstring)."""
        theta = torch.cat([self.weight.flatten(0, 1), self.bias], dim=0)  # (P, H, W)
        squares, pairs = theta.new_zeros(()), 0
        lat = theta[:, 1:] - theta[:, :-1]
        squares, pairs = squares + lat.square().sum(), pairs + lat[0].numel()
        lon = theta - theta.roll(1, dims=-1) if self.periodic else theta[..., 1:] - theta[..., :-1]
        squares, pairs = squares + lon.square().sum(), pairs + lon[0].numel()
        return squares / max(pairs, 1)
