"""The settings of a toy ensemble (:mod:`.toy`), validated before any work starts."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sciml.weather.toy.qg import QGParams

__all__ = ["MAX_DAYS", "ToySettings", "check_settings"]

#: Longest lead time, spin-up and interval accepted, in days: errors saturate after about
#: ten days, so longer spans only cost time (a typo such as ``1e9`` would run for ever).
MAX_DAYS = 1000.0


@dataclass(frozen=True)
class ToySettings:
    """Ensemble settings, as the arguments of :func:`.ensemble.generate_ensemble`."""

    members: int = 10
    start_dates: int = 20
    lead_times: tuple[float, ...] = (0, 1, 2, 3, 4, 5, 6)
    interval: float = 2.0
    spin_up: float = 60.0
    perturbation: float = 0.02
    model_error: float = 0.0
    spread_factor: float = 1.0
    seed: int = 0


def _whole_steps(name: str, days: float, dt: float) -> int:
    steps = days / dt
    if not math.isclose(steps, round(steps), rel_tol=0, abs_tol=1e-6):
        raise ValueError(f"{name}={days} days must be a multiple of the model step dt={dt}")
    return round(steps)


def check_settings(
    settings: ToySettings,
    params: QGParams,
    threads: int,
    *,
    forecast_params: QGParams | None = None,
) -> np.ndarray:
    """Validate every setting before any work; return the lead times in model steps."""
    if forecast_params is not None and (forecast_params.n, forecast_params.dt) != (
        params.n,
        params.dt,
    ):
        raise ValueError(
            f"the forecast model must share the truth's grid and step: forecast_params has "
            f"n={forecast_params.n}, dt={forecast_params.dt}; params has n={params.n}, "
            f"dt={params.dt}"
        )
    for name in ("members", "start_dates", "seed"):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if isinstance(threads, bool) or not isinstance(threads, int | np.integer) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    if settings.members < 1 or settings.start_dates < 1 or settings.seed < 0:
        raise ValueError(
            f"need members >= 1, start_dates >= 1 and seed >= 0, got {settings.members}, "
            f"{settings.start_dates}, {settings.seed}"
        )
    leads = np.asarray(settings.lead_times, dtype=np.float64)
    if leads.ndim != 1 or leads.size == 0 or not np.isfinite(leads).all():
        raise ValueError(f"lead_times must be finite numbers, got {settings.lead_times}")
    if leads[0] < 0 or np.any(np.diff(leads) <= 0):
        raise ValueError(
            f"lead_times must be ascending without repeats and non-negative, got "
            f"{settings.lead_times}"
        )
    spans = {"lead_times": leads[-1], "interval": settings.interval, "spin_up": settings.spin_up}
    for name, days in spans.items():
        if not 0 <= days <= MAX_DAYS:
            raise ValueError(f"{name} must lie in [0, {MAX_DAYS}] days, got {days}")
    if settings.interval <= 0:
        raise ValueError(f"interval must be > 0 days, got {settings.interval}")
    for name in ("perturbation", "model_error", "spread_factor"):
        value = getattr(settings, name)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    _whole_steps("interval", settings.interval, params.dt)
    _whole_steps("spin_up", settings.spin_up, params.dt)
    try:
        return np.array([_whole_steps("lead_times", lead, params.dt) for lead in leads])
    except ValueError:
        raise ValueError(
            f"lead_times {settings.lead_times} must be multiples of dt={params.dt}"
        ) from None
