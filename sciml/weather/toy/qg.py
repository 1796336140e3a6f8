r"""A two-layer quasi-geostrophic model on a doubly periodic beta-plane, spectral, in torch.

The standard baroclinic-turbulence model (Phillips 1954; as in pyqg, Abernathey et al.):
two layers of equal depth with a uniform zonal shear, non-dimensional, on the square
:math:`[0, 2\pi)^2` (periodic in both directions, a "channel" without walls). Layer
:math:`i` (1 upper, 2 lower) carries the potential-vorticity anomaly

.. math::
    q_1 = \nabla^2\psi_1 + F(\psi_2 - \psi_1), \qquad
    q_2 = \nabla^2\psi_2 + F(\psi_1 - \psi_2), \qquad F = k_d^2 / 2,

with :math:`k_d` the inverse deformation radius, advected by the eddies and the mean flow
:math:`U_1 = \Delta U/2`, :math:`U_2 = -\Delta U/2` across the mean PV gradients
:math:`Q_{1,y} = \beta + F\Delta U`, :math:`Q_{2,y} = \beta - F\Delta U`:

.. math::
    \partial_t q_i + J(\psi_i, q_i) + U_i\,\partial_x q_i + Q_{i,y}\,\partial_x\psi_i
        = -\delta_{i2}\, r\,\nabla^2\psi_2 - \nu\,\nabla^8 q_i .

An optional bottom topography :math:`h` (``QGParams.topography`` times the fixed pattern of
:func:`topography_pattern`) adds :math:`J(\psi_2, h)` to the lower layer's advection: the
flow over it makes stationary waves, so the climate varies from place to place as over real
orography. The shear releases baroclinic instability (when :math:`F\Delta U > \beta`), linear bottom
drag :math:`r` and hyperviscosity :math:`\nu` remove energy, and the flow settles into
chaotic, statistically steady turbulence whose error growth is flow dependent.

Numerics: pseudo-spectral (``rfft2``), Jacobian dealiased with the 2/3 rule, classical
RK4 for the advective and linear terms, hyperviscosity exactly through an integrating
factor; everything in float64. States are tensors ``(..., 2, n, n)`` of :math:`q` in
spectral space, so ensembles and start dates run as one batch. The inviscid, unforced
model (``shear=0, drag=0`` and no hyperviscosity) conserves the energy

.. math::
    E = \tfrac12 \langle |\nabla\psi_1|^2 + |\nabla\psi_2|^2 + F(\psi_1-\psi_2)^2 \rangle .
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class QGParams:
    r"""Non-dimensional parameters of :class:`TwoLayerQG` (time unit: one "day").

    Attributes:
        n: Grid points per side (domain :math:`2\pi`).
        kd: Inverse deformation radius :math:`k_d` (:math:`F = k_d^2/2`).
        beta: Planetary vorticity gradient :math:`\beta`.
        shear: Mean vertical shear :math:`\Delta U = U_1 - U_2`.
        drag: Bottom (Ekman) drag rate :math:`r` on the lower layer.
        hyper_time: e-folding time of the hyperviscosity at the largest kept wavenumber.
        dt: Time step.
        topography: Amplitude (RMS) of the bottom topography :func:`topography_pattern`
            (0: flat).
    """

    n: int = 64
    kd: float = 4.0
    beta: float = 1.0
    shear: float = 1.0
    drag: float = 0.3
    hyper_time: float = 0.05
    dt: float = 0.025
    topography: float = 0.0

    def __post_init__(self) -> None:
        """Reject parameters the model cannot integrate."""
        if self.n < 8 or self.n % 2:
            raise ValueError(f"n must be an even number >= 8, got {self.n}")
        for name in ("kd", "dt", "hyper_time"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.drag < 0 or self.beta < 0:
            raise ValueError("drag and beta must be non-negative")
        if not math.isfinite(self.topography):
            raise ValueError(f"topography must be finite, got {self.topography}")


def topography_pattern(n: int) -> Tensor:
    """The fixed bottom-topography pattern on the ``(n, n)`` grid: large scales, RMS 1.

    Two low-wavenumber ridges, the same for every seed (like a planet's orography).
    """
    x = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    y = x[:, None]
    h = torch.cos(x + 0.5) * torch.cos(2 * y) + 0.7 * torch.sin(2 * x - y + 1.0)
    return h / h.pow(2).mean().sqrt()


class TwoLayerQG:
    """Two-layer QG model (see the module docstring); batched over leading dimensions.

    Args:
        params: Model parameters.
        inviscid: Switch off hyperviscosity (for conservation checks).
    """

    def __init__(self, params: QGParams | None = None, *, inviscid: bool = False) -> None:
        """Precompute the spectral operators (arguments: see the class)."""
        self.params = p = params or QGParams()
        kx = torch.fft.rfftfreq(p.n, 1.0 / p.n, dtype=torch.float64)
        ky = torch.fft.fftfreq(p.n, 1.0 / p.n, dtype=torch.float64)
        self.kx, self.ky = kx[None, :], ky[:, None]
        self.k2 = self.kx**2 + self.ky**2
        self.F = p.kd**2 / 2
        kmax = p.n // 3
        self.dealias = (self.kx.abs() <= kmax) & (self.ky.abs() <= kmax)
        nu = 0.0 if inviscid else 1.0 / (p.hyper_time * float(kmax) ** 8)
        self.hyper = torch.exp(-nu * self.k2**4 * p.dt)
        self.ikx, self.iky = 1j * self.kx, 1j * self.ky
        self.u_mean = torch.tensor([p.shear / 2, -p.shear / 2], dtype=torch.float64)[:, None, None]
        self.qy_mean = torch.tensor(
            [p.beta + self.F * p.shear, p.beta - self.F * p.shear], dtype=torch.float64
        )[:, None, None]
        h = torch.fft.rfft2(p.topography * topography_pattern(p.n))
        self.topography_gradient = (
            torch.fft.irfft2(torch.stack([self.ikx * h, self.iky * h]), s=(p.n, p.n))
            if p.topography
            else None
        )
        det = self.k2 * (self.k2 + 2 * self.F)
        self.inv_det = torch.where(det > 0, 1.0 / torch.where(det > 0, det, 1.0), 0.0)

    def invert(self, qh: Tensor) -> Tensor:
        """Streamfunction (spectral) of the PV anomaly ``qh`` (spectral), mean mode zero."""
        q1, q2 = qh[..., 0, :, :], qh[..., 1, :, :]
        psi1 = -((self.k2 + self.F) * q1 + self.F * q2) * self.inv_det
        psi2 = -(self.F * q1 + (self.k2 + self.F) * q2) * self.inv_det
        return torch.stack([psi1, psi2], dim=-3)

    def tendency(self, qh: Tensor, drag: Tensor | float) -> Tensor:
        """Right-hand side without hyperviscosity, in spectral space."""
        n = self.params.n
        ph = self.invert(qh)
        u, v, qx, qy = torch.fft.irfft2(
            torch.stack([-self.iky * ph, self.ikx * ph, self.ikx * qh, self.iky * qh]), s=(n, n)
        )
        advection = u * qx + v * qy
        if self.topography_gradient is not None:
            hx, hy = self.topography_gradient
            advection[..., 1, :, :] += u[..., 1, :, :] * hx + v[..., 1, :, :] * hy
        rhs = torch.fft.rfft2(advection) * self.dealias
        rhs = -rhs - self.ikx * (self.u_mean * qh + self.qy_mean * ph)
        drag = torch.as_tensor(drag, dtype=torch.float64)
        rhs[..., 1, :, :] += drag[..., None, None] * self.k2 * ph[..., 1, :, :]
        return rhs

    def step(self, qh: Tensor, drag: Tensor | float | None = None) -> Tensor:
        """One RK4 step of ``dt`` followed by the hyperviscous decay factor.

        Args:
            qh: Spectral PV ``(..., 2, n, n // 2 + 1)``.
            drag: Bottom drag, a scalar or one value per batch entry (model error).
        """
        drag = self.params.drag if drag is None else drag
        dt = self.params.dt
        k1 = self.tendency(qh, drag)
        k2 = self.tendency(qh + 0.5 * dt * k1, drag)
        k3 = self.tendency(qh + 0.5 * dt * k2, drag)
        k4 = self.tendency(qh + dt * k3, drag)
        return (qh + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)) * self.hyper

    def run(self, qh: Tensor, duration: float, drag: Tensor | float | None = None) -> Tensor:
        """Integrate for ``duration`` (rounded to whole steps)."""
        for _ in range(round(duration / self.params.dt)):
            qh = self.step(qh, drag)
        return qh

    def energy(self, qh: Tensor) -> Tensor:
        """Total (kinetic + available potential) energy per unit area, per batch entry."""
        ph = self.invert(qh)
        n = self.params.n
        weight = torch.full_like(self.kx, 2.0).expand_as(self.k2).clone()
        weight[:, 0] = 1.0
        if n % 2 == 0:
            weight[:, -1] = 1.0
        kinetic = (self.k2 * ph.abs() ** 2).sum(-3)
        potential = self.F * (ph[..., 0, :, :] - ph[..., 1, :, :]).abs() ** 2
        return 0.5 * ((kinetic + potential) * weight).sum((-1, -2)) / n**4

    def to_grid(self, fields: Tensor) -> Tensor:
        """Spectral fields to the ``(n, n)`` grid."""
        n = self.params.n
        return torch.fft.irfft2(fields, s=(n, n))

    def random_state(self, generator: torch.Generator, *, amplitude: float = 0.1) -> Tensor:
        """Small random large-scale PV (spectral), a seed for spin-up."""
        n = self.params.n
        q = torch.randn(2, n, n, generator=generator, dtype=torch.float64)
        qh = torch.fft.rfft2(q) * ((self.k2 > 0) & (self.k2 <= (n / 4) ** 2))
        return amplitude * qh / (qh.abs().pow(2).mean().sqrt() + 1e-300) * math.sqrt(2)
