"""Split an ensemble by start date into training, validation and test parts, or files.

Every part holds whole start dates (whole ensembles of whole fields), in time order:
training first, test last, so no start date, and no forecast started from one, is seen by
two parts. :func:`split_start_dates` is the one split: ``sciml weather split`` writes its
parts as files (:func:`write_splits`), and the trainers validate on its validation part
of their training file (no test part: they test on another file).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from sciml.datasets.cf import parse_date
from sciml.io_utils import atomic_path
from sciml.weather.store import netcdf_encoding

__all__ = ["SPLITS", "split_start_dates", "write_splits"]

#: The splits in time order; each is written as ``<name>.nc``.
SPLITS = ("train", "validation", "test")


def split_start_dates(
    ds: xr.Dataset,
    *,
    validation: float | None = None,
    test: float | None = None,
    val_start: Any = None,
    test_start: Any = None,
) -> tuple[xr.Dataset, xr.Dataset, xr.Dataset]:
    """Training, validation and test parts of ``ds`` by start date (``time``), in that order.

    Either fractions of the start dates, rounded to whole dates (at least one each): the
    last ``test`` fraction tests, the ``validation`` fraction before it validates, the
    rest trains (0.2 each when neither is given; ``test=0``: no test part, the third is
    empty). Or dates, not both: the first validation date ``val_start`` and the first
    test date ``test_start``, as text (``"2000-06-01"``), ``datetime64`` or dates of the
    data's own calendar (:func:`sciml.datasets.cf.parse_date`).

    Raises:
        ValueError: No ``time`` dimension; fractions and dates mixed, one date alone,
            fractions outside (0, 1) (``test`` may be 0) or summing to 1 or more, too few
            start dates for the parts; dates that are not dates of the data's calendar or
            out of order, or an empty part.
    """
    if "time" not in ds.dims:
        raise ValueError(
            f"split_start_dates needs a 'time' dimension; dimensions are {dict(ds.sizes)}"
        )
    if val_start is not None or test_start is not None:
        if validation is not None or test is not None:
            raise ValueError("give the split as fractions or as dates, not both")
        if val_start is None or test_start is None:
            raise ValueError(
                f"a split by date needs both val_start and test_start, got {val_start=} "
                f"and {test_start=}"
            )
        return _by_dates(ds, val_start, test_start)
    validation = 0.2 if validation is None else validation
    test = 0.2 if test is None else test
    if not (0 < validation < 1 and 0 <= test < 1 and validation + test < 1):
        raise ValueError(
            f"validation and test must be fractions in (0, 1) (test may be 0) that sum to "
            f"less than 1, got {validation} and {test}"
        )
    times = np.unique(ds["time"].values)
    count = times.size
    n_test = max(1, round(test * count)) if test else 0
    n_val = max(1, round(validation * count))
    if n_test + n_val >= count:
        parts = (
            f"training, validation ({n_val}) and test ({n_test})"
            if n_test
            else (f"training and validation ({n_val})")
        )
        raise ValueError(f"{count} start date(s) cannot be split into {parts} dates")
    starts = times[count - n_test - n_val], times[count - n_test] if n_test else None
    return _parts(ds, *starts)


def _by_dates(
    ds: xr.Dataset, val_start: Any, test_start: Any
) -> tuple[xr.Dataset, xr.Dataset, xr.Dataset]:
    """The parts before ``val_start``, up to ``test_start`` and from it, none empty."""
    times = ds["time"]
    val, test = (
        parse_date(value, like=times.values, what=name)
        for name, value in (("val_start", val_start), ("test_start", test_start))
    )
    if not val < test:
        raise ValueError(f"val_start ({val}) must come before test_start ({test})")
    parts = _parts(ds, val, test)
    for name, part in zip(SPLITS, parts, strict=True):
        if part.sizes["time"] == 0:
            raise ValueError(
                f"the {name} split is empty: times run {times.values.min()} .. "
                f"{times.values.max()}, boundaries {val} and {test}"
            )
    return parts


def _parts(ds: xr.Dataset, val: Any, test: Any) -> tuple[xr.Dataset, xr.Dataset, xr.Dataset]:
    """The dates before ``val``, from ``val`` before ``test``, and from ``test`` (None: none)."""
    times = ds["time"]
    if test is None:
        return ds.sel(time=times < val), ds.sel(time=times >= val), ds.isel(time=slice(0))
    return (
        ds.sel(time=times < val),
        ds.sel(time=(times >= val) & (times < test)),
        ds.sel(time=times >= test),
    )


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
        ValueError: See :func:`split_start_dates`; ``out`` is a file; an output is an input.
        FileExistsError: An output exists and ``overwrite`` is false.
    """
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {folder} is a file, expected a folder for {', '.join(SPLITS)}")
    outputs = {name: folder / f"{name}.nc" for name in SPLITS}
    _check_outputs(outputs, [Path(path) for path in inputs], overwrite=overwrite)
    parts = split_start_dates(
        ds, validation=validation, test=test, val_start=val_start, test_start=test_start
    )
    created = not folder.exists()
    try:
        with contextlib.ExitStack() as stack:
            for name, part in zip(SPLITS, parts, strict=True):
                tmp = stack.enter_context(atomic_path(outputs[name], suffix=".nc"))
                part.to_netcdf(tmp, encoding=netcdf_encoding(part))  # one start date per chunk
    except BaseException:  # a read that failed half-way: no folder left that was not there
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise
    return outputs
