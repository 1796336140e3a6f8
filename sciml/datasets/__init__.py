"""Dask-backed xarray data as torch datasets.

Samples, channels and their statistics, sampling and seeding, samples read a chunk at a
time with read-ahead for data larger than memory (:mod:`sciml.datasets.chunked`), store
checks, the CF conventions of inputs (units and calendars: :mod:`sciml.datasets.cf`), and
the bundled samples by name.
"""

from typing import TYPE_CHECKING

from sciml.lazy_package import make_lazy

if TYPE_CHECKING:
    from sciml.datasets.samples import SAMPLES, sample_path

#: The module of each public name (imported on first use).
_HOMES = {
    "SAMPLES": "samples",
    "sample_path": "samples",
}

__all__ = [
    "SAMPLES",
    "sample_path",
]

make_lazy(__name__, _HOMES)
