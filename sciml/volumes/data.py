"""Generated volume data sets for CosmoFlow and the 3D U-Net, deterministic from a seed.

:func:`write_cosmology` writes cosmology-like volumes with known parameters,
in the layout of the MLPerf HPC CosmoFlow data: four channels (the same
Gaussian random field grown to four redshifts), int16 particle counts read
as ``log1p(counts)``. The field has the power spectrum ``P(k) ~ k**slope``,
scaled to a standard deviation ``sigma`` at the last redshift; the density
is log-normal, ``exp(delta - var / 2)`` (mean 1); the counts are Poisson with
mean ``nbar * density``. The four targets (``params``, scaled to [-1, 1];
``params_physical`` unscaled) are ``sigma``, ``slope``, ``nbar`` and the
growth factor between consecutive redshifts.

:func:`write_segmentation` writes a volumetric segmentation set: a noisy
Gaussian random field and labels from its structures (0: voids, below
-0.5 standard deviations of the smooth field; 2: halos, above +1; 1: the
rest).

Both write an uncompressed Zarr (v2, consolidated) store chunked as
``(1, C, chunks, chunks, chunks)`` (so a rank's block is read as whole chunks),
every chunk written (empty ones too) and inventoried in the store's manifest
(:func:`sciml.datasets.store.write_manifest`, checked when the store is opened),
atomically (a temporary name, then a rename). Sample ``i`` depends only on ``(seed, i)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from sciml.datasets.store import write_manifest
from sciml.io_utils import atomic_folder
from sciml.progress import Milestones, phase

__all__ = ["PARAMS", "RANGES", "gaussian_field", "write_cosmology", "write_segmentation"]

#: CosmoFlow's targets, in order.
PARAMS = ("sigma", "slope", "nbar", "growth")
#: The uniform range each parameter is drawn from.
RANGES = {"sigma": (0.5, 1.5), "slope": (-2.5, -0.5), "nbar": (2.0, 8.0), "growth": (0.6, 0.9)}
#: Redshift channels of a CosmoFlow volume.
CHANNELS = 4

#: Says how far the generation is (``INFO``, :mod:`sciml.progress`).
logger = logging.getLogger(__name__)


def _check_sizes(samples: int, size: int, chunks: int | None, seed: int) -> int:
    for name, value in (("samples", samples), ("size", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    chunks = max(size // 4, 1) if chunks is None else chunks
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= size:
        raise ValueError(f"chunks must be an integer in [1, size={size}], got {chunks!r}")
    return chunks


def gaussian_field(size: int, slope: float, rng: np.random.Generator) -> np.ndarray:
    """A periodic Gaussian random field ``(size,)*3`` with ``P(k) ~ k**slope``, unit variance."""
    k = np.sqrt(
        sum(
            np.square(f)
            for f in np.meshgrid(
                np.fft.fftfreq(size), np.fft.fftfreq(size), np.fft.rfftfreq(size), indexing="ij"
            )
        )
    )
    amplitude = np.zeros_like(k)
    amplitude[k > 0] = k[k > 0] ** (slope / 2)
    noise = np.fft.rfftn(rng.standard_normal((size, size, size)))
    field = np.fft.irfftn(noise * amplitude, s=(size, size, size), axes=(0, 1, 2))
    return (field - field.mean()) / field.std()


def _cosmology_sample(size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One volume ``(4, size, size, size)`` of int16 counts and its physical parameters."""
    params = np.array([rng.uniform(*RANGES[name]) for name in PARAMS])
    sigma, slope, nbar, growth = params
    delta = gaussian_field(size, slope, rng)
    counts = np.empty((CHANNELS, size, size, size), dtype=np.int16)
    for channel in range(CHANNELS):  # channel 3 is today's field; earlier ones grew less
        scale = sigma * growth ** (CHANNELS - 1 - channel)
        density = np.exp(scale * delta - scale**2 / 2)
        counts[channel] = np.minimum(rng.poisson(nbar * density), np.iinfo(np.int16).max)
    return counts, params


def _scaled(params: np.ndarray) -> np.ndarray:
    """Parameters mapped from their ranges to [-1, 1]."""
    lo, hi = np.array([RANGES[name] for name in PARAMS]).T
    return 2 * (params - lo) / (hi - lo) - 1


