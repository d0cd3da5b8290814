"""A snapshot task: one group of consecutive chunks of a table read between one pair of
watermarks and written as one Parquet file into the table's folder, on a Spark executor or
in a thread of the binlake process (pipelines/snapshot/runner.py). What comes back to the
driver is a typed value that pickles across Spark (``GroupWritten`` or ``TaskFault``).

Invariants:
- A task never fails: a fault comes back as a ``TaskFault`` (retryable for a transient source
  fault, cdc_core/errors.py; else with its traceback), so no stack trace reaches the user's
  terminal (tests/test_snapshot_faults.py).
- A task only writes an uncommitted file: the driver commits it with the group's chunk
  records, or never (pipelines/snapshot/driver.py).
- Spark tasks write their Parquet file into the table's folder through
  pipelines/lake/storage.py (a local folder or an object store, ``sink.storage_options``)
  (tests/test_object_store.py runs the snapshot on two workers writing to S3).
- Routed tables (cdc_core/routes.py): a group of a routed source is written shaped as its
  sink (``_cdc_source`` filled) (tests/test_routes.py).
- A table with a mode or metadata columns (cdc_core/schema/modes.py) gets its rows' read
  columns: the group's high watermark and the time it was read; live, current versions
  (tests/test_history_stream.py).
"""

from __future__ import annotations

import resource
import time
import traceback
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cdc_core.chunks.planning import INTEGER_TYPES, Chunk
from cdc_core.chunks.reader import ChunkReader
from cdc_core.chunks.record import ChunkRecord
from cdc_core.errors import transient_cause
from cdc_core.schema.modes import SinkColumns
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import ConnectionSettings
from pipelines.lake.conform import conform_routed
from pipelines.lake.files import WrittenFile, write_files
from pipelines.snapshot.connections import drop_connection, worker_connection


@dataclass(frozen=True)
class GroupTask:
    """Work for one task: consecutive chunks of one table."""

    conn: ConnectionSettings
    server_id: int
    schema: TableSchema
    chunks: tuple[Chunk, ...]
    uri: str
    pipeline: str
    target: pa.Schema | None = None  # routed: the sink table's schema (rows get _cdc_source)
    storage_options: tuple[tuple[str, str], ...] = ()  # sink.storage_options: the executor writes there
    base: int = 0  # of the pipeline's positions on the source (after a failover, cdc_core/offset/position.py)
    columns: SinkColumns = SinkColumns()  # the table's mode and metadata columns (cdc_core/schema/modes.py)
    partition_by: tuple[str, ...] = ()  # the sink table's partition columns (sink.layout)

    def describe(self) -> str:
        return f"{self.schema.qualified_name} chunks {self.chunks[0].index}-{self.chunks[-1].index}"


@dataclass(frozen=True)
class GroupWritten:
    """A group read and written: its files (one, one per partition of a partitioned table, none
    when its range held no rows), its rows and one record per chunk, for the driver to commit
    together."""

    files: tuple[WrittenFile, ...]
    rows: int
    records: tuple[ChunkRecord, ...]
    task_peak_rss_mb: float


@dataclass(frozen=True)
class TaskFault:
    """A task's failure as a value (see the module invariants)."""

    message: str  # the transient cause, or "Type: message"
    retryable: bool  # a transient source fault: the driver reads the work again, with backoff
    traceback: str = ""  # of a fault retrying cannot fix: logged by the driver at debug level


GroupResult = GroupWritten | TaskFault


def task_fault(e: Exception, c: ConnectionSettings) -> TaskFault:
    """A failed task's answer: retryable for a transient source fault (the worker's cached
    connection to ``c`` is dropped), else the error and its traceback."""
    cause = transient_cause(e)
    if cause is None:
        return TaskFault(f"{type(e).__name__}: {e}", retryable=False, traceback=traceback.format_exc())
    drop_connection(c)  # may be half-broken (cut mid-packet): never reused
    return TaskFault(cause, retryable=True)


def run_group(task: GroupTask) -> GroupResult:
    """Read the group's consecutive chunks as one range between one pair of watermarks, write
    one Parquet file, and describe it and each chunk for the driver. Failures come back as
    values (:func:`task_fault`)."""
    c = task.conn
    try:
        reader = ChunkReader.bulk(c, worker_connection(c), task.schema, task.server_id, base=task.base)
        result = reader.read(task.schema, Chunk.span(list(task.chunks)))
        table = result.table
        if not task.columns.plain:  # rows read at the high watermark (cdc_core/schema/modes.py)
            table = task.columns.with_read_columns(table, result.high_watermark, int(time.time() * 1_000_000))
        counts = rows_per_chunk(task.schema, task.chunks, table)
        if task.target is not None:
            table = conform_routed(table, task.schema.qualified_name, task.target)
        written = write_files(task.uri, table, dict(task.storage_options), partition_by=task.partition_by) \
            if table.num_rows else ()
    except Exception as e:  # noqa: BLE001 - classified: transient faults are retried, the rest reported
        return task_fault(e, c)
    records = tuple(ChunkRecord.for_chunk(task.pipeline, ch, n, result.low_watermark, result.high_watermark,
                                          result.window_changes) for ch, n in zip(task.chunks, counts))
    return GroupWritten(written, table.num_rows, records, peak_rss_mb())


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB. Read with ``RUSAGE_THREAD``: Linux gives the
    process's peak (its memory's, not the thread's) either way, and ``RUSAGE_SELF`` walks every
    thread of the process under its signal lock to sum their CPU times: 0.4 ms a call at 6,000
    threads against 1 us, and a snapshot of 2,000 small tables reaches that many (connectorx 0.4
    leaves three pool threads behind per read for about 30 s)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_maxrss / 1024


def rows_per_chunk(schema: TableSchema, chunks: tuple[Chunk, ...], table: pa.Table) -> list[int | None]:
    """Rows of each chunk in a group's table: exact for integer keys; for other keys only a
    one-chunk group is known (Python order is not the server's collation order). The keys are
    sorted once and each chunk's bounds found by bisection: comparing every key with every
    chunk's bounds cost a group of 100 chunks 200 passes over its rows."""
    if len(chunks) == 1:
        return [table.num_rows]
    if schema.column(chunks[0].key).data_type not in INTEGER_TYPES:
        return [None] * len(chunks)
    keys = np.sort(table.column(chunks[0].key).drop_null().to_numpy())

    def below(bound: int | None, unbounded: int) -> int:
        """How many keys are below ``bound`` (``unbounded`` for None)."""
        if bound is None:
            return unbounded
        if not len(keys) or bound <= int(keys[0]):
            return 0
        if bound > int(keys[-1]):
            return len(keys)
        return int(np.searchsorted(keys, bound, side="left"))  # within the keys' range: fits their type

    return [below(ch.hi, len(keys)) - below(ch.lo, 0) for ch in chunks]
