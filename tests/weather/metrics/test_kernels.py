"""NumPy/numba kernels: the sorted CRPS kernel and the exact EFI against independent forms."""

import subprocess
import sys

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import properscoring as ps
import pytest
import scipy.integrate
from hypothesis import given, settings

from sciml.weather.metrics.kernels import crps_ensemble_array, efi_array
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


def _efi_per_point(forecasts: np.ndarray, climate: np.ndarray) -> np.ndarray:
    """The EFI as computed before: every forecast point sorts its own copy of its climate."""
    lead = np.broadcast_shapes(forecasts.shape[:-1], climate.shape[:-1])
    ens = np.broadcast_to(forecasts, (*lead, forecasts.shape[-1])).reshape(-1, forecasts.shape[-1])
    clim = np.sort(np.broadcast_to(climate, (*lead, climate.shape[-1])), axis=-1)
    out = np.full(ens.shape[0], np.nan)
    for i, (members, sample) in enumerate(zip(ens, clim.reshape(len(ens), -1), strict=True)):
        x, c = members[~np.isnan(members)], sample[~np.isnan(sample)]
        k = c.size
        if k < 2 or x.size == 0:
            continue
        lo, hi = np.searchsorted(c, x, "left"), np.searchsorted(c, x, "right")
        inner = np.clip(lo, 1, k - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            between = (inner - 1 + (x - c[inner - 1]) / (c[inner] - c[inner - 1])) / (k - 1)
        tied = 0.5 * (lo + hi - 1) / (k - 1)
        cdf = np.select([hi == 0, lo == k, lo < hi], [0.0, 1.0, tied], between)
        out[i] = 4 / np.pi * np.arcsin(np.sqrt(cdf)).mean() - 1
    return out.reshape(lead)


def test_efi_with_a_shared_sorted_climate_equals_the_per_point_form() -> None:
    """Ties, NaNs, too-short climates and broadcasting on both sides, to float64 rounding."""
    rng = np.random.default_rng(13)
    climate = np.round(rng.standard_normal((4, 1, 30)), 1)  # ties within the climate
    climate[0, 0, 5:] = np.nan  # 5 values left
    climate[1, 0, 1:] = np.nan  # 1 value left: NaN EFI
    climate[2, 0, ::3] = np.nan
    forecasts = np.round(rng.standard_normal((5, 4, 6, 8)), 1)  # members on climate values
    forecasts[:, :, 0, 3:] = np.nan
    forecasts[:, :, 1, :] = np.nan  # no valid member: NaN EFI
    forecasts[0, 0, 2, 0] = 9.0  # above the whole climate
    forecasts[0, 1, 2, 0] = climate[1, 0, 0]  # on a one-value climate (a division by 0)
    got = efi_array(forecasts, climate)
    expected = _efi_per_point(forecasts, climate)
    assert got.shape == (5, 4, 6) and np.isnan(expected).any()
    # 8 arcsin terms of at most pi/2 summed, scaled by 4/(pi M): a few eps per member
    members = forecasts.shape[-1]
    atol = (2 * members + 4) * np.finfo(np.float64).eps
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol)
    # a climate broadcast along the forecasts' leading axes, and forecasts along its
    np.testing.assert_allclose(
        efi_array(forecasts[:1], climate[None]),
        _efi_per_point(forecasts[:1], climate[None]),
        rtol=0,
        atol=atol,
    )


def test_efi_needs_a_sample_axis() -> None:
    with pytest.raises(ValueError, match="must have a sample axis"):
        efi_array(np.zeros(4), np.float64(1.0))


_EFI_PEAK = """
import tracemalloc
import numpy as np
from sciml.weather.metrics.kernels import efi_array
rng = np.random.default_rng(14)
climate = rng.standard_normal((16, 2000))  # per grid point
forecasts = rng.standard_normal((200, 16, 10))  # start dates x grid points x members
# compile (or load the cache) outside the measurement, for the measured arrays' types: with
# one start date the climate's row index is a read-only broadcast view, another numba
# signature, compiled inside the measurement on a fresh clone (no cache yet: a 6 MB peak)
efi_array(forecasts[:2], climate[:, :4])
tracemalloc.start()
efi_array(forecasts, climate)
print(tracemalloc.get_traced_memory()[1], climate.nbytes, forecasts.nbytes)
"""


def test_efi_sorts_the_climate_once_not_per_forecast_point() -> None:
    """Memory: a climate shared by 200 start dates is sorted once, not copied 200 times.

    Measured in a fresh interpreter: tracemalloc counts every thread of its process, and a
    test process may hold other tests' threads (a zarr or dask pool) allocating meanwhile.
    """
    done = subprocess.run(
        [sys.executable, "-c", _EFI_PEAK], capture_output=True, text=True, check=True, timeout=300
    )
    peak, climate_bytes, forecast_bytes = map(int, done.stdout.split())
    # one sorted copy of each input, the result and two row indices (int64) per point
    points = 200 * 16
    bound = climate_bytes + forecast_bytes + 3 * 8 * points + 64 * 1024
    assert peak < bound, (
        f"peak {peak / 1e6:.1f} MB, the broadcast climate is {200 * climate_bytes / 1e6:.0f} MB"
    )
