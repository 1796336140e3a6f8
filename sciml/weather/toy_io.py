"""Writing toy ensembles: compressed netCDF, and resumable batched runs.

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

__all__ = ["Batches", "Generate", "OnBatch", "write_ensemble", "write_resumably"]

#: Finished batches by index: ``(psi, q)`` of their start dates.
Batches = dict[int, tuple[np.ndarray, np.ndarray]]
#: Receives each finished batch: ``on_batch(index, psi, q)``.
OnBatch = Callable[[int, np.ndarray, np.ndarray], None]
#: ``generate(done, on_batch, stop)``: integrate the batches not ``done``, hand each finished
#: one to ``on_batch(index, psi, q)``; None once ``stop()`` is true.
Generate = Callable[[Batches, OnBatch, Callable[[], bool]], xr.Dataset | None]


def write_ensemble(ds: xr.Dataset, path: Path | str, *, dtype: str = "float32") -> Path:
    """Write an ensemble dataset to netCDF atomically and compressed; return the path.

    Args:
        ds: Dataset (e.g. from :func:`sciml.weather.toy.generate_ensemble`).
        path: Output path.
        dtype: On-disk type of the data variables (float32 like real archives halves the
            size; ``"float64"`` keeps the model's precision).
    """
    path = Path(path)
    encoding = {name: {"zlib": True, "complevel": 4, "dtype": dtype} for name in ds.data_vars}
    with atomic_path(path, suffix=".nc") as tmp:
        ds.to_netcdf(tmp, encoding=encoding)
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
