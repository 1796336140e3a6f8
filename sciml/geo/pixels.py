"""How an image's pixel values become network inputs, recorded with a run and checked after.

A training run records the :class:`PixelScaling` of its image in its
``model.json``: the units of the pixel values, the divisor that brings them to
the network's range, the band count and names, and the no-data value. An
image given to the trained model later is read in the same units or refused,
naming both sides.

Units, from the storage type and the values of the pixels with data:

- an integer image is in the units of its type (``"uint8"``, ``"uint16"``...);
  8-bit values are divided by 255, other integers are used as they are;
- a float image whose values are all whole numbers in 0..255 (with some above
  1) holds 8-bit values: units ``"uint8"``, divided by 255, so that the same
  image stored as uint8 or as float gives the same network input, bit for bit;
- any other float image is in units ``"float"``, used as it is.

An image matches a scaling of integer units when it has that type, or is a
float image whose values are whole numbers in that type's range (the same
values, stored as floats); it matches ``"float"`` units when it is a float
image that does not hold 8-bit values. Bands named on both sides (band
descriptions or colour interpretation) are aligned by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["FLOAT_UNITS", "PixelScaling", "PixelScalingError", "band_names", "has_data"]

#: Units of float images that do not hold 8-bit values: used as they are.
FLOAT_UNITS = "float"

#: Divisor of 8-bit values: they reach the network in 0..1.
_BYTE_SCALE = 255.0


class PixelScalingError(ValueError):
    """An image's pixels are not in the units (or bands) a trained model expects."""


def has_data(values: np.ndarray, nodata: float | None) -> np.ndarray:
    """``(y, x)`` True where every band is finite and not all bands equal ``nodata``."""
    bands = values.reshape(-1, *values.shape[-2:])
    good = np.ones(bands.shape[1:], bool)
    if np.issubdtype(bands.dtype, np.floating):
        good &= np.isfinite(bands).all(axis=0)
    if nodata is not None and not np.isnan(nodata):
        good &= ~np.all(bands == nodata, axis=0)
    return good


def _as_bands(image: xr.DataArray | np.ndarray) -> np.ndarray:
    values = np.asarray(image)
    if values.ndim == 2:
        values = values[None]
    if values.ndim != 3:
        raise ValueError(f"image must be (band, y, x), got shape {values.shape}")
    return values


def band_names(image: xr.DataArray | np.ndarray) -> tuple[str, ...] | None:
    """The band names of a DataArray whose ``band`` labels are all strings; else ``None``."""
    if not isinstance(image, xr.DataArray) or "band" not in image.coords:
        return None
    labels = image["band"].values.tolist()
    labels = labels if isinstance(labels, list) else [labels]
    return tuple(labels) if all(isinstance(label, str) for label in labels) else None


def _whole_in(values: np.ndarray, low: float, high: float) -> bool:
    return bool(values.size) and bool(
        np.all(values == np.round(values)) and values.min() >= low and values.max() <= high
    )


def _units(values: np.ndarray, good: np.ndarray) -> str:
    if not np.issubdtype(values.dtype, np.floating):
        return values.dtype.name
    data = values[:, good]
    if _whole_in(data, 0, _BYTE_SCALE) and data.max() > 1:
        return "uint8"
    return FLOAT_UNITS


def _describe(values: np.ndarray, good: np.ndarray) -> str:
    data = values[:, good]
    if not data.size:
        return f"{values.dtype.name} pixels, none with data"
    example = ""
    if np.issubdtype(values.dtype, np.floating):
        fractional = data[data != np.round(data)]
        example = f" (not whole numbers: e.g. {fractional.flat[0]:.6g})" if fractional.size else ""
    return f"{values.dtype.name} values {data.min():.6g}..{data.max():.6g}{example}"


