"""Atomic file writes (outputs appear whole or not at all) and Markdown tables."""

from __future__ import annotations

import contextlib
import numbers
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any


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

    Example:
        >>> with atomic_path("out.nc", suffix=".nc") as tmp:  # doctest: +SKIP
        ...     dataset.to_netcdf(tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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
