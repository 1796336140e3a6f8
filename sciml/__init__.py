"""sciml: scientific machine learning on one spine.

Three workflows share the spine (``distributed``, ``training``, ``xrdata``,
``models``): spatially parallel 3D CNNs (:mod:`sciml.spatial_parallel`),
ensemble weather post-processing (:mod:`sciml.weather`) and OSM road masks for
tree segmentation (:mod:`sciml.geo`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sciml")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
