"""The two-layer QG model: inversion, energy, turbulence, topography."""

import numpy as np
import pytest
import torch

from sciml.weather.toy.qg import QGParams, TwoLayerQG, topography_pattern

SMALL = QGParams(n=16, kd=4.0, beta=4.0, shear=1.0, drag=0.5, dt=0.025)


def test_inversion_matches_pv_definition() -> None:
    model = TwoLayerQG(SMALL)
    qh = model.random_state(torch.Generator().manual_seed(0), amplitude=1.0)
    psi = model.to_grid(model.invert(qh))
    # q_i = lap(psi_i) + F (psi_j - psi_i)
    lap = torch.fft.irfft2(-model.k2 * torch.fft.rfft2(psi), s=psi.shape[-2:])
    f = model.F
    q = torch.stack([lap[0] + f * (psi[1] - psi[0]), lap[1] + f * (psi[0] - psi[1])])
    torch.testing.assert_close(q, model.to_grid(qh))


def test_inviscid_unforced_model_conserves_energy() -> None:
    params = QGParams(n=16, kd=4.0, beta=4.0, shear=0.0, drag=0.0, dt=0.01)
    model = TwoLayerQG(params, inviscid=True)
    qh = model.random_state(torch.Generator().manual_seed(1), amplitude=5.0)
    energy = model.energy(qh)
    later = model.run(qh, 2.0)
    assert (later - qh).abs().max() > 1e-2 * qh.abs().max()  # the flow did evolve
    assert float(model.energy(later)) == pytest.approx(float(energy), rel=1e-6)


def test_energy_matches_grid_definition() -> None:
    model = TwoLayerQG(SMALL)
    qh = model.random_state(torch.Generator().manual_seed(2), amplitude=1.0)
    ph = model.invert(qh)
    u = model.to_grid(-1j * model.ky * ph)
    v = model.to_grid(1j * model.kx * ph)
    psi = model.to_grid(ph)
    grid = 0.5 * ((u**2 + v**2).sum(0) + model.F * (psi[0] - psi[1]) ** 2).mean()
    assert float(model.energy(qh)) == pytest.approx(float(grid), rel=1e-10)


def test_baroclinic_turbulence_saturates() -> None:
    model = TwoLayerQG(SMALL)
    qh = model.random_state(torch.Generator().manual_seed(0))
    energies = []
    for _ in range(8):
        qh = model.run(qh, 10.0)
        energies.append(float(model.energy(qh)))
    assert energies[0] < 1e-2 < energies[-1]  # instability grew from small noise
    assert np.isfinite(energies).all() and max(energies[4:]) < 10 * min(energies[4:])


def test_flow_over_topography_conserves_energy() -> None:
    """Topography changes the flow but does no work: the inviscid energy is kept."""
    flat = QGParams(n=16, kd=4.0, beta=4.0, shear=0.0, drag=0.0, dt=0.01)
    hilly = QGParams(n=16, kd=4.0, beta=4.0, shear=0.0, drag=0.0, dt=0.01, topography=2.0)
    qh = TwoLayerQG(flat).random_state(torch.Generator().manual_seed(1), amplitude=5.0)
    model = TwoLayerQG(hilly, inviscid=True)
    later = model.run(qh, 2.0)
    assert not torch.allclose(later, TwoLayerQG(flat, inviscid=True).run(qh, 2.0))
    assert float(model.energy(later)) == pytest.approx(float(model.energy(qh)), rel=1e-6)
    pattern = topography_pattern(16)
    assert float(pattern.pow(2).mean()) == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(ValueError, match="topography must be finite"):
        QGParams(topography=float("nan"))
