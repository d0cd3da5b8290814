"""An online backfill's read groups (cdc_core/chunks/incremental.py), read while the stream goes on,
each chunk by its own SELECT between its own watermarks (``ChunkReader.select``), several
chunks at once: where the snapshot's groups run (``source.snapshot.runner``,
pipelines/spark/session.py ``snapshot_on_spark``), either in ``pipeline.parallelism`` threads
of the stream process (the local runner: Spark never starts) or as one Spark task per chunk
once the stream process's session is up, and until then one chunk after another in a thread
of the stream process.

Invariants (tests/test_backfill.py):
- The stream never waits for Spark or for a group's SELECTs: the session starts in a
  background thread the first time a large request asks for it (never with the local
  runner), and groups are read in other threads; a session already in the process (a
  test's, a Dagster run's) is used as it is and never stopped here.
- Chunks read at once are read as one at a time would be: each on a connection of its own
  (one per reader thread, never shared), with its own low and high watermark around its own
  SELECT, so each chunk's window is reconciled by the stream as cdc_core/chunks/incremental.py
  states, whatever the order the reads end in; a group's results come back in the plan's
  order (tests/test_backfill.py::test_chunks_read_at_once_land_exactly_under_writes).
- While the stream lags (pipelines/stream/online_backfill.py ``LAG_YIELD_SECONDS``) the local
  runner reads one chunk at a time: the reads go on without taking every core from the stream.
- The stream keeps its one binlog reader: a read only queries the source (watermarks and one
  SELECT), never reads the binlog.
- A task never fails: transient source faults and errors come back as values
  (pipelines/snapshot/task.py's ``TaskFault``); the driver raises them as the group's
  read failure, and the backfill reads the group again (pipelines/stream/online_backfill.py).
- Only the stream process writes Delta; rows read on Spark come back to it as Arrow IPC bytes.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.reader import ChunkReader, ChunkResult
from cdc_core.config import BinlakeConfig
from cdc_core.errors import TransientError
from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import ConnectionSettings
from pipelines.snapshot.connections import Connections, close_connections, use_connections, worker_connection
from pipelines.snapshot.task import TaskFault, task_fault

log = logging.getLogger(__name__)


class ReadFailed(RuntimeError):
    """A chunk's read failed (on an executor, or in the reader thread) for a reason retrying may not
    fix (the message says which)."""


class ReadInterrupted(TransientError):
    """A chunk's read hit a transient source fault (on an executor, or in the reader thread)."""


@dataclass(frozen=True)
class ChunkTask:
    """Work for one Spark task: one chunk's SELECT between its watermarks."""

    conn: ConnectionSettings
    server_id: int
    schema: TableSchema
    chunk: Chunk
    base: int = 0  # of the pipeline's positions on the source (cdc_core/offset/position.py)


@dataclass(frozen=True)
class ChunkRows:
    """A chunk read by a task: its rows (Arrow IPC bytes) and watermarks."""

    rows: bytes
    low: BinlogPosition
    high: BinlogPosition
    read_at: float = 0.0  # when the high watermark was taken (the executor's clock)


def select_chunk(task: ChunkTask) -> ChunkResult | TaskFault:
    """One chunk's rows between its watermarks, on this thread's cached connection, or a fault
    as a value."""
    c = task.conn
    try:
        reader = ChunkReader.bulk(c, worker_connection(c), task.schema, task.server_id, base=task.base)
        return reader.select(task.schema, task.chunk)
    except Exception as e:  # noqa: BLE001 - classified: transient faults are retried, the rest reported
        return task_fault(e, c)


def read_chunk(task: ChunkTask) -> ChunkRows | TaskFault:
    """A Spark task: the chunk's rows (Arrow IPC bytes) and watermarks, or a fault as a value."""
    result = select_chunk(task)
    if isinstance(result, TaskFault):
        return result
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, result.table.schema) as w:
        w.write_table(result.table)
    return ChunkRows(sink.getvalue().to_pybytes(), result.low_watermark, result.high_watermark, result.read_at)


