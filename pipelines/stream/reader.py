"""The reader process as the engine sees it: start it at a position, take its records,
stop it.

Invariants (tests/test_stream_crash.py, tests/test_stream_signals.py):
- At most one reader process per replication server_id runs per engine; ``start`` stops
  the previous ones first, so a reconnect never has two readers on one server_id.
- The reader process never ends by SIGTERM/SIGINT: a supervisor or Ctrl-C signals the
  whole process group, and the engine alone decides to stop (it commits what it read,
  then ends the reader). It ignores both from the instant it is forked.
- A reader that exits without an end or an error record (killed, crashed) is reported
  as a transient ``ReaderError``.
- Packed rows that fail to decode as they are taken end the records there with a fatal
  ``ReaderError``, as the reader process ends on a value it cannot decode.
- A reader process that is alive but stuck (it sent nothing for twice its binlog connection's
  read timeout and used no CPU in the second half: a healthy one gets a heartbeat every 0.25 s
  when idle, its reads time out after that long, and one reading past events it does not
  capture uses CPU)
  is reported as a transient ``ReaderError``: the engine reads again from its checkpoint
  instead of waiting on it forever (tests/test_stream_faults.py). A process forked from a
  threaded one can hang on a lock another thread held at the fork.

Parallel decoding (``ParallelReader``, ``source.parallel_decode``; tests/test_parallel_decode.py):
a backlog at a (re)start is cut at transaction ends (cdc_core/binlog/ranges.py) into chunks,
each decoded by a reader process of its own into a spool file, at most ``workers`` chunks
at once, while the engine takes the chunks' records in binlog order; after the last chunk
one reader goes on from its end, as without parallel decoding.
- The engine takes exactly the records one reader from the same start would give, in the
  same order: the same row events, transaction ends and statements at the same positions;
  only ``TableLayout`` records are repeated (each chunk reports the layouts it uses, under
  ids of its own: ``first_layout_id``) and heartbeats are as the server sends them. A chunk
  whose reader ends anywhere but at its chunk's end is an error, never a gap or a repeat.
- Every chunk reader skips row events at or before ``skip_through``, and the engine's
  restarts are unchanged: it starts the whole reader again from its checkpoint.
- Chunk readers use replication ids ``server_id + 2 + (chunk % workers)`` (``server_id + 1``
  is the stream's backfill reader), distinct among the chunks read at once; the reader
  after the last chunk uses ``server_id``.
- Disk stays bounded: at most ``workers`` spools exist; a spool is unlinked as it is
  created (its readers hold it open), so it is gone once its chunk is taken or the engine
  dies, however it dies. The reader after the last chunk is started once every spool is
  closed, so it holds none open for the stream's life.
- No cut can be found (a small backlog, one huge transaction, the server unreachable while
  planning), or a chunk reader's server_id is the source's or another replica's: one
  reader reads it all, as without parallel decoding.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import multiprocessing
import os
import pickle
import queue as queue_mod
import signal
import struct
import tempfile
import time
from collections import deque

import pymysql

from cdc_core.binlog.events import ReaderEnd, ReaderError, ReaderRecord, ReadFailure, RowsEvent
from cdc_core.binlog.ranges import backlog_bytes, cuts
from cdc_core.binlog.reader import QUEUE_ITEMS, STOP_SIGNALS, ReaderSpec, run_reader
from cdc_core.binlog.row_images import Undecoded
from cdc_core.config import ParallelDecodeConfig
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.startup import connected_replicas
from cdc_core.source.connection import connect

log = logging.getLogger(__name__)

MB = 1 << 20
SPOOL_POLL_SECONDS = 0.005  # how often a taker waiting on a spool looks for more
_FRAME = struct.Struct("<Q")  # a spool frame: the pickled list's length, then the pickled list


class Spool:
    """A spool file: lists of records put by one reader process, taken in order by the
    engine while they are still being written (a queue bounded by disk, not memory).

    The file is unlinked as soon as it is created; writer and taker share the one open
    descriptor the fork hands down (the writer appends, the taker reads at its own offset),
    so no file is left behind by any ending."""

    def __init__(self):
        fd, path = tempfile.mkstemp(prefix="binlake-spool-")  # in $TMPDIR
        os.unlink(path)
        self._fd: int | None = fd
        self._offset = 0  # where the taker reads the next frame

    def put(self, items: list) -> None:
        """Append one list (the reader process's side)."""
        data = pickle.dumps(items, pickle.HIGHEST_PROTOCOL)
        view = memoryview(_FRAME.pack(len(data)) + data)
        while view:
            view = view[os.write(self._fd, view):]

    def get(self, timeout: float) -> list:
        """The next list, waiting up to ``timeout`` for it (raises ``queue.Empty``); a frame
        being written is not taken until it is whole."""
        deadline = time.monotonic() + timeout
        while True:
            head = os.pread(self._fd, _FRAME.size, self._offset)
            if len(head) == _FRAME.size:
                (size,) = _FRAME.unpack(head)
                data = os.pread(self._fd, size, self._offset + _FRAME.size)
                if len(data) == size:
                    self._offset += _FRAME.size + size
                    return pickle.loads(data)
            left = deadline - time.monotonic()
            if left <= 0:
                raise queue_mod.Empty
            time.sleep(min(SPOOL_POLL_SECONDS, left))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def undecoded_cut(records: list[ReaderRecord]) -> list[ReaderRecord]:
    """``records`` up to the first row event whose packed rows failed to decode as they were
    unpickled (cdc_core/binlog/row_images.py), then the error the reader would have sent in its
    place: nothing follows it."""
    for i, record in enumerate(records):
        if type(record) is RowsEvent and type(record.rows) is Undecoded:
            return [*records[:i], ReaderError(ReadFailure.FATAL, f"{record.rows.error} (decoding {record.table}'s "
                                                                  f"rows at {record.position})")]
    return records


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first), or None where
    there is no such process (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None


def cpu_ticks(pid: int) -> int | None:
    """The CPU time process ``pid`` has used (user and system, every thread), in clock ticks;
    None where ``/proc`` cannot tell."""
    fields = proc_stat(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])  # utime, stime: the 14th and 15th


