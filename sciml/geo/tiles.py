"""Image + mask + label tiles for training, and stitched whole-scene inference.

No-data pixels (a NaN in any band, or every band equal to the image's
``nodata`` value) are bad pixels: they are set to 0 in the image and taken
out of the mask, so they never count in a loss or a metric, and
:func:`predict_scene` returns NaN on them. A NaN never reaches the network,
so it cannot spread to the pixels around it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import xarray as xr
from torch.utils.data import Dataset

from sciml.geo.grid import RasterGrid, grid_of
from sciml.geo.pixels import PixelScaling, has_data
from sciml.geo.trees import IGNORE_INDEX


def tile_origins(size: int, tile: int, overlap: int) -> list[int]:
    """Start offsets of tiles of ``tile`` pixels with ``overlap`` covering ``size`` pixels.

    The last tile ends flush with the edge; a dimension shorter than ``tile``
    gets one tile at 0 (it is padded).
    """
    if tile <= 0 or not 0 <= overlap < tile:
        raise ValueError(f"need tile > 0 and 0 <= overlap < tile, got {tile}, {overlap}")
    if size <= tile:
        return [0]
    step = tile - overlap
    starts = list(range(0, size - tile, step))
    return [*starts, size - tile]


def _check_grids(image: Any, **others: Any) -> None:
    """Reject a mask or label DataArray on another grid than a georeferenced image."""
    grid = grid_of(image)
    for name, other in others.items():
        own = grid_of(other)
        if grid is not None and own is not None and own != grid:
            raise ValueError(
                f"the {name} is on another grid than the image ({own} vs {grid}); "
                "rasterise it on the image's grid"
            )


def _pad(array: np.ndarray, tile: int) -> np.ndarray:
    height, width = array.shape[-2:]
    pad = [(0, 0)] * (array.ndim - 2) + [(0, max(0, tile - height)), (0, max(0, tile - width))]
    return np.pad(array, pad) if any(p[1] for p in pad) else array


class SceneTiles(Dataset):
    """Overlapping tiles of an image with its mask and labels, as a torch dataset.

    Each item is a dict of float tensors ``image`` (C, t, t), ``mask`` (1, t, t),
    ``label`` (1, t, t) and ``valid`` (1, t, t: inside the mask and labelled),
    plus the tile's ``row`` and ``col``. No-data pixels leave the mask (see the
    module docstring); tiles without any mask pixel left are skipped. Pixel
    values reach the network as :class:`~sciml.geo.pixels.PixelScaling` says
    (8-bit values divided by 255). Georeferenced mask and labels must be on the
    image's grid; labels must be 0, 1 or ``ignore_index``.

    Args:
        image: ``(band, y, x)`` image.
        mask: ``(y, x)`` bool; where labels are complete (``None``: everywhere).
        labels: ``(y, x)`` uint8 labels (0/1, ``ignore_index`` = unknown);
            ``None`` for inference tiles.
        tile: Tile side in pixels.
        overlap: Overlap of neighbouring tiles in pixels.
        nodata: Image value meaning "no data" (default: ``image.attrs["nodata"]``).
        ignore_index: Label value of unknown pixels.
        augment: Also serve each tile in its 8 dihedral orientations (rotations
            by 90 degrees, with and without a flip): 8 times the items.
        scaling: The pixel scaling a trained model expects: the image must
            match it (bands aligned by name, nodata from it when the image has
            none). ``None``: the image's own (:meth:`PixelScaling.of`), kept
            in ``self.scaling`` for the run's record.

    Raises:
        sciml.geo.pixels.PixelScalingError: The image does not match ``scaling``.
    """

    def __init__(
        self,
        image: xr.DataArray | np.ndarray,
        mask: xr.DataArray | np.ndarray | None = None,
        labels: xr.DataArray | np.ndarray | None = None,
        *,
        tile: int = 256,
        overlap: int = 32,
        nodata: float | None = None,
        ignore_index: int = IGNORE_INDEX,
        augment: bool = False,
        scaling: PixelScaling | None = None,
    ) -> None:
        """Check the arrays and list the tiles that hold mask pixels (arguments: see the class)."""
        _check_grids(image, mask=mask, labels=labels)
        self.scaling = PixelScaling.of(image, nodata=nodata) if scaling is None else scaling
        raw, nodata = self.scaling.conform(image, nodata=nodata)
        self.image = self.scaling.normalise(raw)
        shape = self.image.shape[1:]
        self.has_data = has_data(raw, nodata)
        self.image[:, ~self.has_data] = 0.0
        mask = np.ones(shape, bool) if mask is None else np.asarray(mask)
        self.labels = None if labels is None else np.asarray(labels)
        for name, array in (("mask", mask), ("labels", self.labels)):
            if array is not None and array.shape != shape:
                raise ValueError(f"{name} shape {array.shape} differs from the image's {shape}")
        _check_values(mask, self.labels, ignore_index)
        self.mask = mask.astype(bool) & self.has_data
        self.tile, self.ignore_index, self.augment = tile, ignore_index, augment
        self.origins = [
            (row, col)
            for row in tile_origins(shape[0], tile, overlap)
            for col in tile_origins(shape[1], tile, overlap)
            if self.mask[row : row + tile, col : col + tile].any()
        ]
        if not self.origins:
            raise ValueError("no tile has both mask pixels and data; check the mask and nodata")

    def __len__(self) -> int:
        """Number of tiles, times 8 with ``augment``."""
        return len(self.origins) * (8 if self.augment else 1)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The tile ``index`` (in its orientation with ``augment``) as a dict of tensors."""
        if not 0 <= index < len(self):
            raise IndexError(f"tile index {index} out of range for {len(self)} tiles")
        orientation, index = divmod(index, len(self.origins))
        item = self._tile(index)
        if orientation:
            for key in ("image", "mask", "label", "valid"):
                if key in item:
                    turned = torch.rot90(item[key], orientation % 4, dims=(-2, -1))
                    item[key] = turned.flip(-1) if orientation >= 4 else turned
        return item

    def _tile(self, index: int) -> dict[str, Any]:
        row, col = self.origins[index]
        window = (slice(row, row + self.tile), slice(col, col + self.tile))
        image = _pad(self.image[(slice(None), *window)], self.tile)
        mask = _pad(self.mask[window], self.tile)[None]
        item: dict[str, Any] = {
            "image": torch.from_numpy(np.ascontiguousarray(image)),
            "mask": torch.from_numpy(mask.astype(np.float32)),
            "row": row,
            "col": col,
        }
        if self.labels is not None:
            labels = _pad(self.labels[window], self.tile)[None]
            known = labels != self.ignore_index
            item["label"] = torch.from_numpy(np.where(known, labels, 0).astype(np.float32))
            item["valid"] = torch.from_numpy((known & mask).astype(np.float32))
        return item


