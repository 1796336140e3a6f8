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

A store changed on purpose after it was written (values or variables written with
zarr or xarray) no longer matches its manifest either. Where files of the store were
modified after its manifest, the error says so, lists them by array and chunk, and
names both ways on: :func:`register_store` (``sciml cosmoflow register STORE``, or
``sciml unet3d register``) records the store as it now is, and a store that was not
changed on purpose is damaged and is copied again.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
import traceback
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciml.io_utils import atomic_write_text

__all__ = [
    "MANIFEST",
    "StoreError",
    "StoreInventory",
    "check_blosc_chunks",
    "check_store",
    "decode_failure",
    "is_zarr_store",
    "register_store",
    "write_manifest",
]

#: The inventory file at the root of a store (Zarr ignores it).
MANIFEST = "sciml-manifest.json"
#: Files named in an error before the rest are counted.
_SHOWN = 8
#: Bytes of a Blosc frame's header (its compressed size in bytes 12 to 16).
_BLOSC_HEADER = 16
#: Packages whose frames in a traceback mean that a stored chunk could not be decoded.
_CODECS = ("numcodecs", os.path.join("zarr", "codecs"))
#: Files at the root of a Zarr store (format 2, its consolidated metadata, format 3).
_ZARR_ROOTS = (".zgroup", ".zattrs", ".zarray", ".zmetadata", "zarr.json")


def is_zarr_store(path: Path | str) -> bool:
    """Whether ``path`` is a folder with a Zarr store's root metadata (format 2 or 3)."""
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, n)) for n in _ZARR_ROOTS)


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
    blosc: bool = False  # a Blosc frame alone: its header gives its size


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
        blosc = (
            len(array.compressors) == 1
            and type(array.compressors[0]).__name__ in ("Blosc", "BloscCodec")
            and not array.filters
            and array.shards is None
        )
        dtype = np.dtype(str(array.dtype)) if plain else None
        size = None
        if dtype is not None and dtype.kind in "biufc":
            size = math.prod(grid) * dtype.itemsize
        counts = [math.ceil(n / c) for n, c in zip(array.shape, grid, strict=True)]
        where, encode = array.path, array.metadata.encode_chunk_key
        for index in itertools.product(*map(range, counts)):
            chunks[f"{where}/{encode(index)}"] = _Chunk(str(name), index, size, blosc)
    return chunks


def _blosc_size(path: Path) -> int | None:
    """The size a Blosc frame's header gives (its bytes 12 to 16), ``None`` without one."""
    with open(path, "rb") as handle:
        header = handle.read(_BLOSC_HEADER)
    if len(header) < _BLOSC_HEADER:
        return None
    return int.from_bytes(header[12:16], "little")


def _check_frames(inventory: StoreInventory, sizes: dict[str, int], keys: list[str]) -> None:
    """Refuse a Blosc chunk of ``keys`` (those there) whose file is not its whole frame."""
    for key in keys:
        if key not in sizes:
            continue
        frame = _blosc_size(inventory.store / key)
        if frame != sizes[key]:
            told = "no Blosc header" if frame is None else f"a Blosc frame of {frame} bytes"
            raise StoreError(
                f"{inventory.where(key)} has {sizes[key]} bytes and {told}: it was cut short "
                "or damaged (Blosc would decode it from beyond its end); copy the store again"
            )


def check_blosc_chunks(store: Path | str) -> None:
    """Refuse a Blosc-compressed chunk of a Zarr store whose frame is not whole.

    Blosc does not check that a frame is whole: a chunk cut short (an interrupted copy)
    decodes bytes from beyond its buffer, an error or plausible values from one read to
    the next. Each chunk of an array compressed by Blosc alone starts with a header
    that gives the frame's size: 16 bytes a chunk compare it with the file's, before any
    value is read. Chunks that are not there are left to the reader (its fill value).

    Raises:
        StoreError: Naming the store, the array and the chunk.
    """
    store = Path(store)
    sizes = {key: entry.stat().st_size for key, entry in _files(str(store))}
    needed = _chunks(store)
    inventory = StoreInventory(store, {}, {k: (c.array, c.index) for k, c in needed.items()}, None)
    _check_frames(inventory, sizes, [key for key, chunk in needed.items() if chunk.blosc])