class GroupReads:
    """A large request's read groups, read while the stream goes on: in threads of this process
    (the local runner), or on Spark once the stream process's session is up and in a thread
    here until then (see the module invariants)."""

    def __init__(self, cfg: BinlakeConfig):
        self.cfg = cfg
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="backfill-spark-start")
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="backfill-read")  # one group read at a time
        self._chunks: ThreadPoolExecutor | None = None  # the local runner's chunk readers, made on first use
        self._connections: list[Connections] = []  # each chunk reader thread's own
        self._lock = threading.Lock()
        self._local: bool | None = None  # decided on the first call of slots()
        self._pending: list[Future] = []  # the local runner's chunk reads of the group being read
        # Set by the stream while it lags (pipelines/stream/online_backfill.py): the local runner
        # then reads one chunk at a time, as the stream process's one reader thread would.
        self.behind = False
        self._session: Future | None = None
        self._owned = False  # started here (stopped at close), not found in the process
        self._broken = False
        self._group: str | None = None  # the running Spark job's group (cancelled when dropped)

    @property
    def local(self) -> bool:
        """Whether groups are read in threads of this process, Spark never started (known once
        :meth:`slots` was called)."""
        return bool(self._local)

    def slots(self) -> int | None:
        """Chunks read at once: ``pipeline.parallelism`` with the local runner; else Spark's task
        slots once the session is up, None until then (the first call starts it in the
        background) or when it cannot start."""
        if self._local is None:
            from pyspark import SparkContext

            from pipelines.spark.session import snapshot_on_spark

            # A session already in the process decides by its master, as the snapshot's runner does.
            self._local = not snapshot_on_spark(self.cfg, SparkContext._active_spark_context)
        if self._local:
            return self.cfg.pipeline.parallelism
        if self._session is None:
            log.info("backfill: starting Spark for parallel chunk reads (in the background)")
            self._session = self._starter.submit(self._start)
        if self._broken or not self._session.done():
            return None
        try:
            sc = self._session.result().sparkContext
        except Exception as e:  # noqa: BLE001 - no Spark (no Java, a bad master): read in this process
            log.warning("backfill: Spark did not start (%s: %s); reading in the stream process", type(e).__name__, e)
            self._broken = True
            return None
        return max(1, min(self.cfg.pipeline.parallelism, sc.defaultParallelism))

    def _start(self):
        from pyspark import SparkContext

        from pipelines.spark.session import get_spark

        self._owned = SparkContext._active_spark_context is None
        return get_spark(self.cfg.spark.master, self.cfg.spark.conf)

    def submit(self, tasks: list[ChunkTask], on_spark: bool) -> Future:
        """Read ``tasks``: in parallel in threads here (the local runner), or in one Spark job
        (``on_spark``: once :meth:`slots` is not None), else one after another in a thread here;
        a future of their ``ChunkResult`` in the tasks' order, or of the first fault."""
        read = self._on_spark if on_spark else self._in_threads if self.local else self._here
        return self._reader.submit(read, tasks)

    def _on_spark(self, tasks: list[ChunkTask]) -> list[ChunkResult]:
        sc = self._session.result().sparkContext
        first, last = tasks[0].chunk, tasks[-1].chunk
        self._group = f"binlake-backfill-{uuid.uuid4().hex}"
        sc.setJobGroup(self._group, f"binlake backfill {first.table} chunks {first.index}-{last.index}",
                       interruptOnCancel=True)
        try:
            return _results(tasks, sc.parallelize(tasks, len(tasks)).map(read_chunk).collect())
        finally:
            self._group = None

    def _here(self, tasks: list[ChunkTask]) -> list[ChunkResult]:
        answers = []
        for t in tasks:  # a fault ends the group: it is read again whole
            answers.append(select_chunk(t))
            if isinstance(answers[-1], TaskFault):
                break
        return _results(tasks[:len(answers)], answers)

    def _in_threads(self, tasks: list[ChunkTask]) -> list[ChunkResult]:
        """The local runner: the chunks read ``pipeline.parallelism`` at a time, each in a reader
        thread on that thread's own connection."""
        slots = self.cfg.pipeline.parallelism
        with self._lock:
            if self._chunks is None:
                self._chunks = ThreadPoolExecutor(slots, thread_name_prefix="backfill-chunk",
                                                  initializer=self._thread_connections)
            pending = self._pending = []
        answers: list[ChunkResult | TaskFault] = []
        for t in tasks:  # in the plan's order; at most one in flight while the stream lags
            while len(pending) - len(answers) >= (1 if self.behind else slots):
                if self._answered(pending, answers):
                    return _results(tasks[:len(answers)], answers)
            with self._lock:
                if pending is not self._pending:  # the group was dropped: nothing more is read
                    raise CancelledError
                pending.append(self._chunks.submit(select_chunk, t))
        while len(answers) < len(pending):
            if self._answered(pending, answers):
                break
        return _results(tasks[:len(answers)], answers)

    def _answered(self, pending: list[Future], answers: list) -> bool:
        """The next chunk's answer, once here, appended to ``answers``; whether it is a fault (it
        ends the group, read again whole: chunks not started are not read)."""
        answers.append(pending[len(answers)].result())
        if isinstance(answers[-1], TaskFault):
            self._drop(pending)
            return True
        return False

    def _thread_connections(self) -> None:
        conns: Connections = {}
        with self._lock:
            self._connections.append(conns)
        use_connections(conns)

    def _drop(self, pending: list[Future]) -> None:
        for f in pending:
            f.cancel()

    def cancel(self) -> None:
        """Stop reading the group being read (it was dropped: its rows would go unused): the
        running Spark job is cancelled; the local runner's chunks not started are not read."""
        with self._lock:
            self._drop(self._pending)
            self._pending = []
        session, group = self._session, self._group
        if session is not None and session.done() and session.exception() is None and group is not None:
            session.result().sparkContext.cancelJobGroup(group)

    def close(self) -> None:
        """Cancel a running read, let the threads end, close their connections, and stop a
        session started here."""
        self.cancel()
        self._reader.shutdown(wait=True, cancel_futures=True)
        if self._chunks is not None:
            self._chunks.shutdown(wait=True, cancel_futures=True)
        for conns in self._connections:
            close_connections(conns)
        self._starter.shutdown(wait=True)
        session = self._session
        if session is not None and self._owned and session.exception() is None:
            session.result().stop()


def _results(tasks: list[ChunkTask], answers: list[ChunkRows | ChunkResult | TaskFault]) -> list[ChunkResult]:
    """The tasks' answers as chunk results; the first fault raised."""
    results = []
    for task, a in zip(tasks, answers, strict=True):
        what = f"{task.chunk.table} chunk {task.chunk.index}"
        if isinstance(a, TaskFault) and a.retryable:
            raise ReadInterrupted(f"reading {what}: {a.message}")
        if isinstance(a, TaskFault):
            log.debug("reading %s failed:\n%s", what, a.traceback)
            raise ReadFailed(f"reading {what}: {a.message}")
        if isinstance(a, ChunkResult):
            results.append(a)
            continue
        rows = pa.ipc.open_stream(a.rows).read_all()
        results.append(ChunkResult(task.chunk, rows, a.low, a.high, 0, 1, a.read_at))
    return results
