"""sciml: scientific machine learning on one spine.

Three workflows share the spine (``distributed``, ``training``, ``datasets``,
``models``): spatially parallel 3D CNNs (:mod:`sciml.spatial_parallel`),
ensemble weather post-processing (:mod:`sciml.weather`) and OSM road masks for
tree segmentation (:mod:`sciml.geo`).
"""

import contextlib
from importlib.metadata import PackageNotFoundError, version

# The eccodes wheels (imported by xarray's cfgrib backend the first time any file
# is opened) bundle libraries that clash with pyproj's: with eccodes loaded first,
# a process that later imports pyproj (geopandas, rasterio, sciml.geo) aborts at
# exit with "double free or corruption". Loading pyproj first avoids it; without
# pyproj (a machine with torch and numpy alone) there is nothing to clash with.
with contextlib.suppress(ImportError):
    import pyproj  # noqa: F401

#: The distribution that installs the ``sciml`` package (the name ``sciml`` is taken on PyPI).
DISTRIBUTION = "sciml-workflows"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["DISTRIBUTION", "__version__"]