def _write(path: Path, ds: xr.Dataset, variable: str, chunks: int) -> Path:
    """``ds`` as a Zarr store at ``path``, ``variable`` chunked for block reads, atomically."""
    shape = ds[variable].shape
    # uncompressed, as the MLPerf data: a block costs exactly its voxels' bytes
    encoding: dict[str, dict[str, Any]] = {
        variable: {"chunks": (1, shape[1], chunks, chunks, chunks), "compressors": None}
    }
    for name in ds.data_vars:
        if name != variable and ds[name].ndim == 4:
            encoding[str(name)] = {"chunks": (1, chunks, chunks, chunks), "compressors": None}
    with (
        phase(logger, f"writing {path} ({ds.nbytes / 2**20:.1f} MiB)"),
        atomic_folder(path) as partial,
    ):
        try:
            ds.to_zarr(
                partial,
                mode="w",
                encoding=encoding,
                consolidated=True,
                zarr_format=2,
                write_empty_chunks=True,
            )
        except BaseException:
            _settle_zarr_writes()  # before the partial store is removed
            raise
        write_manifest(partial)
    return path


def _settle_zarr_writes(timeout: float = 60.0) -> None:
    """Wait for the chunk writes zarr still has in flight after one of them failed.

    Zarr writes chunks concurrently on its own event loop; when one fails (a full disk)
    the others carry on, and would recreate the partial store after it is removed.
    """
    import asyncio

    from zarr.core.sync import _get_loop

    async def drain() -> None:
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others, timeout=timeout)

    asyncio.run_coroutine_threadsafe(drain(), _get_loop()).result(timeout + 5)


def _samples(
    samples: int,
    seed: int,
    draw: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]],
    *,
    what: str,
) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` draws stacked; a status line at each tenth done (``what`` names them)."""
    milestones = Milestones(logger, what, samples, unit="samples", enabled=True)
    pairs = []
    for i in range(samples):
        pairs.append(draw(np.random.default_rng([seed, i])))
        milestones.advance(1)
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def write_cosmology(
    path: Path | str, *, samples: int, size: int, seed: int = 0, chunks: int | None = None
) -> Path:
    """Write ``samples`` CosmoFlow volumes of ``size**3`` voxels to a Zarr store at ``path``.

    Args:
        path: The Zarr store to create (it must not exist).
        samples: Number of volumes.
        size: Edge of each cubic volume, in voxels.
        seed: Sample ``i`` depends only on ``(seed, i)``.
        chunks: Chunk edge (default ``size // 4``).

    Raises:
        ValueError: For sizes that are not positive integers, a negative seed or a
            chunks outside [1, size].
        FileExistsError: If ``path`` exists.
    """
    chunks = _check_sizes(samples, size, chunks, seed)
    counts, params = _samples(
        samples,
        seed,
        lambda rng: _cosmology_sample(size, rng),
        what=f"CosmoFlow volumes of {size}^3 voxels",
    )
    ds = xr.Dataset(
        {
            "volume": (("sample", "channel", "z", "y", "x"), counts, {"transform": "log1p"}),
            "params": (("sample", "param"), _scaled(params).astype(np.float32)),
            "params_physical": (("sample", "param"), params),
        },
        coords={"channel": [f"redshift{c}" for c in range(CHANNELS)], "param": list(PARAMS)},
        attrs={"generator": "sciml.volumes.data.write_cosmology", "seed": seed},
    )
    return _write(Path(path), ds, "volume", chunks)


def _segmentation_sample(size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One noisy field ``(1, size, size, size)`` (float32) and its labels (int8)."""
    clean = gaussian_field(size, -3.0, rng)
    labels = np.digitize(clean, [-0.5, 1.0]).astype(np.int8)
    noisy = clean + 0.5 * rng.standard_normal(clean.shape)
    return noisy[None].astype(np.float32), labels


def write_segmentation(
    path: Path | str, *, samples: int, size: int, seed: int = 0, chunks: int | None = None
) -> Path:
    """Write ``samples`` noisy fields and their 3-class labels to a Zarr store at ``path``.

    Takes the arguments of :func:`write_cosmology`; the variables are
    ``volume`` ``(sample, channel, z, y, x)`` and ``label`` ``(sample, z, y, x)``.
    """
    chunks = _check_sizes(samples, size, chunks, seed)
    volume, labels = _samples(
        samples,
        seed,
        lambda rng: _segmentation_sample(size, rng),
        what=f"3D U-Net fields of {size}^3 voxels",
    )
    ds = xr.Dataset(
        {
            "volume": (("sample", "channel", "z", "y", "x"), volume),
            "label": (("sample", "z", "y", "x"), labels, {"classes": "0 void, 1 sheet, 2 halo"}),
        },
        coords={"channel": ["field"]},
        attrs={"generator": "sciml.volumes.data.write_segmentation", "seed": seed},
    )
    return _write(Path(path), ds, "volume", chunks)
