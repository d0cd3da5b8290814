"""How many heaps (arenas) glibc's malloc spreads a stream process's C heap over.

glibc gives each thread that allocates a heap of its own, up to eight per core (16 on two cores),
and each keeps its own free pages and fragments, which the stream's once-a-minute trim
(pipelines/stream/malloc_trim.py) gives back only in part: the stream's commit and maintenance
threads and Arrow's spread its C heap over thirteen, and those grew with uptime. So the stream's
process limits them to ``ARENAS`` (glibc's ``M_ARENA_MAX``, what ``MALLOC_ARENA_MAX`` sets):
``binlake stream`` as its command starts, before pyarrow and delta-rs are imported (pyarrow's
import starts threads, and the arenas they make stay); the engine when it starts, for the processes
it runs in otherwise (``binlake run`` after its snapshot, whose parallel reads keep their heaps;
Dagster's run worker), where the limit bounds the arenas made from then on.

Measured (bench/maintenance.py --only rss, two hour-long runs side by side, the limit set by
``MALLOC_ARENA_MAX=2`` in one): its one thread arena grew 6.9 MiB from the 11th to the 56th minute
against 16.4 MiB in thirteen without it; the stream 451 → 507 MiB from 5 minutes to the hour
(1.12×) against 454 → 534 (1.18×). No CPU cost the benchmarks see: a batch over 500 tables (16
commit threads) and a catch-up of 500,000 inserts as fast with it as without (docs/maintenance.md).

Invariant (tests/test_memory_probe.py): threads that first allocate after :func:`limit_arenas`
make no more heaps than it allows. This module imports nothing that starts threads.
"""

from __future__ import annotations

import ctypes

M_ARENA_MAX = -8  # mallopt's parameter (glibc's malloc.h)
ARENAS = 2  # the main heap and one more: the value measured


def limit_arenas(n: int = ARENAS) -> bool:
    """Let the threads of this process (and of the processes it forks) that first allocate from now
    on share at most ``n`` glibc heaps in all, those made already counted; whether glibc took it
    (False without glibc)."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn(M_ARENA_MAX, n) == 1
