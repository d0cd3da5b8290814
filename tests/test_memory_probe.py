"""The stream's memory probe (pipelines/stream/memory_probe.py): off without its environment
variable; with it, a JSON record per period on the ``binlake.memory`` logger, only reading. The
C heap's trim (pipelines/stream/malloc_trim.py): freed memory goes back, once per period. The
snapshot's peak RSS, read from any thread, is the process's (pipelines/snapshot/task.py)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.lake.tables import ensure_table
from pipelines.stream import memory_probe
from pipelines.stream.malloc_trim import MallocTrim
from pipelines.stream.memory_probe import ENV_FRAMES, ENV_SECONDS, MemoryProbe

REPO = Path(__file__).resolve().parents[1]


def test_the_probe_is_off_without_its_environment_variable(monkeypatch):
    monkeypatch.delenv(ENV_SECONDS, raising=False)
    assert MemoryProbe.from_env(dict) is None


def test_the_probe_logs_the_memory_and_the_handles_versions_each_period(tmp_path, monkeypatch, caplog):
    dt = ensure_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    monkeypatch.setenv(ENV_SECONDS, "0.05")
    monkeypatch.setenv(ENV_FRAMES, "1")
    probe = MemoryProbe.from_env(lambda: {"d.t": dt})
    try:
        with caplog.at_level(logging.INFO, logger=memory_probe.logger.name):
            probe.step()  # not due yet
            assert not caplog.records
            for _ in range(2):
                time.sleep(0.06)
                probe.step()
        looks = [json.loads(r.getMessage().split(": ", 1)[1]) for r in caplog.records]
        assert len(looks) == 2
        last = looks[-1]
        assert last["rss_mib"] > 0 and last["pyarrow_mib"] >= 0 and last["handles"] == {"d.t": dt.version()}
        assert last["python_objects"] > 0 and isinstance(last["types_grown"], dict)
        assert "lines_grown" in last and last["traced_mib"] > 0
    finally:
        import tracemalloc

        tracemalloc.stop()


def test_a_trim_gives_freed_memory_back_once_per_period():
    now = [0.0]
    trim = MallocTrim(every=60.0, clock=lambda: now[0])
    if trim._trim is None:  # noqa: SLF001
        pytest.skip("not glibc")
    blocks = [bytearray(50_000) for _ in range(2_000)]  # 100 MB in the C heap (below mmap's threshold)
    pin = bytearray(50_000)  # after them: the heap's top cannot shrink by itself
    del blocks
    before = memory_probe.rss_mib()
    trim.now()
    assert memory_probe.rss_mib() < before - 50, "the freed 100 MB stayed resident"
    del pin
    # pyarrow's own pool (its default where no stream engine made the system allocator the
    # default, as one run earlier in this process would have): the trim releases its pages too.
    default = pa.default_memory_pool()
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    try:
        ids = pa.array(np.arange(131_072))
        arrays = [pc.add(ids, i) for i in range(100)]  # 100 MiB from pyarrow's pool
        del arrays, ids
        trim._trim(0)  # noqa: SLF001 - the C heap's part: what stays resident is pyarrow's
        before = memory_probe.rss_mib()
        trim.now()
        assert memory_probe.rss_mib() < before - 50, "pyarrow's freed 100 MiB stayed resident"
    finally:
        pa.set_memory_pool(default)
    now[0] = 30.0
    trim.step()
    assert trim.trims == 2  # within the period: no trim
    now[0] = 61.0
    trim.step()
    trim.step()
    assert trim.trims == 3


def test_a_stream_engine_allocates_arrow_memory_from_the_system_allocator(db, make_config):
    """The pool the trim covers (malloc_trim.py), in the engine's process and the reader it forks."""
    from pipelines.stream.engine import StreamEngine

    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    try:
        StreamEngine(make_config(db[0]))
        assert pa.default_memory_pool().backend_name == "system"
        ctx = multiprocessing.get_context("fork")  # as pipelines/stream/reader.py starts its reader
        with ctx.Pool(1) as pool:
            assert pool.apply(_pool_backend) == "system"
    finally:
        pa.set_memory_pool(before)


def _pool_backend() -> str:
    return pa.default_memory_pool().backend_name


# Run in a fresh interpreter: the heaps glibc reports (malloc_info's XML: one <heap> per arena),
# then six threads that each malloc while all are alive, then the heaps again.
_ARENAS_SCRIPT = """
import ctypes, os, re, sys, tempfile, threading
from pipelines.arenas import limit_arenas
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.fdopen.argtypes, libc.fdopen.restype = [ctypes.c_int, ctypes.c_char_p], ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fflush.argtypes = [ctypes.c_void_p]
def heaps():
    with tempfile.TemporaryFile("w+") as f:
        stream = libc.fdopen(os.dup(f.fileno()), b"w")
        libc.malloc_info(0, stream)
        libc.fflush(stream)
        f.seek(0)
        return len(re.findall(r'<heap nr="', f.read()))
before = heaps()
if sys.argv[1] == "limit":  # no heap beyond those there are
    assert limit_arenas(before)
barrier = threading.Barrier(7)
def work():
    libc.malloc(4096)
    barrier.wait()
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads:
    t.start()
barrier.wait()
print(before, heaps())
barrier.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_threads_started_after_limit_arenas_make_no_more_heaps_than_it_allows():
    """Six threads that allocate at once get a heap each (glibc makes up to nine before its limit of
    eight per core applies); after ``limit_arenas(n)`` with ``n`` heaps made already, they make none
    (pipelines/arenas.py)."""
    def heaps(mode: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", _ARENAS_SCRIPT, mode], capture_output=True, text=True,
                             check=True, cwd=REPO)
        before, after = map(int, out.stdout.split())
        return before, after

    before, after = heaps("none")
    assert before == 1 and after == 7  # pipelines.arenas starts no thread: the main heap alone
    before, after = heaps("limit")
    assert after == before


_PEAK_SCRIPT = """
import resource, threading
from pipelines.snapshot.task import peak_rss_mb
held = bytearray(300 * 1024 * 1024)  # zero-filled: every page touched
seen = []
def read():
    seen.append((peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
thread = threading.Thread(target=read)
thread.start()
thread.join()
print(*seen[0])
"""


def test_peak_rss_read_in_another_thread_is_the_processes():
    """A task thread's reading of the peak RSS counts memory another thread touched: the
    process's peak, as ``RUSAGE_SELF`` gives it (without walking every thread)."""
    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    peak, whole = map(float, out.stdout.split())
    assert peak >= 300 and abs(peak - whole) < 1, (peak, whole)
