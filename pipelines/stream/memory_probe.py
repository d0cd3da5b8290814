"""A look at the stream process's memory every few seconds, for finding what grows with uptime
(bench/maintenance.py ``--only rss`` turns it on): off unless the environment sets
``BINLAKE_MEMORY_PROBE_SECONDS``; then one INFO line per period on the ``binlake.memory``
logger, a JSON record: the process's RSS, pyarrow's allocated bytes and its pool's backend,
glibc malloc's bytes in use and held free (``mallinfo2``), the versions of the Delta handles
the stream holds, the Python object counts by type that grew most since the first look, and
with ``BINLAKE_MEMORY_PROBE_FRAMES`` set (tracemalloc's frames, it slows Python down) the
source lines whose allocations grew most since the first look.

Invariants:
- Without the environment variable the probe does nothing (no tracemalloc, no timers), and
  with it the stream's behaviour is unchanged: it only reads (tests/test_memory_probe.py).
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Mapping

import pyarrow as pa

logger = logging.getLogger("binlake.memory")

ENV_SECONDS = "BINLAKE_MEMORY_PROBE_SECONDS"
ENV_FRAMES = "BINLAKE_MEMORY_PROBE_FRAMES"
TOP = 12  # types and lines reported per look


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _mallinfo() -> dict[str, float] | None:
    """glibc malloc's bytes in use (``uordblks`` + mmapped ``hblkhd``) and held free (``fordblks``), MiB."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    m = fn()
    return {"in_use_mib": (m.uordblks + m.hblkhd) / 2**20, "free_held_mib": m.fordblks / 2**20,
            "arena_mib": m.arena / 2**20}


def rss_mib() -> float | None:
    """This process's resident set (Linux ``/proc/self/statm``), MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def _type_counts() -> Counter:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


class MemoryProbe:
    """Logs the process's memory every ``every`` seconds (see the module docstring); ``handles``
    gives the Delta handles the stream holds, by name."""

    def __init__(self, every: float, frames: int, handles: Callable[[], Mapping[str, object]]):
        self.every, self.frames, self.handles = every, frames, handles
        self.started = time.monotonic()
        self.next = self.started + every
        self.first_types: Counter | None = None
        self.first_trace: tracemalloc.Snapshot | None = None
        if frames and not tracemalloc.is_tracing():
            tracemalloc.start(frames)

    @classmethod
    def from_env(cls, handles: Callable[[], Mapping[str, object]]) -> MemoryProbe | None:
        """The probe the environment asks for, or None."""
        every = os.environ.get(ENV_SECONDS)
        if not every:
            return None
        logger.setLevel(logging.INFO)  # the CLI logs warnings only unless verbose: the probe's lines pass
        return cls(float(every), int(os.environ.get(ENV_FRAMES) or 0), handles)

    def step(self) -> None:
        """Log a look when one is due."""
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + self.every
        logger.info("memory probe: %s", json.dumps(self.look(now - self.started)))

    def look(self, uptime: float) -> dict:
        """One look at the process's memory (see the module docstring)."""
        types = _type_counts()
        if self.first_types is None:
            self.first_types = types
        grown = Counter(types)
        grown.subtract(self.first_types)
        pool = pa.default_memory_pool()
        record = {"uptime_s": round(uptime), "rss_mib": rss_mib(),
                  "pyarrow_mib": pa.total_allocated_bytes() / 2**20, "pyarrow_pool": pool.backend_name,
                  "pyarrow_pool_max_mib": pool.max_memory() / 2**20, "malloc": _mallinfo(),
                  "python_objects": sum(types.values()),
                  "types_grown": dict(grown.most_common(TOP)),
                  "handles": {name: dt.version() for name, dt in self.handles().items()}}
        if tracemalloc.is_tracing():
            snap = tracemalloc.take_snapshot()
            record["traced_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
            if self.first_trace is None:
                self.first_trace = snap
            record["lines_grown"] = [
                {"at": str(d.traceback), "kib": round(d.size_diff / 1024), "count": d.count_diff}
                for d in snap.compare_to(self.first_trace, "lineno")[:TOP]]
        return record
