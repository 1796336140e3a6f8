"""Toy ensemble forecasts from real dynamics: the two-layer QG model of :mod:`.qg`.

Recipe (a "perfect model" ensemble prediction system unless asked otherwise):

1. spin the model up from small random noise into statistically steady baroclinic
   turbulence (``spin_up`` days);
2. run the truth on and take its state every ``interval`` days as a start date;
3. from each start state run the truth once more (slot 0 of the batch) and ``members``
   forecasts starting from ``analysis + f e_m``, where the analysis is ``truth - e_0`` and
   the ``e`` are independent large-scale PV noise of relative amplitude ``perturbation``:
   with ``f = spread_factor = 1`` the truth is then one more draw from the initial
   ensemble's distribution (a reliable ensemble, spread-skill ratio near 1 at every lead
   time); ``f < 1`` makes it under-dispersive. Optional model error: the members run
   another model (``forecast_params``, e.g. other drag, shear or topography: a systematic,
   flow-dependent error) and/or each member's bottom drag is multiplied by
   ``exp(model_error * N(0, 1))``;
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
seed. With bottom topography the truth's (static) ``topography`` field is included. Named,
fixed configurations (with their train/validation/test start dates) are in
:mod:`~sciml.weather.toy.presets`.

The settings and their validation are in :mod:`~sciml.weather.toy.settings`; netCDF writing and the
resumable batched runs of :func:`write_toy_ensemble` in :mod:`~sciml.weather.toy.io` (its
:func:`~sciml.weather.toy.io.write_ensemble` is importable from here too).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from tqdm import tqdm

from sciml.progress import Milestones, bar_visible, phase
from sciml.weather.toy.io import Batches, OnBatch, to_dataset, write_ensemble, write_resumably
from sciml.weather.toy.qg import QGParams, TwoLayerQG
from sciml.weather.toy.settings import ToySettings, check_settings

#: Says what the generation does (``INFO``, :mod:`sciml.progress`).
logger = logging.getLogger(__name__)

__all__ = ["generate_ensemble", "write_ensemble", "write_toy_ensemble"]

#: Toy defaults: cheap (32 x 32 x 2), chaotic, errors doubling in about a day.
TOY_PARAMS = QGParams(n=32, kd=4.0, beta=4.0, shear=1.0, drag=0.5, dt=0.025)
#: Trajectories integrated together (start dates x (members + truth)); bounds the memory.
BATCH_ENTRIES = 256


class _Interrupted(Exception):
    """Raised inside a worker when a stop was requested; its batch is discarded."""


def _perturbations(model: TwoLayerQG, count: int, generator: torch.Generator) -> torch.Tensor:
    noise = torch.stack([model.random_state(generator, amplitude=1.0) for _ in range(count)])
    return noise / model.to_grid(noise).std(dim=(-1, -2, -3), keepdim=True)


class _Models:
    """The truth's model (slot 0 of a batch) and the members' forecast model (slots 1:)."""

    def __init__(self, params: QGParams, forecast_params: QGParams | None) -> None:
        self.truth = TwoLayerQG(params)
        self.forecast = self.truth if forecast_params is None else TwoLayerQG(forecast_params)

    def step(self, state: torch.Tensor, drag: torch.Tensor) -> torch.Tensor:
        if self.forecast is self.truth:  # one batched step (perfect model)
            return self.truth.step(state, drag)
        truth = self.truth.step(state[:, :1], drag[:, :1])
        return torch.cat([truth, self.forecast.step(state[:, 1:], drag[:, 1:])], dim=1)

    def streamfunction(self, state: torch.Tensor) -> torch.Tensor:
        truth = self.truth.invert(state[:, :1])
        return torch.cat([truth, self.forecast.invert(state[:, 1:])], dim=1)


def generate_ensemble(
    *,
    members: int = 10,
    start_dates: int = 20,
    lead_times: Sequence[float] = (0, 1, 2, 3, 4, 5, 6),
    interval: float = 2.0,
    spin_up: float = 60.0,
    perturbation: float = 0.02,
    model_error: float = 0.0,
    spread_factor: float = 1.0,
    seed: int = 0,
    params: QGParams = TOY_PARAMS,
    forecast_params: QGParams | None = None,
    progress: bool = False,
    threads: int = 1,
) -> xr.Dataset:
    """Generate a truth and an ensemble of QG forecasts for many start dates and lead times.

    Args:
        members: Ensemble size.
        start_dates: Number of start dates, ``interval`` days apart.
        lead_times: Lead times in days (multiples of ``params.dt``, ascending without
            repeats, from 0 up to :data:`~sciml.weather.toy.settings.MAX_DAYS`).
        interval: Days between start dates (> 0, a multiple of ``params.dt``).
        spin_up: Days of spin-up before the first start date (a multiple of ``params.dt``).
        perturbation: Initial error of the analysis, relative to the PV standard deviation
            (>= 0).
        model_error: Spread of the members' log bottom drag (0: the same drag for all).
        spread_factor: Members' initial perturbations relative to the analysis error
            (1: a reliable initial ensemble; < 1: under-dispersive, as real systems are).
        seed: Seed of every random draw (>= 0).
        params: The truth's model.
        forecast_params: The members' model (None: ``params``, a perfect model); it must
            share the grid ``n`` and the step ``dt`` of ``params``.
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
        members=members,
        start_dates=start_dates,
        lead_times=tuple(lead_times),
        interval=interval,
        spin_up=spin_up,
        perturbation=perturbation,
        model_error=model_error,
        spread_factor=spread_factor,
        seed=seed,
    )
    ds = _generate(
        settings, params, forecast_params=forecast_params, progress=progress, threads=threads
    )
    assert ds is not None  # never stopped
    return ds


