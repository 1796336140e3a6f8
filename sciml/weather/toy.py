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
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from tqdm import tqdm

from sciml.io_utils import atomic_path
from sciml.weather.qg import QGParams, TwoLayerQG

__all__ = ["generate_ensemble", "write_ensemble"]

#: Toy defaults: cheap (32 x 32 x 2), chaotic, errors doubling in about a day.
TOY_PARAMS = QGParams(n=32, kd=4.0, beta=4.0, shear=1.0, drag=0.5, dt=0.025)
EPOCH = np.datetime64("2000-01-01T00:00", "ns")
#: Trajectories integrated together (start dates x (members + truth)); bounds the memory.
BATCH_ENTRIES = 256


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
        lead_times: Lead times in days (multiples of ``params.dt``, ascending, from 0 up).
        interval: Days between start dates.
        spin_up: Days of spin-up before the first start date.
        perturbation: Initial perturbation, relative to the PV standard deviation.
        model_error: Spread of the members' log bottom drag (0: perfect model).
        seed: Seed of every random draw.
        params: Model parameters.
        progress: Show a tqdm progress bar.
        threads: Worker threads, each integrating batches of start dates (the result does
            not depend on it). torch runs single-threaded inside each (small FFTs are fastest
            so); its previous setting is restored.

    Returns:
        The dataset described in the module docstring.
    """
    leads = np.asarray(lead_times, dtype=np.float64)
    if members < 1 or start_dates < 1:
        raise ValueError(f"need members >= 1 and start_dates >= 1, got {members}, {start_dates}")
    if leads.size == 0 or leads[0] < 0 or np.any(np.diff(leads) <= 0):
        raise ValueError(f"lead_times must be ascending and non-negative, got {lead_times}")
    steps = leads / params.dt
    if not np.allclose(steps, np.round(steps)):
        raise ValueError(f"lead_times {lead_times} must be multiples of dt={params.dt}")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _generate(
            members,
            start_dates,
            leads,
            steps,
            interval,
            spin_up,
            perturbation,
            model_error,
            seed,
            params,
            progress,
            threads,
        )
    finally:
        torch.set_num_threads(previous)


def _generate(
    members: int,
    start_dates: int,
    leads: np.ndarray,
    steps: np.ndarray,
    interval: float,
    spin_up: float,
    perturbation: float,
    model_error: float,
    seed: int,
    params: QGParams,
    progress: bool,
    threads: int,
) -> xr.Dataset:
    generator = torch.Generator().manual_seed(seed)
    model = TwoLayerQG(params)
    state = model.run(model.random_state(generator), spin_up)
    starts = []
    for _ in range(start_dates):
        starts.append(state)
        state = model.run(state, interval)
    start = torch.stack(starts)  # (time, 2, n, m)
    scale = model.to_grid(start).std()
    batch = start[:, None].expand(-1, members + 1, -1, -1, -1).clone()
    noise = _perturbations(model, start_dates * (members + 1), generator)
    noise = perturbation * scale * noise.reshape(start_dates, members + 1, *noise.shape[1:])
    # members = analysis + e_m with analysis = truth - e_0: truth and members exchangeable
    batch[:, 1:] += noise[:, 1:] - noise[:, :1]
    drag = torch.full((start_dates, members + 1), params.drag, dtype=torch.float64)
    if model_error > 0:
        factor = torch.exp(model_error * torch.randn(start_dates, members, generator=generator))
        drag[:, 1:] *= factor.to(torch.float64)
    n = params.n
    shape = (start_dates, members + 1, len(leads), 2, n, n)
    psi, q = np.empty(shape), np.empty(shape)
    group = max(1, BATCH_ENTRIES // (members + 1))  # start dates per batch: bounded memory
    bar = tqdm(
        total=start_dates * int(round(steps[-1])),
        disable=not progress,
        desc="QG ensemble",
        unit="date-step",
    )

    def integrate(part: slice) -> None:
        state, done = batch[part], 0
        for index, target in enumerate(np.round(steps).astype(int)):
            for _ in range(target - done):
                state = model.step(state, drag[part])
            bar.update((target - done) * (part.stop - part.start))
            done = target
            psi[part, :, index] = model.to_grid(model.invert(state)).numpy()
            q[part, :, index] = model.to_grid(state).numpy()

    parts = [slice(i, min(i + group, start_dates)) for i in range(0, start_dates, group)]
    with ThreadPoolExecutor(max_workers=threads) as pool:  # torch ops release the GIL
        for future in [pool.submit(integrate, part) for part in parts]:
            future.result()
    bar.close()
    return _to_dataset(
        psi,
        q,
        leads,
        interval,
        spin_up,
        params,
        members=members,
        seed=seed,
        perturbation=perturbation,
        model_error=model_error,
    )


def _to_dataset(psi, q, leads, interval, spin_up, params, **settings) -> xr.Dataset:
    # psi, q: (time, member + 1, lead_time, level, lat, lon); slot 0 is the truth
    n = params.n
    time = EPOCH + (np.arange(psi.shape[0]) * interval * 86400e9).astype("timedelta64[ns]")
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
    settings_text = ", ".join(f"{key}={value}" for key, value in settings.items())
    ds.attrs = {
        "Conventions": "CF-1.8",
        "title": "Toy ensemble forecasts of a two-layer quasi-geostrophic model",
        "source": f"sciml.weather.toy ({params}, spin_up={spin_up}, interval={interval}, "
        f"{settings_text})",
        "comment": "perfect-model ensemble from perturbed initial conditions; time unit = 1 day",
    }
    return ds


def write_ensemble(ds: xr.Dataset, path: Path | str, *, dtype: str = "float32") -> Path:
    """Write an ensemble dataset to netCDF atomically and compressed; return the path.

    Args:
        ds: Dataset (e.g. from :func:`generate_ensemble`).
        path: Output path.
        dtype: On-disk type of the data variables (float32 like real archives halves the
            size; ``"float64"`` keeps the model's precision).
    """
    path = Path(path)
    encoding = {name: {"zlib": True, "complevel": 4, "dtype": dtype} for name in ds.data_vars}
    with atomic_path(path, suffix=".nc") as tmp:
        ds.to_netcdf(tmp, encoding=encoding)
    return path