class ReaderProcess:
    """One binlog reader process at a time, feeding a bounded queue (or, with ``spool``, a
    spool file)."""

    def __init__(self, spec: ReaderSpec, *, spool: bool = False):
        self.spec = spec  # start/skip_through are replaced on each start
        self.spool = spool
        self.process: multiprocessing.Process | None = None
        self._queue = None
        # When the process was last heard from (a record, or CPU used), and its CPU ticks then.
        self._heard: tuple[float, int | None] = (0.0, None)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, start: BinlogPosition, skip_through: BinlogPosition | None) -> None:
        """(Re)start reading at ``start`` (a transaction boundary), skipping row events at
        or before ``skip_through``."""
        self.stop()
        # fork, not spawn: spawn re-imports the caller's __main__ (a script, Dagster, pytest),
        # and the reader needs nothing the parent's threads could hold (it only opens sockets).
        ctx = multiprocessing.get_context("fork")
        self._queue = Spool() if self.spool else ctx.Queue(maxsize=QUEUE_ITEMS)
        spec = dataclasses.replace(self.spec, start=start, skip_through=skip_through)
        self.process = ctx.Process(target=run_reader, args=(spec, self._queue, os.getpid()), name="binlake-reader",
                                   daemon=True)
        # Stop signals stay blocked across the fork: the child starts with them blocked and ignores
        # them before unblocking (run_reader), so a group signal landing in between cannot end it.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        # The child never collects what it inherits: its collections would walk the parent's whole
        # heap (copying its pages), and a finalizer run there could wait on a lock another thread
        # of the parent held at the fork.
        gc.freeze()
        try:
            self.process.start()
        finally:
            gc.unfreeze()
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self._heard = (time.monotonic(), None)

    def take(self, timeout: float) -> list[ReaderRecord]:
        """The next records (a list, in binlog order), or [] if none came within ``timeout``."""
        try:
            records = self._queue.get(timeout=timeout)
            self._heard = (time.monotonic(), None)
            return undecoded_cut(records)
        except queue_mod.Empty:
            if self.process.is_alive():
                return self._silent()
        try:  # it may have put its last records just before it ended
            return undecoded_cut(self._queue.get(timeout=0.01))
        except queue_mod.Empty:
            return [ReaderError(ReadFailure.TRANSIENT, f"reader process exited with code {self.process.exitcode}")]

    def _silent(self) -> list[ReaderRecord]:
        """Nothing came and the process lives: [] while it may be working, a transient error once
        it has sent nothing for twice its read timeout and used no CPU in the second (it is stuck)."""
        bound = self.spec.conn.read_timeout
        now = time.monotonic()
        since, ticks = self._heard
        if bound is None or now - since < bound:
            return []
        used = cpu_ticks(self.process.pid)
        if used is None or used != ticks:  # the first look, or it is working: look again after another bound
            self._heard = (now, used)
            return []
        stuck = f"reader process {self.process.pid} stuck (nothing sent for {now - since + bound:.0f} s, no CPU " \
                f"used in the last {now - since:.0f} s)"
        log.warning("%s: ending it", stuck)
        return [ReaderError(ReadFailure.TRANSIENT, stuck)]

    def queued(self) -> int:
        """Record lists the reader process has put and the engine has not taken yet (at most
        ``QUEUE_ITEMS``; 0 for a spool, whose backlog is on disk). Safe from another thread
        (the metrics endpoint, pipelines/stream/metrics.py)."""
        q = self._queue
        if q is None or self.spool:
            return 0
        try:
            return q.qsize()
        except (NotImplementedError, OSError, ValueError):  # no sem_getvalue here, or a queue being closed
            return 0

    def stop(self) -> None:
        if self.process is None:
            return
        # SIGKILL, as the reader ignores SIGTERM; it has nothing to flush (its queue is dropped
        # here, and the server ends the replication connection when its socket closes).
        self.process.kill()
        self.process.join()
        self._queue.close()
        if not self.spool:
            self._queue.cancel_join_thread()
        self.process = None


