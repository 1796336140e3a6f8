"""A Zarr store's chunk inventory: written with the store, checked when it is opened.

Zarr reads a chunk that is not there as the array's fill value, so an
interrupted copy of a store reads as zeros without a word, and a truncated
chunk of an uncompressed array ends in a reshape error that names neither
the store nor the chunk. The writers of sciml stores call
:func:`write_manifest` before the store gets its final name: every file's
size and CRC-32 go to ``STORE/sciml-manifest.json``. :func:`check_store`
(cheap: a listing of the store and its sizes) then finds, before any value is
read,

* a chunk that any array of the store needs and that is not there (with or
  without a manifest: for stores written by other tools, write them with
  every chunk, ``write_empty_chunks=True``);
* a file of the manifest that is missing or has another size;
* a chunk of an uncompressed array whose size is not its voxels' bytes;

and :class:`StoreInventory.verify` checks each chunk's CRC-32 as it is read.
Each is a :class:`StoreError` naming the store, the array and the chunk index.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciml.io_utils import atomic_write_text

__all__ = ["MANIFEST", "StoreError", "StoreInventory", "check_store", "write_manifest"]

#: The inventory file at the root of a store (Zarr ignores it).
MANIFEST = "sciml-manifest.json"


class StoreError(ValueError):
    """A store's chunks are not what its arrays or its manifest say."""


def _files(folder: str, prefix: str = "") -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every file under ``folder`` but the manifest, as ``(key, entry)``; keys use ``/``."""
    with os.scandir(folder) as entries:
        for entry in entries:
            key = prefix + entry.name
            if entry.is_dir():
                yield from _files(entry.path, key + "/")
            elif key != MANIFEST:
                yield key, entry


def write_manifest(store: Path | str) -> Path:
    """Record the size and CRC-32 of every file of the Zarr store ``store`` in its manifest.

    Returns:
        The manifest's path (written atomically).
    """
    store = Path(store)
    files = {}
    for key, entry in sorted(_files(str(store)), key=lambda item: item[0]):
        data = Path(entry.path).read_bytes()
        files[key] = [len(data), zlib.crc32(data)]
    path = store / MANIFEST
    atomic_write_text(path, json.dumps({"format": 1, "files": files}) + "\n")
    return path


@dataclass(frozen=True)
class _Chunk:
    """Where a store key belongs: its array and the chunk's (or shard's) index."""

    array: str
    index: tuple[int, ...]
    size: int | None  # bytes an uncompressed chunk holds; None where it cannot be told


def _chunks(store: Path) -> dict[str, _Chunk]:
    """Every chunk key that the arrays of ``store`` need (from their metadata)."""
    import zarr

    try:
        group = zarr.open_group(store, mode="r")
    except Exception as err:  # noqa: BLE001 - any failure to read the metadata, named
        raise StoreError(f"cannot read the Zarr metadata of {store}: {err}") from None
    chunks = {}
    for name, array in group.arrays():
        grid = array.shards or array.chunks
        plain = not array.compressors and not array.filters and array.shards is None
        dtype = np.dtype(str(array.dtype)) if plain else None
        size = None
        if dtype is not None and dtype.kind in "biufc":
            size = math.prod(grid) * dtype.itemsize
        counts = [math.ceil(n / c) for n, c in zip(array.shape, grid, strict=True)]
        where, encode = array.path, array.metadata.encode_chunk_key
        for index in itertools.product(*map(range, counts)):
            chunks[f"{where}/{encode(index)}"] = _Chunk(str(name), index, size)
    return chunks


@dataclass(frozen=True)
class StoreInventory:
    """A checked store: its manifest's sizes and checksums, and where each chunk key belongs.

    Attributes:
        store: The store's path.
        files: ``key -> (size, crc32)`` from the manifest (empty: no manifest).
        chunks: ``key -> (array, chunk index)`` of every chunk the arrays need.
    """

    store: Path
    files: dict[str, tuple[int, int]]
    chunks: dict[str, tuple[str, tuple[int, ...]]]

    def where(self, key: str) -> str:
        """``key`` in the user's terms: the store, the array and the chunk index."""
        if key in self.chunks:
            array, index = self.chunks[key]
            return f"{self.store}: array {array!r}, chunk {index} (file {key})"
        return f"{self.store}: file {key}"

    def verify(self, key: str, data: Any) -> None:
        """Check a chunk read whole against the manifest.

        Args:
            key: The store key.
            data: Its bytes (any object with the buffer protocol).

        Raises:
            StoreError: If its size or CRC-32 differs from the manifest's.
        """
        if key not in self.files:
            return
        size, crc = self.files[key]
        view = memoryview(data).cast("B")
        if len(view) != size or zlib.crc32(view) != crc:
            raise StoreError(
                f"{self.where(key)} is damaged: {len(view)} bytes with CRC-32 "
                f"{zlib.crc32(view):08x}, the store's manifest recorded {size} bytes with "
                f"{crc:08x}; copy the store again"
            )


def _manifest(store: Path) -> dict[str, tuple[int, int]]:
    path = store / MANIFEST
    if not path.exists():
        return {}
    try:
        files = json.loads(path.read_text())["files"]
        return {str(k): (int(v[0]), int(v[1])) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise StoreError(f"cannot read the manifest {path}: {err}") from None


def check_store(store: Path | str) -> StoreInventory:
    """Check that every chunk of the Zarr store ``store`` is there, with its size (module doc).

    Raises:
        StoreError: Naming the store, the array and the chunk index of the first
            chunk that is missing or has another size, or a manifest that cannot be read.
    """
    store = Path(store)
    files = _manifest(store)
    sizes = {key: entry.stat().st_size for key, entry in _files(str(store))}
    needed = _chunks(store)
    inventory = StoreInventory(store, files, {k: (c.array, c.index) for k, c in needed.items()})
    hint = (
        "copy the store again (an interrupted copy?), or, for a store written without "
        "its empty chunks, write it again with write_empty_chunks=True"
    )
    for key, chunk in needed.items():
        if key not in sizes:
            raise StoreError(f"{inventory.where(key)} is missing; {hint}")
        if chunk.size is not None and sizes[key] != chunk.size:
            raise StoreError(
                f"{inventory.where(key)} has {sizes[key]} bytes, its uncompressed chunk holds "
                f"{chunk.size}; copy the store again"
            )
    for key, (size, _) in files.items():
        if sizes.get(key) != size:
            found = "is missing" if key not in sizes else f"has {sizes[key]} bytes"
            raise StoreError(
                f"{inventory.where(key)} {found}, the store's manifest recorded {size} bytes; "
                "copy the store again"
            )
    return inventory