def _check_values(mask: np.ndarray, labels: np.ndarray | None, ignore_index: int) -> None:
    if ignore_index in (0, 1):
        raise ValueError(f"ignore_index must differ from the labels 0 and 1, got {ignore_index}")
    if mask.dtype != bool:
        bad = np.unique(mask[(mask != 0) & (mask != 1)])
        if bad.size:
            raise ValueError(f"the mask holds 0/1 or bool values only, found {bad[:5].tolist()}")
    if labels is not None:
        bad = np.unique(labels[~np.isin(labels, (0, 1, ignore_index))])
        if bad.size:
            raise ValueError(
                f"labels must be 0 (background), 1 (tree) or {ignore_index} (unknown), "
                f"found {bad[:5].tolist()}"
            )


def blend_weights(tile: int, overlap: int) -> np.ndarray:
    """``(tile, tile)`` weights ramping linearly over ``overlap`` pixels at each edge (> 0)."""
    ramp = np.minimum(np.arange(tile) + 1, np.arange(tile)[::-1] + 1).astype(np.float32)
    ramp = np.minimum(ramp / (overlap + 1), 1.0)
    return np.outer(ramp, ramp)


@torch.no_grad()
def predict_scene(
    model: torch.nn.Module,
    image: xr.DataArray | np.ndarray,
    mask: xr.DataArray | np.ndarray | None = None,
    *,
    tile: int = 256,
    overlap: int = 32,
    batch_size: int = 8,
    like: Any = None,
    scaling: PixelScaling | None = None,
) -> xr.DataArray:
    """Tree probability of the whole scene, tile by tile with blended overlaps.

    The model is called as ``model(image, mask)`` and returns logits; the
    probability is ``sigmoid(logits) * mask`` (0 off the mask, NaN on no-data
    pixels, see the module docstring).

    Args:
        model: A :class:`sciml.geo.model.MaskedUNet` or any module with that call.
        image: ``(band, y, x)`` image (a DataArray keeps its grid).
        mask: ``(y, x)`` mask (``None``: the whole image).
        tile: Tile side in pixels; it must suit the model (divisible by 2**depth).
        overlap: Overlap of neighbouring tiles in pixels (blended).
        batch_size: Tiles per forward pass.
        like: Grid of the output when ``image`` is a plain array (a
            georeferenced image must be on the same grid).
        scaling: The pixel scaling the model was trained on (the run's
            :func:`sciml.geo.training.run_pixel_scaling`); ``None``: the image's own.

    Returns:
        ``(y, x)`` float32 DataArray ``"tree_probability"`` on the image's grid.
    """
    grid = RasterGrid.from_like(like if like is not None else image)
    own = grid_of(image)
    if own is not None and own != grid:
        raise ValueError(f"like= is another grid ({grid}) than the image's ({own})")
    tiles = SceneTiles(image, mask, tile=tile, overlap=overlap, scaling=scaling)
    height, width = tiles.image.shape[1:]
    total = np.zeros((height, width), np.float32)
    weight = np.zeros((height, width), np.float32)
    weights = blend_weights(tile, overlap)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(tiles), batch_size):
            items = [tiles[i] for i in range(start, min(start + batch_size, len(tiles)))]
            batch_image = torch.stack([item["image"] for item in items]).to(device)
            batch_mask = torch.stack([item["mask"] for item in items]).to(device)
            probability = torch.sigmoid(model(batch_image, batch_mask)) * batch_mask
            for item, prob in zip(items, probability[:, 0].cpu().numpy(), strict=True):
                row, col = item["row"], item["col"]
                h, w = min(tile, height - row), min(tile, width - col)
                total[row : row + h, col : col + w] += prob[:h, :w] * weights[:h, :w]
                weight[row : row + h, col : col + w] += weights[:h, :w]
    finally:
        model.train(was_training)
    result = np.divide(total, weight, out=np.zeros_like(total), where=weight > 0)
    result[~tiles.has_data] = np.nan
    return grid.dataarray(result, name="tree_probability")
