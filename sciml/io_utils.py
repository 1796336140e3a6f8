"""Atomic file writes (outputs appear whole or not at all), write errors named, Markdown tables.

Reading: :func:`small_chunk_cache` opens netCDF files with a small HDF5 chunk cache.

Every writer of the package writes through :func:`atomic_path` (files) or
:func:`atomic_folder` (Zarr stores): a temporary name beside the output, renamed onto it
once whole, removed on failure, so an old output stays whole. A write that fails for its
file system (no space left, a quota, a read-only file system, no permission) raises
:class:`WriteError` naming the file being written, the reason and the space left on its
file system, instead of the writer's own message (netCDF's ``HDF error``, torch's
``unexpected pos``); :func:`write_errors` does the same for a file appended to in place.
"""

from __future__ import annotations

import contextlib
import errno
import numbers
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

#: Why a write fails, by ``errno``, for the file-system errors translated to :class:`WriteError`.
WRITE_ERRNOS = {
    errno.ENOSPC: "no space left on its file system",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "its file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}
#: Free bytes under which a writer's failure without an ``errno`` is taken for a full disk.
FULL_BELOW = 2**20


class WriteError(OSError):
    """A file could not be written for its file system (see :data:`WRITE_ERRNOS`), named.

    Its ``errno`` and ``filename`` are the failure's and the file's; its message names the
    file, the reason and the space left on the file system.
    """

    def __init__(self, code: int, path: Path | str, usage: str) -> None:
        """The failure ``code`` writing ``path``; ``usage``: its file system's space."""
        super().__init__(code, WRITE_ERRNOS[code], str(path))
        self.code, self.usage = code, usage
        if code in (errno.ENOSPC, errno.EDQUOT):
            advice = "free space there, or write elsewhere"
        elif code == errno.EROFS:
            advice = "write elsewhere, or remount it writable"
        else:
            advice = f"write elsewhere, or get write permission to {Path(path).parent}"
        self.message = f"cannot write {path}: {WRITE_ERRNOS[code]} ({usage}); {advice}"

    def __reduce__(self) -> tuple[type[WriteError], tuple[int, str, str]]:
        """Pickle by the arguments it was made of (it crosses processes whole)."""
        return type(self), (self.code, str(self.filename), self.usage)

    def __str__(self) -> str:
        """The message (without ``[Errno N]``)."""
        return self.message


def _existing(path: Path) -> Path:
    """``path``'s nearest existing folder (itself when it is one)."""
    path = path.absolute()
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _mount(folder: Path) -> Path:
    while not os.path.ismount(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def file_system_usage(path: Path | str) -> str:
    """The space left on the file system of ``path``, e.g. ``"0 B free of 200.0 KiB on /mnt"``."""
    folder = _existing(Path(path))
    usage = shutil.disk_usage(folder)
    return f"{_size(usage.free)} free of {_size(usage.total)} on {_mount(folder)}"


def _file_system_state(path: Path) -> int | None:
    """The ``errno`` that the state of ``path``'s file system explains, if any."""
    folder = _existing(path.parent)
    stats = os.statvfs(folder)
    if stats.f_flag & os.ST_RDONLY:
        return errno.EROFS
    free = (stats.f_bfree if os.geteuid() == 0 else stats.f_bavail) * stats.f_frsize
    if free < FULL_BELOW:
        return errno.ENOSPC
    if not os.access(folder, os.W_OK):
        return errno.EACCES
    return None


def write_failure(path: Path | str, err: BaseException) -> WriteError | None:
    """The :class:`WriteError` for ``err`` raised while writing ``path``; ``None``: not one.

    An ``OSError`` of :data:`WRITE_ERRNOS` is one, unless it names a file outside the
    folder of ``path`` (an input the block read). A writer's own error without an
    ``errno`` (netCDF/HDF5 and torch raise ``RuntimeError``) is one when the file
    system explains it: read-only, less than :data:`FULL_BELOW` bytes free, or a folder
    this process may not write to. Call it before the partial output is removed, so that
    the space it took still shows.
    """
    path = Path(path)
    if isinstance(err, WriteError) or not _beside(path, err):
        return None
    code = err.errno if isinstance(err, OSError) else None
    if code not in WRITE_ERRNOS:
        if not isinstance(err, OSError | RuntimeError):
            return None
        code = _file_system_state(path)
        if code is None:
            return None
    return WriteError(code, path, file_system_usage(path))


def _beside(path: Path, err: BaseException) -> bool:
    """Whether ``err`` may be the write's: it names no file, or one in ``path``'s folder.

    (An input the block reads that may not be read is not a failure to write ``path``.)
    """
    names = [getattr(err, "filename", None), getattr(err, "filename2", None)]
    folder = path.parent.absolute()
    return all(
        Path(os.fsdecode(name)).absolute().is_relative_to(folder)
        for name in names
        if isinstance(name, str | bytes)
    )


@contextlib.contextmanager
def write_errors(path: Path | str) -> Iterator[None]:
    """Raise a :class:`WriteError` naming ``path`` for a file-system failure in the block.

    For a file written in place (an appended log); :func:`atomic_path` and
    :func:`atomic_folder` do this themselves.
    """
    try:
        yield
    except (OSError, RuntimeError) as err:
        failure = write_failure(path, err)
        if failure is None:
            raise
        raise failure from err


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: Path | str, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    The temporary file lives in the same folder (so the rename is atomic on
    POSIX) and is removed if the block raises. ``suffix`` keeps an extension
    that a writer needs to pick its format (e.g. ``".tif"``).

    Raises:
        WriteError: The file system failed the write (:func:`write_failure`): no space
            left, read-only, no permission; naming ``path`` and the space left.

    Example:
        >>> with atomic_path("out.nc", suffix=".nc") as tmp:  # doctest: +SKIP
        ...     dataset.to_netcdf(tmp)
    """
    path = Path(path)
    with write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=suffix, dir=path.parent)
        os.close(fd)
    tmp = Path(name)
    try:
        with write_errors(path):  # before the temporary goes: the space it took shows
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
            yield tmp
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_folder(path: Path | str) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; rename it to ``path`` on success.

    The folder counterpart of :func:`atomic_path`, for outputs that are folders (Zarr
    stores): removed with its contents if the block raises.

    Raises:
        FileExistsError: ``path`` exists (a folder is not replaced).
        WriteError: As :func:`atomic_path`.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; remove it or choose another output path")
    with write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        with write_errors(path):
            yield partial
            os.rename(partial, path)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` atomically and return the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def save_figure(fig: Any, path: Path | str, **savefig_kwargs: Any) -> Path:
    """Save a matplotlib figure to ``path`` atomically (format from the extension).

    An interrupted run leaves either the previous file or none, never a
    truncated image under the final name.
    """
    path = Path(path)
    kwargs = {"format": path.suffix.lstrip(".") or None, **savefig_kwargs}
    with atomic_path(path, suffix=path.suffix) as tmp:
        fig.savefig(tmp, **kwargs)
    return path


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and return the path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, floats: str = ".3f"
) -> str:
    """A Markdown table; real non-integer cells are formatted with ``floats``, others with ``str``.

    Args:
        header: The column names.
        rows: The rows, each with one cell per column.
        floats: Format spec of float cells (pass strings for other formats).

    Raises:
        ValueError: A row whose number of cells differs from the header's.
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells for {len(header)} columns: {row}")
        cells = [format(c, floats) if _is_float(c) else str(c) for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _is_float(cell: object) -> bool:
    return isinstance(cell, numbers.Real) and not isinstance(cell, numbers.Integral)


#: The HDF5 chunk cache of each variable of a netCDF file sciml opens (the library's
#: default is 64 MiB): a pass reads each chunk once, so the cache only holds memory, which
#: grew with the chunks read (up to 64 MiB a variable) by one-date chunks.
CHUNK_CACHE_BYTES = 2**22


@contextlib.contextmanager
def small_chunk_cache() -> Iterator[None]:
    """Open netCDF files with :data:`CHUNK_CACHE_BYTES` of chunk cache per variable.

    The netCDF library's default is set while the block runs (files take it when they are
    opened) and restored after it, so other files the process opens keep theirs.
    """
    try:
        import netCDF4
    except ImportError:  # another engine reads netCDF here
        yield
        return
    before = netCDF4.get_chunk_cache()
    netCDF4.set_chunk_cache(CHUNK_CACHE_BYTES, before[1], before[2])
    try:
        yield
    finally:
        netCDF4.set_chunk_cache(*before)
