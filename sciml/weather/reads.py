"""How a trainer reads its data: into memory up to a limit, else streamed; ``reads.json``.

:func:`read_path` says which path data of a given size take under ``--memory-limit``
(:data:`IN_MEMORY_BYTES` by default) and why, :func:`in_memory` reads them, and
:func:`record_reads` keeps the limit and the paths taken in each run folder's
``reads.json`` (a runtime record: a resumed run may change the limit).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from sciml.io_utils import atomic_write_text
from sciml.progress import phase

__all__ = ["IN_MEMORY_BYTES", "READS", "in_memory", "read_path", "record_reads"]

#: Data up to this size are read into memory before training by default (the trainers'
#: ``memory_limit``, ``--memory-limit``); larger data are streamed (:func:`read_path`).
IN_MEMORY_BYTES = 2**30
#: The run folder's record of the memory limit and of how the data were read (a runtime
#: record, written at every start of the run).
READS = "reads.json"
#: Says when data are read into memory (``INFO``, :mod:`sciml.progress`).
logger = logging.getLogger(__name__)


def read_path(ds: xr.Dataset, *, what: str, limit: int = IN_MEMORY_BYTES) -> tuple[bool, str]:
    """Whether a trainer streams ``ds`` (chunk by chunk) rather than reading it into memory.

    Args:
        ds: The data.
        what: How the line names them (e.g. ``"the training dates"``).
        limit: The memory limit in bytes (``--memory-limit``); 0: always stream.

    Returns:
        ``(stream, why)``: true to stream, and a line that says which path and why.
    """
    size = f"{ds.nbytes / 2**20:.4g} MiB"
    if all(not var.chunks for var in ds.variables.values()):
        return False, f"{what} ({size}) are in memory already"
    if limit == 0:
        return True, f"{what} ({size}) are streamed chunk by chunk (the memory limit is 0)"
    shown = f"the memory limit ({limit / 2**20:.4g} MiB, --memory-limit)"
    if ds.nbytes <= limit:
        return False, f"{what} ({size}) are read into memory: they fit {shown}"
    return True, f"{what} ({size}) are streamed chunk by chunk (they exceed {shown})"


def in_memory(ds: xr.Dataset, *, what: str, limit: int = IN_MEMORY_BYTES) -> xr.Dataset:
    """``ds`` read into memory when it holds at most ``limit`` bytes, else ``ds`` as it is.

    A training sample (one start date and lead time) is a sliver of a file's chunk (files
    written with the netCDF library's default chunks hold dozens of dates), and a lazy read
    of a random sample decompresses whole chunks. Larger data are streamed by the trainers
    (:class:`sciml.weather.streamed.StreamedEnsemble`: :func:`read_path`).

    Args:
        ds: The data (Dask-backed or not; the caller's object is left as it was).
        what: How the progress line names them (e.g. ``"the training dates"``).
        limit: The largest size read, in bytes.
    """
    if ds.nbytes > limit or all(not var.chunks for var in ds.variables.values()):
        return ds
    with phase(logger, f"reading {what} into memory ({ds.nbytes / 2**20:.0f} MiB)"):
        return ds.compute()


def record_reads(run_dirs: Sequence[Path], limit: int, paths: list[dict[str, str]]) -> None:
    """Keep the memory limit and the paths the data took in each run's ``reads.json``.

    A runtime record: a resumed run writes its own (the limit may change on a resume).
    """
    record = {"memory_limit": limit, "train": paths[0], "validation": paths[1]}
    for run_dir in run_dirs:
        atomic_write_text(run_dir / READS, json.dumps(record, indent=1) + "\n")
