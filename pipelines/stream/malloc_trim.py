"""Giving freed memory back to the system while the stream runs. glibc's malloc keeps what a large
transient allocation freed (a batch read while catching up, its Python rows) in its heaps, where
it stays resident; ``malloc_trim(0)`` returns the free pages of every heap (arena) to the system.
pyarrow's pool (mimalloc) likewise keeps pages its buffers freed; ``release_unused`` returns them.
The stream calls :meth:`MallocTrim.step` between batches; it trims at most once per
``TRIM_SECONDS`` (a walk of the heaps: well under a millisecond with nothing to give back).
Without glibc (another libc, macOS) only pyarrow's pool is trimmed.

Measured (bench/maintenance.py --only rss, the stream's memory probe): glibc's main heap held
12 MiB free for 13 minutes, then 51 MiB, the stream's RSS 33 MiB higher from then on; with the
heap trimmed, pyarrow's mimalloc region held 118-132 MiB resident while pyarrow had ~0 bytes
allocated (its peak: 14 MiB).

The stream process allocates Arrow memory from the system allocator (:func:`use_system_pool`,
called before the reader process is forked), so one trim covers Arrow's freed pages too: with
mimalloc, pyarrow's default, the stream of the same benchmark started 70 MiB larger and its
region grew with uptime although Arrow held nothing between batches. ``set_memory_pool`` sets
the pool of pyarrow's Python calls only: Arrow's C++ code that takes its own default (the
Parquet writer's buffers) still allocates from mimalloc, which ``release_unused`` is not asked
to trim (doing so made no difference over 30 minutes of the benchmark).

glibc's malloc also keeps a heap per allocating thread: pipelines/arenas.py limits them.

Invariants (tests/test_memory_probe.py): a trim gives freed C-heap memory back (the RSS falls);
trims come at most once per period; a stream engine's process allocates Arrow memory from the
system allocator.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import pyarrow as pa

TRIM_SECONDS = 60.0


def _libc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def use_system_pool() -> None:
    """Make the system allocator pyarrow's default pool in this process (and in the processes it
    forks from now on): the C heap that :meth:`MallocTrim.now` trims (see the module docstring)."""
    pa.set_memory_pool(pa.system_memory_pool())


class MallocTrim:
    """Trims the C heap at most every ``every`` seconds (see the module docstring)."""

    def __init__(self, every: float = TRIM_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.every, self.clock = every, clock
        self._trim = _libc_trim()
        self.trims = 0
        self._next = clock() + every

    def step(self) -> bool:
        """Trim when a period has passed since the last trim; whether it did."""
        if self.clock() < self._next:
            return False
        self._next = self.clock() + self.every
        self.now()
        return True

    def now(self) -> None:
        """Trim at once: free pages of every heap and of pyarrow's pool back to the system."""
        pa.default_memory_pool().release_unused()
        if self._trim is not None:
            self._trim(0)
        self.trims += 1
