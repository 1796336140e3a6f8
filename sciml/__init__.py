"""sciml: scientific machine learning on one spine.

Three workflows share the spine (``distributed``, ``training``, ``datasets``,
``models``): spatially parallel 3D CNNs (:mod:`sciml.spatial_parallel`),
ensemble weather post-processing (:mod:`sciml.weather`) and OSM road masks for
tree segmentation (:mod:`sciml.geo`).
"""

from importlib.metadata import PackageNotFoundError, version

# xarray's cfgrib backend, imported by the first open_dataset without engine=, makes
# eckit's PROJ global (ecCodes' wheels); a pyproj loaded after it aborts at exit with
# "double free or corruption" (issue 40). pyproj is loaded here, before any geo module
# needs it, bound to its own libproj: see sciml._native, and the eckitlib pin in
# pyproject.toml for a pyproj that a script imports itself.
from sciml._native import load_pyproj

load_pyproj()

#: The distribution that installs the ``sciml`` package (the name ``sciml`` is taken on PyPI).
DISTRIBUTION = "sciml-workflows"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["DISTRIBUTION", "__version__"]