@dataclass(frozen=True)
class PixelScaling:
    """The pixel units a model was trained on, and how they reach the network.

    Attributes:
        units: ``"uint8"``, another integer type's name, or :data:`FLOAT_UNITS`.
        scale: Network input = pixel value / ``scale``.
        bands: Number of bands.
        band_names: The bands' names in order, or ``None`` when unnamed.
        nodata: The training image's no-data value (``None``: none, or NaN,
            which marks no-data pixels of every float image).
        value_range: The lowest and highest value of its pixels with data
            (``None``: none has data), for messages.
        origin: Where the record was read from, for messages (not compared).
    """

    units: str
    scale: float
    bands: int
    band_names: tuple[str, ...] | None = None
    nodata: float | None = None
    value_range: tuple[float, float] | None = None
    origin: str = field(default="the training image", compare=False)

    @classmethod
    def of(cls, image: xr.DataArray | np.ndarray, *, nodata: float | None = None) -> PixelScaling:
        """The scaling of a training image (``nodata``: default ``image.attrs["nodata"]``)."""
        values = _as_bands(image)
        if nodata is None and isinstance(image, xr.DataArray):
            nodata = image.attrs.get("nodata")
        good = has_data(values, nodata)
        units = _units(values, good)
        data = values[:, good]
        return cls(
            units=units,
            scale=_BYTE_SCALE if units == "uint8" else 1.0,
            bands=values.shape[0],
            band_names=band_names(image),
            nodata=None if nodata is None or np.isnan(nodata) else float(nodata),
            value_range=(float(data.min()), float(data.max())) if data.size else None,
        )

    def record(self) -> dict[str, Any]:
        """The scaling as JSON-ready data (what :meth:`from_record` reads back)."""
        return {
            "units": self.units,
            "scale": self.scale,
            "bands": self.bands,
            "band_names": None if self.band_names is None else list(self.band_names),
            "nodata": self.nodata,
            "value_range": None if self.value_range is None else list(self.value_range),
        }

    @classmethod
    def from_record(cls, record: Any, *, origin: str) -> PixelScaling:
        """Read :meth:`record`'s data back; ``origin`` (the file) names it in messages.

        Raises:
            PixelScalingError: The record lacks a field or has one of the wrong type.
        """
        try:
            names = record["band_names"]
            nodata = record["nodata"]
            low_high = record["value_range"]
            scaling = cls(
                units=str(record["units"]),
                scale=float(record["scale"]),
                bands=int(record["bands"]),
                band_names=None if names is None else tuple(str(n) for n in names),
                nodata=None if nodata is None else float(nodata),
                value_range=None if low_high is None else (float(low_high[0]), float(low_high[1])),
                origin=origin,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise PixelScalingError(
                f"{origin}: the pixel scaling record {record!r} is incomplete ({err!r}); "
                "expected units, scale, bands, band_names, nodata and value_range"
            ) from None
        if not (np.isfinite(scaling.scale) and scaling.scale > 0 and scaling.bands >= 1):
            raise PixelScalingError(f"{origin}: bad pixel scaling record {record!r}")
        return scaling

    def __str__(self) -> str:
        """The units, divisor, bands and no-data value, for messages."""
        names = f" ({', '.join(self.band_names)})" if self.band_names else ""
        scaled = "" if self.scale == 1 else f", divided by {self.scale:g}"
        units = "float values used as they are" if self.units == FLOAT_UNITS else self.units
        nodata = "" if self.nodata is None else f", nodata {self.nodata:g}"
        low_high = self.value_range
        values = "" if low_high is None else f" (values {low_high[0]:.6g}..{low_high[1]:.6g})"
        return f"{units}{values}{scaled}, {self.bands} band(s){names}{nodata}"

    def conform(
        self,
        image: xr.DataArray | np.ndarray,
        *,
        nodata: float | None = None,
        name: str = "the image",
    ) -> tuple[np.ndarray, float | None]:
        """An image's ``(band, y, x)`` values in this scaling's units and band order.

        Args:
            image: The image; a DataArray gives its band names and ``attrs["nodata"]``.
            nodata: The image's no-data value (default: ``image.attrs["nodata"]``).
            name: The image in messages (e.g. its file).

        Returns:
            The values (bands reordered by name where both sides name them) and
            the no-data value to apply: the image's own, else this scaling's.

        Raises:
            PixelScalingError: Other band count or names, or pixels in other units;
                the message names the image, the run's record and both sides.
        """
        values = _as_bands(image)
        values = values[self._band_order(image, values.shape[0], name)]
        if nodata is None and isinstance(image, xr.DataArray):
            nodata = image.attrs.get("nodata")
        nodata = self.nodata if nodata is None else float(nodata)
        good = has_data(values, nodata)
        if not self._matches(values, good):
            raise PixelScalingError(
                f"{name} holds {_describe(values, good)}, but the model was trained on "
                f"{self} ({self.origin}): an image in other units would give another "
                "prediction. Store it in the training image's units (e.g. uint8 "
                "round(reflectance * 255) for a model trained on 8-bit pixels), or train a "
                "model on images like it"
            )
        return values, nodata

    def normalise(self, values: np.ndarray) -> np.ndarray:
        """Network input: ``values / scale`` as float32."""
        out = values.astype(np.float32)
        if self.scale != 1:
            out /= np.float32(self.scale)
        return out

    def _matches(self, values: np.ndarray, good: np.ndarray) -> bool:
        if np.issubdtype(values.dtype, np.floating):
            if self.units == FLOAT_UNITS:
                return _units(values, good) == FLOAT_UNITS
            if not np.issubdtype(np.dtype(self.units), np.integer):
                return False
            info = np.iinfo(np.dtype(self.units))
            return _whole_in(values[:, good], info.min, info.max)
        return values.dtype.name == self.units

    def _band_order(self, image: Any, count: int, name: str) -> list[int]:
        names = band_names(image)
        if count != self.bands:
            raise PixelScalingError(
                f"{name} has {count} band(s){'' if names is None else f' {list(names)}'}, "
                f"but the model was trained on {self} ({self.origin})"
            )
        if names is None or self.band_names is None:
            return list(range(count))
        if sorted(names) != sorted(self.band_names) or len(set(names)) != count:
            raise PixelScalingError(
                f"{name} has bands {list(names)}, but the model was trained on bands "
                f"{list(self.band_names)} ({self.origin}); give it an image with those bands"
            )
        return [names.index(band) for band in self.band_names]