def _generate(
    settings: ToySettings,
    params: QGParams,
    *,
    forecast_params: QGParams | None,
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
    steps = check_settings(settings, params, threads, forecast_params=forecast_params)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        models = _Models(params, forecast_params)
        return _integrate(settings, models, steps, progress, threads, done or {}, on_batch, stop)
    finally:
        torch.set_num_threads(previous)


def _initial_states(
    settings: ToySettings, models: _Models, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(start_dates, members + 1, ...)`` initial PV (slot 0: truth) and the drag of each."""
    model, members, start_dates = models.truth, settings.members, settings.start_dates
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
    # members = analysis + f e_m with analysis = truth - e_0: for f = 1 the truth and the
    # members are exchangeable; f < 1 makes the initial ensemble under-dispersive
    batch[:, 1:] += settings.spread_factor * noise[:, 1:] - noise[:, :1]
    drag = torch.full((start_dates, members + 1), model.params.drag, dtype=torch.float64)
    drag[:, 1:] = models.forecast.params.drag
    if settings.model_error > 0:
        factor = torch.exp(
            settings.model_error * torch.randn(start_dates, members, generator=generator)
        )
        drag[:, 1:] *= factor.to(torch.float64)
    return batch, drag


def _integrate(
    settings: ToySettings,
    models: _Models,
    steps: np.ndarray,
    progress: bool,
    threads: int,
    done: Batches,
    on_batch: OnBatch | None,
    stop: Callable[[], bool],
) -> xr.Dataset | None:
    members, start_dates = settings.members, settings.start_dates
    days = settings.spin_up + settings.interval * (start_dates - 1)
    with phase(logger, f"QG ensemble: the truth's {days:g} days to {start_dates} start dates"):
        generator = torch.Generator().manual_seed(settings.seed)
        batch, drag = _initial_states(settings, models, generator)
    n = models.truth.params.n
    shape = (start_dates, members + 1, len(steps), 2, n, n)
    psi, q = np.empty(shape), np.empty(shape)
    group = max(1, BATCH_ENTRIES // (members + 1))  # start dates per batch: bounded memory
    parts = [slice(i, min(i + group, start_dates)) for i in range(0, start_dates, group)]
    shown, total = bar_visible(progress), start_dates * int(steps[-1])
    bar = tqdm(total=total, disable=not shown, desc="QG ensemble", unit="date-step")
    what = f"QG ensemble: {start_dates} start dates x {members + 1} members to day "
    what += f"{settings.lead_times[-1]:g}"
    milestones = Milestones(logger, what, total, unit="date-steps", enabled=not shown)

    def advance(amount: int) -> None:
        bar.update(amount)
        milestones.advance(amount)

    def integrate(index: int) -> None:
        part = parts[index]
        if index in done:
            psi[part], q[part] = done[index]
            advance(int(steps[-1]) * (part.stop - part.start))
            return
        state, current = batch[part], 0
        for lead, target in enumerate(steps):
            for _ in range(target - current):
                if stop():
                    raise _Interrupted
                state = models.step(state, drag[part])
            advance((target - current) * (part.stop - part.start))
            current = target
            psi[part, :, lead] = models.truth.to_grid(models.streamfunction(state)).numpy()
            q[part, :, lead] = models.truth.to_grid(state).numpy()
        if on_batch is not None:
            on_batch(index, psi[part], q[part])

    interrupted = False
    with ThreadPoolExecutor(max_workers=threads) as pool:  # torch ops release the GIL
        futures = [pool.submit(integrate, index) for index in range(len(parts))]
        for future in futures:
            try:
                future.result()
            except _Interrupted:
                interrupted = True
    bar.close()
    if interrupted:
        return None
    leads = np.asarray(settings.lead_times, dtype=np.float64)
    forecast = None if models.forecast is models.truth else models.forecast.params
    return to_dataset(psi, q, leads, settings, params=models.truth.params, forecast_params=forecast)


def write_toy_ensemble(
    path: Path | str,
    *,
    params: QGParams = TOY_PARAMS,
    forecast_params: QGParams | None = None,
    progress: bool = False,
    threads: int = 1,
    handle_signals: bool = True,
    attrs: Mapping[str, str] | None = None,
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
        params: The truth's model.
        forecast_params: The members' model (None: ``params``).
        progress: Show a tqdm progress bar.
        threads: Worker threads.
        handle_signals: Stop cleanly on SIGUSR1/SIGTERM (main thread only).
        attrs: Extra global attributes of the file (part of the settings a resume must match).
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
    check_settings(chosen, params, threads, forecast_params=forecast_params)
    models = {"params": repr(params), "forecast_params": repr(forecast_params)}
    extra = dict(attrs or {})
    config = json.dumps({**asdict(chosen), **models, "attrs": extra}, sort_keys=True) + "\n"

    def generate(done: Batches, on_batch: OnBatch, stop: Callable[[], bool]) -> xr.Dataset | None:
        ds = _generate(
            chosen,
            params,
            forecast_params=forecast_params,
            progress=progress,
            threads=threads,
            done=done,
            on_batch=on_batch,
            stop=stop,
        )
        return None if ds is None else ds.assign_attrs(extra)

    return write_resumably(path, config, generate, handle_signals=handle_signals)
