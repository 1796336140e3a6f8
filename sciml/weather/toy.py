"""Toy ensemble forecasts from real dynamics: the two-layer QG model of :mod:`.qg`.

Recipe (a "perfect model" ensemble prediction system):

1. spin the model up from small random noise into statistically steady baroclinic
   turbulence (``spin_up`` days);
2. run the truth on and take its state every ``interval`` days as a start date;
3. from each start state run the truth once more (slot 0 of the batch) and ``members``
   forecasts starting from ``analysis + e_m``, where the analysis is ``truth - e_0`` and the
   ``e`` are independent large-scale PV noise of relative amplitude ``perturbation``: the
   truth is then one more draw from the initial ensemble's distribution (a reliable
   ensemble, spread-skill ratio near 1 at every lead time). Optional model error: each
   member's bottom drag is multiplied by ``exp(model_error * N(0, 1))``;
4. keep truth and members at every lead time.

Errors double in about one model day and saturate after about ten (with the default
parameters), so the spread grows with lead time and varies from place to place with the
flow. One time unit of the model is labelled one day.

The output follows the layout of real data (CF-1.8): variables ``psi`` (streamfunction)
and ``q`` (PV anomaly) with dimensions ``(member, time, lead_time, level, lat, lon)``, the
truth as ``psi_truth``/``q_truth`` without ``member``; ``time`` is the start date
(``forecast_reference_time``), ``lead_time`` the ``forecast_period`` and ``valid_time`` their
sum; ``level`` 1 is the upper layer, 2 the lower. The doubly periodic domain is labelled as
a 30-60 N, 0-360 E box purely for plotting (the model is a beta-plane, so verify with
unweighted means). Everything is non-dimensional (``units = "1"``) and deterministic for a
seed.

The settings and their validation are in :mod:`.toy_settings`; netCDF writing and the
resumable batched runs of :func:`write_toy_ensemble` in :mod:`.toy_io` (its
:func:`~sciml.weather.toy_io.write_ensemble` is importable from here too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from tqdm import tqdm

from sciml.weather.qg import QGParams, TwoLayerQG
from sciml.weather.toy_io import Batches, OnBatch, write_ensemble, write_resumably
from sciml.weather.toy_settings import ToySettings, check_settings

__all__ = ["generate_ensemble", "write_ensemble", "write_toy_ensemble"]

#: Toy defaults: cheap (32 x 32 x 2), chaotic, errors doubling in about a day.
TOY_PARAMS = QGParams(n=32, kd=4.0, beta=4.0, shear=1.0, drag=0.5, dt=0.025)
EPOCH = np.datetime64("2000-01-01T00:00", "ns")
#: Trajectories integrated together (start dates x (members + truth)); bounds the memory.
BATCH_ENTRIES = 256


class _Interrupted(Exception):
    """Raised inside a worker when a stop was requested; its batch is discarded."""


def _perturbations(model: TwoLayerQG, count: int, generator: torch.Generator) -> torch.Tensor:
    noise = torch.stack([model.random_state(generator, amplitude=1.0) for _ in range(count)])
    return noise / model.to_grid(noise).std(dim=(-1, -2, -3), keepdim=True)


def generate_ensemble(
    *,
    members: int = 10,
    start_dates: int = 20,
    lead_times: Sequence[float] = (0, 1, 2, 3, 4, 5, 6),
    interval: float = 2.0,
    spin_up: float = 60.0,
    perturbation: float = 0.02,
    model_error: float = 0.0,
    seed: int = 0,
    params: QGParams = TOY_PARAMS,
    progress: bool = False,
    threads: int = 1,
) -> xr.Dataset:
    """Generate a truth and an ensemble of QG forecasts for many start dates and lead times.

    Args:
        members: Ensemble size.
        start_dates: Number of start dates, ``interval`` days apart.
        lead_times: Lead times in days (multiples of ``params.dt``, ascending without
            repeats, from 0 up to :data:`~sciml.weather.toy_settings.MAX_DAYS`).
        interval: Days between start dates (> 0, a multiple of ``params.dt``).
        spin_up: Days of spin-up before the first start date (a multiple of ``params.dt``).
        perturbation: Initial perturbation, relative to the PV standard deviation (>= 0).
        model_error: Spread of the members' log bottom drag (0: perfect model).
        seed: Seed of every random draw (>= 0).
        params: Model parameters.
        progress: Show a tqdm progress bar.
        threads: Worker threads, each integrating batches of start dates (the result does
            not depend on it). torch runs single-threaded inside each (small FFTs are fastest
            so); its previous setting is restored.

    Returns:
        The dataset described in the module docstring.

    Raises:
        ValueError: For an impossible setting, before any work starts.
    """
    settings = ToySettings(
        members, start_dates, tuple(lead_times), interval, spin_up, perturbation, model_error, seed
    )
    ds = _generate(settings, params, progress=progress, threads=threads)
    assert ds is not None  # never stopped
    return ds


def _generate(
    settings: ToySettings,
    params: QGParams,
    *,
    progress: bool,
    threads: int,
    done: Batches | None = None,
    on_batch: OnBatch | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> xr.Dataset | None:
    """Validate, then integrate every batch of start dates not in ``done``.

    ``on_batch(index, psi, q)`` receives each finished batch; once ``stop()`` is true the
    running batches are abandoned and None is returned.
    """
    steps = check_settings(settings, params, threads)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _integrate(settings, params, steps, progress, threads, done or {}, on_batch, stop)
    finally:
        torch.set_num_threads(previous)


def _integrate(
    settings: ToySettings,
    params: QGParams,
    steps: np.ndarray,
    progress: bool,
    threads: int,
    done: Batches,
    on_batch: OnBatch | None,
    stop: Callable[[], bool],
) -> xr.Dataset | None:
    members, start_dates = settings.members, settings.start_dates
    generator = torch.Generator().manual_seed(settings.seed)
    model = TwoLayerQG(params)
    state = model.run(model.random_state(generator), settings.spin_up)
    starts = []
    for _ in range(start_dates):
        starts.append(state)
        state = model.run(state, settings.interval)
    start = torch.stack(starts)  # (time, 2, n, m)
    scale = model.to_grid(start).std()
    batch = start[:, None].expand(-1, members + 1, -1, -1, -1).clone()
    noise = _perturbations(model, start_dates * (members + 1), generator)
    noise = (
        settings.perturbation * scale * noise.reshape(start_dates, members + 1, *noise.shape[1:])
    )
    # members = analysis + e_m with analysis = truth - e_0: truth and members exchangeable
    batch[:, 1:] += noise[:, 1:] - noise[:, :1]
    drag = torch.full((start_dates, members + 1), params.drag, dtype=torch.float64)
    if settings.model_error > 0:
        factor = torch.exp(
            settings.model_error * torch.randn(start_dates, members, generator=generator)
        )
        drag[:, 1:] *= factor.to(torch.float64)
    n = params.n
    shape = (start_dates, members + 1, len(steps), 2, n, n)
    psi, q = np.empty(shape), np.empty(shape)
    group = max(1, BATCH_ENTRIES // (members + 1))  # start dates per batch: bounded memory
    parts = [slice(i, min(i + group, start_dates)) for i in range(0, start_dates, group)]
    bar = tqdm(
        total=start_dates * int(steps[-1]),
        disable=not progress,
        desc="QG ensemble",
        unit="date-step",
    )

    def integrate(index: int) -> None:
        part = parts[index]
        if index in done:
            psi[part], q[part] = done[index]
            bar.update(int(steps[-1]) * (part.stop - part.start))
            return
        state, current = batch[part], 0
        for lead, target in enumerate(steps):
            for _ in range(target - current):
                if stop():
                    raise _Interrupted
                state = model.step(state, drag[part])
            bar.update((target - current) * (part.stop - part.start))
            current = target
            psi[part, :, lead] = model.to_grid(model.invert(state)).numpy()
            q[part, :, lead] = model.to_grid(state).numpy()
        if on_batch is not None:
            on_batch(index, psi[part], q[part])

    interrupted = False
    with ThreadPoolExecutor(max_workers=threads) as pool:  # torch ops release the GIL
        for future in [pool.submit(integrate, index) for index in range(len(parts))]:
            try:
                future.result()
            except _Interrupted:
                interrupted = True
    bar.close()
    if interrupted:
        return None
    return _to_dataset(psi, q, np.asarray(settings.lead_times, dtype=np.float64), params, settings)


def _to_dataset(
    psi: np.ndarray, q: np.ndarray, leads: np.ndarray, params: QGParams, settings: ToySettings
) -> xr.Dataset:
    # psi, q: (time, member + 1, lead_time, level, lat, lon); slot 0 is the truth
    n = params.n
    time = EPOCH + (np.arange(psi.shape[0]) * settings.interval * 86400e9).astype("timedelta64[ns]")
    lead = (leads * 86400e9).astype("timedelta64[ns]")
    coords = {
        "member": (
            "member",
            np.arange(psi.shape[1] - 1),
            {"standard_name": "realization", "long_name": "ensemble member"},
        ),
        "time": (
            "time",
            time,
            {"standard_name": "forecast_reference_time", "long_name": "start date"},
        ),
        "lead_time": (
            "lead_time",
            lead,
            {"standard_name": "forecast_period", "long_name": "lead time"},
        ),
        "level": (
            "level",
            np.array([1, 2]),
            {"long_name": "QG layer (1: upper, 2: lower)", "units": "1", "positive": "down"},
        ),
        "lat": (
            "lat",
            30 + 30 * (np.arange(n) + 0.5) / n,
            {
                "standard_name": "latitude",
                "units": "degrees_north",
                "comment": "label of the periodic beta-plane y coordinate",
            },
        ),
        "lon": (
            "lon",
            360 * np.arange(n) / n,
            {"standard_name": "longitude", "units": "degrees_east"},
        ),
    }
    dims = ("member", "time", "lead_time", "level", "lat", "lon")
    truth_dims = dims[1:]
    psi_attrs = {"long_name": "streamfunction", "units": "1"}
    q_attrs = {"long_name": "potential vorticity anomaly", "units": "1"}
    ds = xr.Dataset(
        {
            "psi": (dims, np.moveaxis(psi[:, 1:], 1, 0), psi_attrs),
            "q": (dims, np.moveaxis(q[:, 1:], 1, 0), q_attrs),
            "psi_truth": (truth_dims, psi[:, 0], {**psi_attrs, "long_name": "true streamfunction"}),
            "q_truth": (truth_dims, q[:, 0], {**q_attrs, "long_name": "truth PV anomaly"}),
        },
        coords=coords,
    )
    ds = ds.assign_coords(valid_time=ds["time"] + ds["lead_time"])
    ds["valid_time"].attrs = {"standard_name": "time", "long_name": "valid time"}
    recorded = ("members", "seed", "perturbation", "model_error")
    settings_text = ", ".join(f"{key}={getattr(settings, key)}" for key in recorded)
    ds.attrs = {
        "Conventions": "CF-1.8",
        "title": "Toy ensemble forecasts of a two-layer quasi-geostrophic model",
        "source": f"sciml.weather.toy ({params}, spin_up={settings.spin_up}, "
        f"interval={settings.interval}, "
        f"{settings_text})",
        "comment": "perfect-model ensemble from perturbed initial conditions; time unit = 1 day",
    }
    return ds


def write_toy_ensemble(
    path: Path | str,
    *,
    params: QGParams = TOY_PARAMS,
    progress: bool = False,
    threads: int = 1,
    handle_signals: bool = True,
    **settings: object,
) -> xr.Dataset | None:
    """Generate a toy ensemble into ``path`` (netCDF), resumably.

    Each finished batch of start dates is kept (atomically) in ``<path>.partial/``; on
    SIGUSR1/SIGTERM the running batches are abandoned and None is returned. Calling again
    with the same settings integrates only the missing batches and writes the same file,
    bit for bit; other settings are refused while the folder exists. The folder is removed
    once ``path`` is written (atomically).

    Args:
        path: Output netCDF path.
        params: Model parameters.
        progress: Show a tqdm progress bar.
        threads: Worker threads.
        handle_signals: Stop cleanly on SIGUSR1/SIGTERM (main thread only).
        **settings: :func:`generate_ensemble`'s ensemble settings (``members``, ...).

    Returns:
        The dataset written, or None when interrupted by a signal.
    """
    path = Path(path)
    unknown = set(settings) - {field.name for field in fields(ToySettings)}
    if unknown:
        raise TypeError(f"unknown settings {sorted(unknown)}")
    chosen = ToySettings(**{**asdict(ToySettings()), **settings})
    chosen = replace(chosen, lead_times=tuple(map(float, chosen.lead_times)))
    check_settings(chosen, params, threads)
    config = json.dumps({**asdict(chosen), "params": repr(params)}, sort_keys=True) + "\n"

    def generate(done: Batches, on_batch: OnBatch, stop: Callable[[], bool]) -> xr.Dataset | None:
        return _generate(
            chosen,
            params,
            progress=progress,
            threads=threads,
            done=done,
            on_batch=on_batch,
            stop=stop,
        )

    return write_resumably(path, config, generate, handle_signals=handle_signals)
