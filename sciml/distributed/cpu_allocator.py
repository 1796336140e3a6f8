"""The C allocator's policy for tensors on the CPU (glibc ``mallopt``).

PyTorch's CPU tensors come from ``malloc``. By default glibc serves a large
block from a mapping of its own and returns it to the kernel when freed, and
trims the heap's free top: a training step then faults in every page of its
activations again, step after step. :func:`keep_freed_memory` keeps freed
memory in the process for the next step, as PyTorch's CUDA caching allocator
keeps device memory (and as PyTorch's CPU tuning guide recommends a caching
``malloc`` for). On this package's 2-core test machine it made Adam steps of
CosmoFlow 64^3 and a 3D U-Net 32^3 10-38% faster, and took the data-parallel
CosmoFlow step (one sample per rank, 64,000 page faults) from 287 to 177 ms:
``python benchmarks/cpu_allocator.py`` measures it.
:func:`mmap_large_allocations` does the opposite, so that the resident set
follows the live tensors (to measure a step's memory).

Both change the whole process and are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools

__all__ = ["keep_freed_memory", "mapped_bytes", "mmap_large_allocations"]

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
#: glibc's default count of blocks it may serve from mappings of their own.
_DEFAULT_MMAP_MAX = 65536


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks")
        + ("fsmblks", "uordblks", "fordblks", "keepcost")
    ]


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's glibc, or ``None`` (another C library, or not Linux)."""
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL("libc.so.6")
        if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):
            return libc
    return None


def keep_freed_memory() -> bool:
    """Keep memory that tensors free in this process, for the next ones to reuse.

    Every block comes from the heap (no mapping of its own) and the heap is
    never trimmed: once it has grown to a step's needs (a few steps), steps
    fault in next to no pages. It grows again only where a freed block lies a
    few bytes short of an aligned request. The resident set stays at the
    largest the process has used, as a GPU's memory does under PyTorch's
    caching allocator.

    Returns:
        Whether the policy is in force (``False`` where the C library is not glibc).
    """
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def mmap_large_allocations() -> bool:
    """Serve allocations over 64 KiB from mappings of their own, so freed tensors leave RSS.

    The free memory the heap already holds is returned too (``malloc_trim``),
    so that the resident set holds live memory only. Every later large
    allocation page-faults: time nothing under it.

    Returns:
        Whether the policy is in force (``False`` where the C library is not
        glibc: the resident set is then an upper bound of the live memory).
    """
    libc = _glibc()
    if libc is None:
        return False
    applied = all(
        libc.mallopt(param, value)
        for param, value in (
            (_M_MMAP_MAX, _DEFAULT_MMAP_MAX),
            (_M_MMAP_THRESHOLD, 65536),
            (_M_TRIM_THRESHOLD, 65536),
        )
    )
    libc.malloc_trim(0)
    return applied


def mapped_bytes() -> int | None:
    """Bytes glibc now serves from mappings of their own (``mallinfo2().hblkhd``).

    ``None`` where the C library is not glibc 2.33 or later.
    """
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().hblkhd)