@dataclass(frozen=True)
class StoreInventory:
    """A checked store: its manifest's sizes and checksums, and where each chunk key belongs.

    Attributes:
        store: The store's path.
        files: ``key -> (size, crc32)`` from the manifest (empty: no manifest).
        chunks: ``key -> (array, chunk index)`` of every chunk the arrays need.
        written: When the manifest was written (its modification time; ``None``: no
            manifest).
    """

    store: Path
    files: dict[str, tuple[int, int]]
    chunks: dict[str, tuple[str, tuple[int, ...]]]
    written: float | None = None

    def where(self, key: str) -> str:
        """``key`` in the user's terms: the store, the array and the chunk index."""
        return f"{self.store}: {self._part(key)}"

    def _part(self, key: str) -> str:
        if key in self.chunks:
            array, index = self.chunks[key]
            return f"array {array!r}, chunk {index} (file {key})"
        return f"file {key}"

    def mismatch(self, key: str, found: str) -> StoreError:
        """The error for ``key``, which differs from the manifest (``found``: how).

        Files modified after the manifest was written mean the store was changed after it
        was written: they are listed, with how to register the change; otherwise the
        store is damaged (an interrupted or faulty copy).
        """
        recorded = f"{self.where(key)} {found}"
        changed = self.changed_files()
        if not changed:
            return StoreError(f"{recorded}; the store is damaged: copy the store again")
        shown = "; ".join(self._part(k) for k in changed[:_SHOWN])
        more = f" and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else ""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.written))
        return StoreError(
            f"{recorded}: {self.store} was changed after it was written ({len(changed)} "
            f"file(s) modified since its manifest {MANIFEST} of {when}: {shown}{more}); if "
            "you changed it on purpose (wrote to it with zarr or xarray), register it as it "
            f"now is: sciml cosmoflow register {self.store} (or "
            "sciml.datasets.store.register_store); if not, the store is damaged: copy the "
            "store again"
        )

    def changed_files(self) -> list[str]:
        """Keys of the files modified after the manifest was written (a listing, no reads)."""
        if self.written is None:
            return []
        found = [
            (key, entry.stat().st_mtime)
            for key, entry in _files(str(self.store))
            if entry.stat().st_mtime > self.written
        ]
        return [key for key, _ in sorted(found, key=lambda item: (item[1], item[0]))]

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
            raise self.mismatch(
                key,
                f"differs from the store's manifest: {len(view)} bytes with CRC-32 "
                f"{zlib.crc32(view):08x}, the manifest recorded {size} bytes with {crc:08x}",
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
    inventory, sizes, frames = _checked_chunks(store, files)
    for key, (size, _) in files.items():
        if sizes.get(key) != size:
            found = "is missing" if key not in sizes else f"has {sizes[key]} bytes"
            raise inventory.mismatch(key, f"{found}, the store's manifest recorded {size} bytes")
    _check_frames(inventory, sizes, frames)  # after the manifest, which tells edits apart
    return inventory


def _checked_chunks(
    store: Path, files: dict[str, tuple[int, int]]
) -> tuple[StoreInventory, dict[str, int], list[str]]:
    """The inventory of ``store``, its files' sizes and its Blosc chunks' keys, checked.

    Raises:
        StoreError: A chunk an array needs that is missing, or an uncompressed one of
            another size.
    """
    written = (store / MANIFEST).stat().st_mtime if files else None
    sizes = {key: entry.stat().st_size for key, entry in _files(str(store))}
    needed = _chunks(store)
    chunks = {k: (c.array, c.index) for k, c in needed.items()}
    inventory = StoreInventory(store, files, chunks, written)
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
    return inventory, sizes, [key for key, chunk in needed.items() if chunk.blosc]


def register_store(store: Path | str) -> tuple[Path, list[str]]:
    """Record a Zarr store as it now is: rewrite its manifest after a change made on purpose.

    For a store written by sciml and then changed with zarr or xarray (values rewritten,
    variables added), which :func:`check_store` refuses as changed after it was written.
    The store's arrays are checked first: every chunk they need is there, with its size.

    Args:
        store: The Zarr store.

    Returns:
        The manifest's path and the keys of the files that differ from the old manifest
        (added, removed or changed; every file when there was none).

    Raises:
        StoreError: No Zarr store there, a store whose metadata cannot be read, or a chunk
            that is missing or has another size than its array says (damage, not edits).
    """
    store = Path(store)
    if not store.is_dir():
        found = "not found" if not store.exists() else "not a Zarr store (a folder)"
        raise StoreError(f"{store}: {found}; only a Zarr store has a manifest to register")
    old = _manifest(store)
    inventory, sizes, frames = _checked_chunks(store, {})  # the old manifest is replaced
    _check_frames(inventory, sizes, frames)
    path = write_manifest(store)
    new = _manifest(store)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    return path, changed


def decode_failure(err: BaseException, paths: Iterable[str]) -> StoreError | None:
    """A codec's failure to decode a stored chunk, as an error naming the Zarr stores read.

    A truncated or damaged chunk of a compressed array fails where the codec decodes it,
    when a value is computed (``RuntimeError: error during blosc decompression: -1``), in
    words that name neither the store nor the array; a store with a manifest is checked
    before (:class:`StoreInventory`), one that other tools wrote is not.

    Args:
        err: The error raised.
        paths: The inputs of the command (arguments that name no Zarr store are ignored).

    Returns:
        A :class:`StoreError` naming the Zarr stores among ``paths`` and ``err``, or
        ``None`` when ``err`` was not raised by a codec.
    """
    frames = traceback.extract_tb(err.__traceback__)
    if not any(
        f"{os.sep}{codec}{os.sep}" in frame.filename for frame in frames for codec in _CODECS
    ):
        return None
    stores = [path for path in dict.fromkeys(paths) if is_zarr_store(path)]
    which = f"the Zarr store {', '.join(stores)}" if stores else "a Zarr store"
    return StoreError(
        f"a chunk of {which} could not be decoded ({type(err).__name__}: {err}): the store "
        "is truncated or damaged; copy it again from its source"
    )
