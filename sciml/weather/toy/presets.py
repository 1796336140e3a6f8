"""Named toy-ensemble configurations, fixed before any post-processing model is trained.

A preset is a truth model, a forecast model and the ensemble settings. Two are defined:

* ``qg-imperfect-v1``, the evaluation preset: the truth runs over bottom topography
  (``topography=2``); the members run a model with a documented error: 10 % weaker bottom
  drag (0.45 instead of 0.5), 5 % weaker shear (0.95 instead of 1) and smoothed
  topography (amplitude 1.6 instead of 2), which gives a systematic, flow-dependent error;
  their initial perturbations are 0.7 times the analysis error (under-dispersive, as real
  ensemble systems are at short leads). 10 members, start dates every 2 days, lead times
  0-6 days, both layers of ``psi`` and ``q``, the static ``topography`` field.
* ``qg-perfect-v1``: the same truth, members run the truth's model from reliable initial
  perturbations: the reference where post-processing can gain little.

Once published, a preset never changes (a change gets a new name), so scores stay
comparable. Its raw ensemble's bias, spread-skill ratio and CRPS are reported by
``benchmarks/weather_preset.py``. Split the start dates with
:func:`sciml.weather.split.split_start_dates` (the last 20 % for testing, the 20 % before
for validation); never tune on the test dates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import xarray as xr

from sciml.weather.toy.ensemble import TOY_PARAMS, generate_ensemble, write_toy_ensemble
from sciml.weather.toy.qg import QGParams
from sciml.weather.toy.settings import ToySettings

__all__ = ["PRESETS", "ToyPreset", "generate_preset", "toy_preset", "write_preset"]


@dataclass(frozen=True)
class ToyPreset:
    """A named toy configuration: ensemble settings, the truth's and the members' model."""

    name: str
    settings: ToySettings
    params: QGParams
    forecast_params: QGParams | None


_TRUTH = replace(TOY_PARAMS, topography=2.0)
_SETTINGS = ToySettings(
    members=10,
    start_dates=160,
    lead_times=(0, 1, 2, 3, 4, 5, 6),
    interval=2.0,
    spin_up=60.0,
    perturbation=0.02,
    seed=2024,
)

#: The presets by name (see the module docstring).
PRESETS: dict[str, ToyPreset] = {
    "qg-imperfect-v1": ToyPreset(
        name="qg-imperfect-v1",
        settings=replace(_SETTINGS, spread_factor=0.7),
        params=_TRUTH,
        forecast_params=replace(_TRUTH, drag=0.45, shear=0.95, topography=1.6),
    ),
    "qg-perfect-v1": ToyPreset(
        name="qg-perfect-v1", settings=_SETTINGS, params=_TRUTH, forecast_params=None
    ),
}


def toy_preset(name: str) -> ToyPreset:
    """The preset called ``name``.

    Raises:
        KeyError: An unknown name (the message lists the known ones).
    """
    if name not in PRESETS:
        raise KeyError(f"no toy preset {name!r}; presets: {sorted(PRESETS)}")
    return PRESETS[name]


def _settings(name: str, start_dates: int | None, seed: int | None) -> ToySettings:
    """The preset's ensemble settings, with fewer start dates or another seed.

    Raises:
        KeyError: An unknown preset.
        ValueError: ``start_dates`` is not between 1 and the preset's number.
    """
    settings = toy_preset(name).settings
    if start_dates is not None:
        if not 1 <= start_dates <= settings.start_dates:
            raise ValueError(
                f"start_dates must lie in [1, {settings.start_dates}] for preset {name!r}, "
                f"got {start_dates}"
            )
        settings = replace(settings, start_dates=start_dates)
    if seed is not None:
        settings = replace(settings, seed=seed)
    return settings


def generate_preset(
    name: str,
    *,
    start_dates: int | None = None,
    seed: int | None = None,
    progress: bool = False,
    threads: int = 1,
) -> xr.Dataset:
    """Generate the ensemble of a preset (its ``preset`` attribute names it).

    Args:
        name: Preset name (:data:`PRESETS`).
        start_dates: Fewer start dates than the preset's (for quick runs and tests; the
            first ``start_dates`` of the preset's, the same values).
        seed: Another seed (an independent draw of the same configuration).
        progress: Show a tqdm progress bar.
        threads: Worker threads.

    Raises:
        KeyError: An unknown preset.
        ValueError: ``start_dates`` is not between 1 and the preset's number.
    """
    settings, preset = _settings(name, start_dates, seed), toy_preset(name)
    ds = generate_ensemble(
        **asdict(settings),
        params=preset.params,
        forecast_params=preset.forecast_params,
        progress=progress,
        threads=threads,
    )
    ds.attrs["preset"] = name
    return ds


def write_preset(
    path: Path | str,
    name: str,
    *,
    start_dates: int | None = None,
    seed: int | None = None,
    progress: bool = False,
    threads: int = 1,
    handle_signals: bool = True,
) -> xr.Dataset | None:
    """Generate a preset into ``path`` (netCDF), resumably, as :func:`write_toy_ensemble` does.

    The file holds what :func:`generate_preset` returns with the same arguments.

    Args:
        path: Output netCDF path.
        name: Preset name (:data:`PRESETS`).
        start_dates: Fewer start dates than the preset's (its first ones).
        seed: Another seed (an independent draw of the same configuration).
        progress: Show a tqdm progress bar.
        threads: Worker threads.
        handle_signals: Stop cleanly on SIGUSR1/SIGTERM (main thread only).

    Returns:
        The dataset written, or None when interrupted by a signal (run again to resume).

    Raises:
        KeyError: An unknown preset.
        ValueError: ``start_dates`` is not between 1 and the preset's number.
    """
    settings, preset = _settings(name, start_dates, seed), toy_preset(name)
    return write_toy_ensemble(
        path,
        params=preset.params,
        forecast_params=preset.forecast_params,
        progress=progress,
        threads=threads,
        handle_signals=handle_signals,
        attrs={"preset": name},
        **asdict(settings),
    )
