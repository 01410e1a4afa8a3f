"""Keep freed large blocks in the process instead of returning them to the kernel (glibc only).

The batched engine frees and reallocates the same 10–100 MB blocks (minibatches, gradients, uploads)
at every local step. glibc serves blocks above its mmap threshold (128 KB, adapting up to 32 MB) with
fresh ``mmap`` calls and trims the heap top above 2× that threshold, so each such block is handed
back to the kernel on ``free`` and page-faulted in again, 4 KB at a time, on the next step: on work
"LR-785" half the batched round was kernel time. Raising the mmap and trim thresholds lets the heap
reuse the freed blocks. The cost: the process's resident memory stays near its peak between rounds
instead of falling back (the peak itself is what benchmarks/memory_bench.py measures). PyTorch's CPU
performance guide recommends an alternative allocator for the same reason; on a platform without
glibc's ``mallopt`` this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["keep_large_blocks"]

#: mallopt(3) parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks up to this size come from the heap, and a heap top this large stays mapped
THRESHOLD_BYTES = 1 << 30


@functools.cache
def keep_large_blocks() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; whether the allocator took the setting."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): keep the platform's allocator as is
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, THRESHOLD_BYTES))