class ParallelReader:
    """A backlog decoded by several reader processes, taken in binlog order (see the module
    invariants); then one reader from the backlog's end on. The engine uses it as it uses
    a ``ReaderProcess``."""

    def __init__(self, spec: ReaderSpec, decode: ParallelDecodeConfig):
        self.spec = spec  # as ReaderProcess.spec: the engine may change ``until`` before a start
        self.decode = decode
        self._waiting: deque[ReaderProcess] = deque()  # chunks not started yet, in binlog order
        self._reading: deque[ReaderProcess] = deque()  # chunks started; the first is being taken
        self._live = ReaderProcess(spec)
        self._live_from: tuple[BinlogPosition, BinlogPosition | None] | None = None

    @property
    def pid(self) -> int | None:
        return self._reading[0].pid if self._reading else self._live.pid

    def start(self, start: BinlogPosition, skip_through: BinlogPosition | None) -> None:
        """(Re)start at ``start`` (a transaction boundary), skipping row events at or before
        ``skip_through``: the backlog up to the server's end (or ``spec.until``) in chunks."""
        self.stop()
        ends = self._cuts(start)
        starts = [start, *ends]
        workers = self.decode.workers
        for i, until in enumerate(ends):
            slot = i % workers
            self._waiting.append(ReaderProcess(dataclasses.replace(
                self.spec, start=starts[i], skip_through=skip_through, until=until,
                server_id=self.spec.server_id + 2 + slot, report_as=f"{self.spec.report_as}:decode{slot}",
                first_layout_id=(i << 32) + 1), spool=True))
        self._live = ReaderProcess(dataclasses.replace(self.spec, first_layout_id=(len(ends) << 32) + 1))
        self._live_from = (starts[-1], skip_through)
        if ends:
            log.info("catching up %s..%s in %d chunks, %d decoded at once", start, ends[-1], len(ends), workers)
        self._fill()

    def _cuts(self, start: BinlogPosition) -> list[BinlogPosition]:
        """Where the chunks end: transaction ends in the backlog; none when it is small or
        the server cannot be asked (one reader then reads it, and reports what fails)."""
        try:
            with connect(self.spec.conn) as c, c.cursor() as cur:
                end = master_position(cur, start.base)
                if self.spec.until is not None:
                    end = min(end, self.spec.until)
                if backlog_bytes(cur, start, end) < self.decode.min_backlog_mb * MB:
                    return []
                taken = self._ids_taken(cur)
                if taken:
                    log.warning("server_id %s in use by another replica: one reader reads the backlog "
                                "(source.parallel_decode uses server_id + 2 ... + 1 + workers)", sorted(taken))
                    return []
                return cuts(cur, start, end, max(1, int(self.decode.chunk_mb * MB)))
        except pymysql.err.MySQLError as e:
            log.warning("cannot cut the backlog for parallel decoding (%s): one reader reads it", e)
            return []

    def _ids_taken(self, cur) -> set[int]:
        """The chunk readers' server ids that the source or a replica other than ours uses:
        connecting with one would cut that replica off."""
        ids = {self.spec.server_id + 2 + slot for slot in range(self.decode.workers)}
        cur.execute("SELECT @@server_id")
        taken = ids & {int(cur.fetchone()[0])}
        replicas = connected_replicas(cur)
        if replicas is None:
            return taken
        ours = (self.spec.report_as, *(f"{self.spec.report_as}:decode{slot}" for slot in range(self.decode.workers)))
        return taken | (ids & {server_id for server_id, host in replicas if host not in ours})

    def _fill(self) -> None:
        """Start chunks while fewer than ``workers`` are read; the last reader once every chunk is taken."""
        while self._waiting and len(self._reading) < self.decode.workers:
            chunk = self._waiting.popleft()
            chunk.start(chunk.spec.start, chunk.spec.skip_through)
            self._reading.append(chunk)
        if not self._reading and self._live_from is not None:
            self._live.start(*self._live_from)
            self._live_from = None

    def take(self, timeout: float) -> list[ReaderRecord]:
        """The next records in binlog order (a chunk's end is not one), or [] if none came
        within ``timeout``."""
        if not self._reading:
            return self._live.take(timeout)
        chunk = self._reading[0]
        records = chunk.take(timeout)
        if not records:
            return records
        last = records[-1]
        if isinstance(last, ReaderError):
            name = f"decode worker (server_id {chunk.spec.server_id}, {chunk.spec.start}..{chunk.spec.until})"
            records[-1] = dataclasses.replace(last, message=f"{name}: {last.message}")
        elif isinstance(last, ReaderEnd):
            if last.position != chunk.spec.until:  # the next chunk starts at until: events would repeat
                records[-1] = ReaderError(ReadFailure.FATAL, f"a decode worker stopped at {last.position}, not at "
                                                             f"its chunk's end {chunk.spec.until}")
                return records
            records.pop()
            chunk.stop()
            self._reading.popleft()
            self._fill()
        return records

    def queued(self) -> int:
        """The queue of the reader after the backlog's chunks (0 while chunks are taken from spools)."""
        return 0 if self._reading else self._live.queued()

    def stop(self) -> None:
        """Stop every reader process; spools go with them."""
        for chunk in self._reading:
            chunk.stop()
        self._reading.clear()
        self._waiting.clear()
        self._live.stop()
        self._live_from = None
