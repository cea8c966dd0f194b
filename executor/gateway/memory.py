"""Freed buffers go back to the system. The gateway passes files through in
parts of a few hundred KiB, from many threads (the pool that runs database
calls); glibc's malloc raises its mmap threshold each time such a buffer is
freed (up to 32 MiB), after which buffers come from per-thread arenas that
keep what was freed. Measured with three 64 MiB uploads in a row: without
this, the gateway's resident memory went 62 -> 70 -> 71 -> 73 MB and stayed;
with it, 62 -> 63 MB each time (peak 3 MB above). A fixed threshold keeps
every buffer from 128 KiB up in its own mapping, returned when it is freed;
two arenas keep the threads' small allocations from spreading over sixteen."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 * 1024


def return_freed_memory() -> bool:
    """Sets glibc's malloc up as above; False where there is no glibc (nothing changes)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    done = all(mallopt(option, value) == 1 for option, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD),
        (M_ARENA_MAX, 2)))
    if not done:
        log.info("malloc's thresholds could not be set: freed buffers may stay in the heap")
    return done
