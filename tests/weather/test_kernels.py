"""NumPy/numba kernels: the sorted CRPS kernel and the exact EFI against independent forms."""

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import properscoring as ps
import pytest
import scipy.integrate
from hypothesis import given, settings

from sciml.weather.kernels import crps_ensemble_array, efi_array
from tests.weather.conftest import pairwise_crps

RTOL = 1e-6


def test_fair_minus_standard_is_half_mean_pair_distance_over_m() -> None:
    """standard - fair = sum_ij |xi - xj| / (2 M^2 (M - 1)): a closed-form link."""
    rng = np.random.default_rng(5)
    ens = rng.standard_normal((100, 8))
    obs = rng.standard_normal(100)
    diff = crps_ensemble_array(obs, ens) - crps_ensemble_array(obs, ens, fair=True)
    pair = np.abs(ens[:, :, None] - ens[:, None, :]).sum((1, 2))
    np.testing.assert_allclose(diff, pair / (2 * 64 * 7), rtol=RTOL)


def test_crps_float32_and_large_offsets_keep_precision() -> None:
    rng = np.random.default_rng(6)
    base = 50_000.0 + 10 * rng.standard_normal((2000, 1))
    ens = (base + 5 * rng.standard_normal((2000, 20))).astype(np.float32)
    obs = (base[:, 0] + 5 * rng.standard_normal(2000)).astype(np.float32)
    got = crps_ensemble_array(obs, ens)
    assert got.dtype == np.float64
    ref = ps.crps_ensemble(obs.astype(np.float64), ens.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=RTOL)
    np.testing.assert_allclose(got, pairwise_crps(obs.astype(float), ens.astype(float)), rtol=RTOL)


def test_crps_many_blocks_and_threads_agree() -> None:
    rng = np.random.default_rng(7)
    ens = rng.standard_normal((70_001, 3))
    obs = rng.standard_normal(70_001)
    one = crps_ensemble_array(obs, ens, threads=1)
    np.testing.assert_array_equal(one, crps_ensemble_array(obs, ens, threads=2))
    np.testing.assert_allclose(one, ps.crps_ensemble(obs, ens), rtol=RTOL)


def test_efi_exact_against_quadrature_and_limits() -> None:
    rng = np.random.default_rng(12)
    climate = rng.gamma(2.0, size=(3, 40))
    members = rng.gamma(2.5, size=(3, 6))
    got = efi_array(members, climate)
    for i in range(3):

        def integrand(p: float, i: int = i) -> float:
            q = np.quantile(climate[i], p)
            return (p - np.mean(members[i] < q)) / np.sqrt(p * (1 - p))

        breaks = np.interp(members[i], np.sort(climate[i]), np.linspace(0, 1, 40))
        ref, _ = scipy.integrate.quad(integrand, 0, 1, points=np.sort(breaks), limit=200)
        assert got[i] == pytest.approx(2 / np.pi * ref, abs=1e-6)
    uniform = np.linspace(0, 1, 101)
    x = rng.uniform(0, 1, (5, 9))
    np.testing.assert_allclose(
        efi_array(x, uniform), 4 / np.pi * np.arcsin(np.sqrt(x)).mean(-1) - 1, rtol=RTOL
    )
    assert efi_array(np.full((1, 4), 5.0), uniform)[0] == 1.0
    assert efi_array(np.full((1, 4), -5.0), uniform)[0] == -1.0


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.integers(1, 9)),
        elements=st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: round(v, 1)),
    ),
    st.floats(-1e3, 1e3, allow_nan=False),
)
def test_sorted_kernel_equals_pairwise_form_property(ens: np.ndarray, shift: float) -> None:
    """Any ensemble (ties included): sorted kernel == O(M^2) energy form, fair and standard."""
    obs = ens[:, 0] + shift / 7
    for fair in (False, ens.shape[1] > 1):
        got = crps_ensemble_array(obs, ens, fair=fair)
        np.testing.assert_allclose(got, pairwise_crps(obs, ens, fair=fair), rtol=1e-9, atol=1e-9)
    assert np.all(crps_ensemble_array(obs, ens) >= 0)
