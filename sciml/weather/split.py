"""Split an ensemble file into training, validation and test files by start date.

Every split holds whole start dates (whole ensembles of whole fields), in time
order: training first, test last, so no start date, and no forecast started from
one, is seen by two splits. The boundaries are fractions of the start dates
(:func:`sciml.weather.data.split_start_dates`) or dates
(:func:`sciml.weather.data.split_by_time`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from sciml.io_utils import atomic_path
from sciml.weather.data import split_by_time, split_start_dates
from sciml.weather.store import netcdf_encoding

__all__ = ["SPLITS", "split_dataset", "write_splits"]

#: The splits in time order; each is written as ``<name>.nc``.
SPLITS = ("train", "validation", "test")


def split_dataset(
    ds: xr.Dataset,
    *,
    validation: float | None = None,
    test: float | None = None,
    val_start: str | np.datetime64 | None = None,
    test_start: str | np.datetime64 | None = None,
) -> dict[str, xr.Dataset]:
    """Training, validation and test parts of ``ds`` by start date (``time``).

    Either fractions of the start dates (the last ``test`` fraction tests, the
    ``validation`` fraction before it validates; 0.2 each when nothing is given) or
    the first validation and first test date, not both.

    Raises:
        ValueError: Fractions and dates mixed, only one date, dates out of order, a
            split without start dates, or no ``time`` dimension.
    """
    dates = (val_start, test_start)
    if any(date is not None for date in dates):
        if validation is not None or test is not None:
            raise ValueError("give the split as fractions or as dates, not both")
        if val_start is None or test_start is None:
            raise ValueError(
                f"a split by date needs both val_start and test_start, got {val_start=} "
                f"and {test_start=}"
            )
        parts = split_by_time(ds, val_start=val_start, test_start=test_start)
    else:
        parts = split_start_dates(
            ds,
            validation=0.2 if validation is None else validation,
            test=0.2 if test is None else test,
        )
    return dict(zip(SPLITS, parts, strict=True))


def _check_outputs(outputs: dict[str, Path], inputs: Sequence[Path], *, overwrite: bool) -> None:
    """Refuse outputs that are inputs, or that exist without ``overwrite``."""
    for name, path in outputs.items():
        for source in inputs:
            if path.exists() and source.exists() and path.samefile(source):
                raise ValueError(f"the {name} output {path} is the input file {source}")
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists; pass --overwrite to replace it")


def write_splits(
    ds: xr.Dataset,
    out: Path | str,
    *,
    inputs: Sequence[Path | str] = (),
    overwrite: bool = False,
    validation: float | None = None,
    test: float | None = None,
    val_start: str | np.datetime64 | None = None,
    test_start: str | np.datetime64 | None = None,
) -> dict[str, Path]:
    """Write ``out/train.nc``, ``out/validation.nc`` and ``out/test.nc``; return their paths.

    Every check is made before anything is written, and the three files appear
    together: each is written to a temporary name, and all are renamed once all
    are complete. Data variables keep their types.

    Args:
        ds: Ensemble with a ``time`` (start date) dimension.
        out: Output folder (created when missing).
        inputs: The files ``ds`` was read from; none may be replaced.
        overwrite: Replace existing split files.
        validation: Fraction of the start dates before the test ones that validates.
        test: Fraction of the last start dates that tests.
        val_start: First validation date (with ``test_start``, instead of fractions).
        test_start: First test date.

    Raises:
        ValueError: See :func:`split_dataset`; ``out`` is a file; an output is an input.
        FileExistsError: An output exists and ``overwrite`` is false.
    """
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {folder} is a file, expected a folder for {', '.join(SPLITS)}")
    outputs = {name: folder / f"{name}.nc" for name in SPLITS}
    _check_outputs(outputs, [Path(path) for path in inputs], overwrite=overwrite)
    parts = split_dataset(
        ds, validation=validation, test=test, val_start=val_start, test_start=test_start
    )
    with contextlib.ExitStack() as stack:
        for name, part in parts.items():
            tmp = stack.enter_context(atomic_path(outputs[name], suffix=".nc"))
            part.to_netcdf(tmp, encoding=netcdf_encoding(part))  # one start date per chunk
    return outputs
