"""Writing toy ensembles: their labelled layout, compressed netCDF, resumable batched runs.

A batched run keeps each finished batch of start dates (atomically) in ``<path>.partial/``
with the configuration that made it; a rerun with the same configuration integrates only
the missing batches and writes the same file, bit for bit; another configuration is
refused while the folder exists. The folder is removed once ``path`` is written.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from sciml.distributed import PreemptionFlag
from sciml.io_utils import atomic_path, atomic_write_bytes, atomic_write_text
from sciml.weather.store import netcdf_encoding
from sciml.weather.toy.qg import QGParams, topography_pattern
from sciml.weather.toy.settings import ToySettings

__all__ = ["Batches", "Generate", "OnBatch", "to_dataset", "write_ensemble", "write_resumably"]

#: The first start date of a toy ensemble.
EPOCH = np.datetime64("2000-01-01T00:00", "ns")
#: Finished batches by index: ``(psi, q)`` of their start dates.
Batches = dict[int, tuple[np.ndarray, np.ndarray]]
#: Receives each finished batch: ``on_batch(index, psi, q)``.
OnBatch = Callable[[int, np.ndarray, np.ndarray], None]
#: ``generate(done, on_batch, stop)``: integrate the batches not ``done``, hand each finished
#: one to ``on_batch(index, psi, q)``; None once ``stop()`` is true.
Generate = Callable[[Batches, OnBatch, Callable[[], bool]], xr.Dataset | None]


def write_ensemble(ds: xr.Dataset, path: Path | str, *, dtype: str = "float32") -> Path:
    """Write an ensemble dataset to netCDF atomically and compressed; return the path.

    One start date per chunk (:func:`sciml.weather.store.netcdf_encoding`): a training
    sample decompresses its own date only.

    Args:
        ds: Dataset (e.g. from :func:`sciml.weather.toy.ensemble.generate_ensemble`).
        path: Output path.
        dtype: On-disk type of the data variables (float32 like real archives halves the
            size; ``"float64"`` keeps the model's precision).
    """
    path = Path(path)
    with atomic_path(path, suffix=".nc") as tmp:
        ds.to_netcdf(tmp, encoding=netcdf_encoding(ds, dtype=dtype))
    return path


def _partial_dir(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _load_batches(folder: Path, config: str) -> Batches:
    """The finished batches of an interrupted run with the same configuration."""
    if not folder.exists():
        return {}
    recorded = (folder / "config.json").read_text() if (folder / "config.json").exists() else ""
    if recorded != config:
        raise ValueError(
            f"{folder} holds the finished batches of a run with other settings "
            f"({recorded.strip() or 'none recorded'}); rerun with those, or delete {folder} "
            "to start over, or write to another --out"
        )
    done = {}
    for batch_file in sorted(folder.glob("batch_*.npz")):
        with np.load(batch_file) as arrays:
            done[int(batch_file.stem.split("_")[1])] = (arrays["psi"], arrays["q"])
    return done


def write_resumably(
    path: Path, config: str, generate: Generate, *, handle_signals: bool
) -> xr.Dataset | None:
    """Run ``generate`` keeping its batches in ``<path>.partial/``, then write ``path``.

    Args:
        path: Output netCDF path.
        config: Text that identifies the run (kept as ``config.json``).
        generate: The batched computation (see :data:`Generate`).
        handle_signals: Stop cleanly on SIGUSR1/SIGTERM (main thread only).

    Returns:
        The dataset written, or None when interrupted by a signal.
    """
    folder = _partial_dir(path)
    done = _load_batches(folder, config)

    def keep(index: int, psi: np.ndarray, q: np.ndarray) -> None:
        buffer = io.BytesIO()
        np.savez(buffer, psi=psi, q=q)
        atomic_write_bytes(folder / f"batch_{index:05d}.npz", buffer.getvalue())

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "config.json", config)
    with PreemptionFlag(handle_signals) as signals:
        ds = generate(done, keep, lambda: signals.received is not None)
        if ds is None:
            return None
        write_ensemble(ds, path)  # a signal now is recorded and ignored: the file completes
    shutil.rmtree(folder)
    return ds


def to_dataset(
    psi: np.ndarray,
    q: np.ndarray,
    leads: np.ndarray,
    settings: ToySettings,
    *,
    params: QGParams,
    forecast_params: QGParams | None,
) -> xr.Dataset:
    """Label integrated fields as the toy dataset (see :mod:`sciml.weather.toy`).

    Args:
        psi: Streamfunction ``(time, member + 1, lead_time, level, lat, lon)``, slot 0 the
            truth.
        q: PV anomaly, like ``psi``.
        leads: Lead times in days.
        settings: The ensemble settings.
        params: The truth's model.
        forecast_params: The members' model (None: the truth's).
    """
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
    if params.topography:
        ds["topography"] = (
            ("lat", "lon"),
            (params.topography * topography_pattern(n)).numpy(),
            {"long_name": "bottom topography (static field of the truth's model)", "units": "1"},
        )
    ds = ds.assign_coords(valid_time=ds["time"] + ds["lead_time"])
    ds["valid_time"].attrs = {"standard_name": "time", "long_name": "valid time"}
    recorded = ("members", "seed", "perturbation", "model_error", "spread_factor")
    perfect = forecast_params in (None, params) and settings.spread_factor == 1
    kind = "perfect-model" if perfect else "imperfect-model"
    settings_text = ", ".join(f"{key}={getattr(settings, key)}" for key in recorded)
    ds.attrs = {
        "Conventions": "CF-1.8",
        "title": "Toy ensemble forecasts of a two-layer quasi-geostrophic model",
        "source": f"sciml.weather.toy (truth: {params}, forecasts: "
        f"{forecast_params or 'the same model'}, spin_up={settings.spin_up}, "
        f"interval={settings.interval}, {settings_text})",
        "comment": f"{kind} ensemble from perturbed initial conditions; time unit = 1 day",
    }
    return ds
