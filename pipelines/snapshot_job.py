"""The snapshot phase on Spark: the driver plans chunks, Spark tasks read groups of
chunks (watermarked, lock-free) and write Parquet into each table's folder, and the
driver commits each group's files to Delta together with its chunk records.

Invariants:
- A table's plan is stored before any of its chunks is read and reused on resume,
  so completed and redone chunks always tile the same key space.
- A chunk counts as done only once its rows are in a Delta commit that also carries
  its record; files of an interrupted group are never committed (no duplicates),
  and a re-run reads only chunks without a record. After success a re-run is a no-op.
- Concurrent binlog readers use distinct server ids: ``source.server_id + 1 + slot``.
- Routed tables (cdc_core/routes.py): each source's chunks are written into its route's
  sink table, shaped as the sink (``_cdc_source`` filled; the sink is first widened to
  hold every source); chunk plans and records stay per source table. Only the driver
  commits, one group at a time, so several sources never race on one Delta table.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from cdc_core.chunk_reader import ChunkReader, output_schema
from cdc_core.chunking import INTEGER_TYPES, Chunk, chunk_key, plan_chunks
from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router, sink_schema
from cdc_core.source import ConnectionSettings, captured_tables, connect, connection_settings
from cdc_core.table_schema import TableSchema, describe_table, quote_ident
from pipelines.control_store import ControlStore, chunk_record
from pipelines.delta_sink import SNAPSHOT_CHUNKS_KEY, commit_files, count_rows, ensure_table, table_uri, write_parquet
from pipelines.schema_applier import conform_routed, delta_schema, widen_to

log = logging.getLogger(__name__)

# Each group is one Spark job of one task, read between one pair of watermarks. Few groups
# per task slot keep the slots busy without paying a job's ~80 ms many times over; the
# row cap (source.snapshot.max_rows_per_task) bounds what a crash makes us read again
# (bench/snapshot.py --profile).
TARGET_GROUPS_PER_SLOT = 2
MIRROR_BATCH_RECORDS = 256


@dataclass(frozen=True)
class GroupTask:
    """Work for one Spark task: consecutive chunks of one table."""

    conn: ConnectionSettings
    server_id: int
    schema: TableSchema
    chunks: tuple[Chunk, ...]
    uri: str
    pipeline: str
    target: pa.Schema | None = None  # routed: the sink table's schema (rows get _cdc_source)


_worker_connections: dict[ConnectionSettings, pymysql.connections.Connection] = {}


def _worker_connection(c: ConnectionSettings) -> pymysql.connections.Connection:
    """A control connection cached in the (reused) Python worker across tasks."""
    conn = _worker_connections.get(c)
    if conn is not None:
        try:
            conn.ping(reconnect=True)
            return conn
        except pymysql.err.Error:
            conn.close()
    conn = _worker_connections[c] = connect(c)
    return conn


def run_group(task: GroupTask) -> dict:
    """Executor side: read the group's consecutive chunks as one range between one pair of
    watermarks, write one Parquet file, and describe it and each chunk for the driver."""
    import connectorx as cx  # imported on the executor

    c = task.conn
    url = c.connectorx_url(task.schema.database)
    reader = ChunkReader(c, _worker_connection(c), lambda sql: cx.read_sql(url, sql, return_type="arrow"),
                         task.server_id)
    result = reader.read(task.schema, Chunk.span(list(task.chunks)))
    table = result.table
    counts = _rows_per_chunk(task.schema, task.chunks, table)
    if task.target is not None:
        table = conform_routed(table, task.schema.qualified_name, task.target)
    written = write_parquet(task.uri, table) if table.num_rows else None
    return {
        "file": written,
        "rows": table.num_rows,
        "records": [chunk_record(task.pipeline, ch, n, result.low_watermark, result.high_watermark,
                                 result.window_changes) for ch, n in zip(task.chunks, counts)],
        "task_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _rows_per_chunk(schema: TableSchema, chunks: tuple[Chunk, ...], table: pa.Table) -> list[int | None]:
    """Rows of each chunk in a group's table: exact for integer keys; for other keys only a
    one-chunk group is known (Python order is not the server's collation order)."""
    if len(chunks) == 1:
        return [table.num_rows]
    if schema.column(chunks[0].key).data_type not in INTEGER_TYPES:
        return [None] * len(chunks)
    keys = table.column(chunks[0].key)
    out = []
    for ch in chunks:
        mask = pa.array([True] * table.num_rows) if ch.lo is None else pc.greater_equal(keys, ch.lo)
        if ch.hi is not None:
            mask = pc.and_(mask, pc.less(keys, ch.hi))
        out.append(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)
    return out


@dataclass
class TableSummary:
    table: str
    chunks: int
    chunks_read: int = 0
    rows_written: int = 0
    delta_rows: int = 0
    mysql_rows: int = 0
    seconds: float = 0.0

    @property
    def matches(self) -> bool:
        return self.delta_rows == self.mysql_rows


@dataclass
class SnapshotSummary:
    tables: list[TableSummary] = field(default_factory=list)
    seconds: float = 0.0
    rows_read: int = 0
    task_peak_rss_mb: float = 0.0
    driver_peak_rss_mb: float = 0.0


def _groups(chunks: list[Chunk], size: int) -> list[list[Chunk]]:
    return [chunks[i : i + size] for i in range(0, len(chunks), size)]


def plan_table(cfg: BinlakeConfig, store: ControlStore, cur, schema: TableSchema) -> list[Chunk]:
    """Plan a table's chunks and store the plan (before any chunk of it is read)."""
    key = chunk_key(schema, cfg.source.snapshot.chunk_key_columns)
    chunks = plan_chunks(cur, schema, key, cfg.source.snapshot.chunk_size)
    store.save_plan(chunks)
    return chunks


def plan_snapshot(cfg: BinlakeConfig, names: list[str]) -> dict[str, list[Chunk]]:
    """The chunk plans of the captured tables ``names``: stored ones as they are, the
    others planned now against the source and stored."""
    store = ControlStore.of(cfg)
    plans = store.load_plans()
    missing = [n for n in names if n not in plans]
    if missing:
        with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
            for n in missing:
                plans[n] = plan_table(cfg, store, cur, describe_table(cur, *n.split(".", 1)))
    return {n: plans[n] for n in names}


class SnapshotJob:
    """Driver of one snapshot run."""

    def __init__(self, cfg: BinlakeConfig, spark, progress=None, only: set[str] | None = None,
                 chunks: set[int] | None = None, on_commit=None):
        self.cfg = cfg
        self.only = only  # restrict to these "db.table" names (Dagster asset subsets)
        self.chunks = chunks  # restrict to these chunk indexes of the planned tables (Dagster partitions)
        self.on_commit = on_commit  # callable(table, chunk records) after each group's Delta commit, or None
        self.spark = spark
        self.progress = progress  # callable(chunks_done, chunks_total, rows) or None
        self.conn = connection_settings(cfg)
        self.sink = cfg.sink.path
        self.router = Router(cfg.routes)
        self.store = ControlStore(self.sink, cfg.pipeline.name, cfg.sink.storage_options)
        # Concurrent groups: the configured parallelism, but no more than Spark has task slots
        # (extra concurrent jobs would only queue inside Spark).
        self.slots = max(1, min(cfg.pipeline.parallelism, spark.sparkContext.defaultParallelism))
        self._slots: list[int] = list(range(self.slots))
        self._slot_lock = threading.Lock()
        self._unmirrored: list[dict] = []

    def run(self) -> SnapshotSummary:
        """Snapshot every captured table; resumes where an earlier run stopped."""
        start = time.monotonic()
        summary = SnapshotSummary()
        with connect(self.conn) as control, control.cursor() as cur:
            captured = captured_tables(self.cfg, cur)
            names = [n for n in captured if self.only is None or n in self.only]
            # A routed sink is shaped by all its sources, also those outside an `only` subset.
            sinks = {self.router.sink(n) for n in names}
            routed = [n for n in captured if self.router.routed(n) and self.router.sink(n) in sinks]
            schemas = {n: describe_table(cur, *n.split(".", 1)) for n in sorted({*names, *routed})}
            self.router.check(schemas)
            plans = self.store.load_plans()
            work: list[tuple] = []
            tables = {}  # by sink table name (a routed table's sink is shared)
            targets: dict[str, pa.Schema | None] = {}
            for name in names:
                schema = schemas[name]
                sink = self.router.sink(name)
                uri = table_uri(self.sink, sink)
                if sink not in tables:
                    tables[sink], targets[sink] = self._open_sink(uri, sink, schemas)
                if name not in plans:
                    plans[name] = plan_table(self.cfg, self.store, cur, schema)
                done = self.store.completed_chunks(name, tables[sink])
                pending = [c for c in plans[name] if c.index not in done
                           and (self.chunks is None or c.index in self.chunks)]
                summary.tables.append(TableSummary(name, len(plans[name]), len(pending)))
                work.append((schema, uri, pending, targets[sink]))
            total_pending = sum(len(w[2]) for w in work)
            per_group = self._group_size(total_pending)
            tasks = [GroupTask(self.conn, 0, schema, tuple(g), uri, self.cfg.pipeline.name, target)
                     for schema, uri, pending, target in work for g in _groups(pending, per_group)]
            log.info("snapshot: %d tables, %d chunks to read in %d tasks", len(names), total_pending, len(tasks))
            by_table = {s.table: s for s in summary.tables}
            self._execute(tasks, tables, by_table, summary, total_pending)
            for s in summary.tables:
                db, t = s.table.split(".", 1)
                cur.execute(f"SELECT COUNT(*) FROM {quote_ident(db)}.{quote_ident(t)}")
                s.mysql_rows = cur.fetchone()[0]
                dt_ = tables[self.router.sink(s.table)]
                dt_.update_incremental()
                s.delta_rows = count_rows(dt_, s.table if self.router.routed(s.table) else None)
        summary.seconds = time.monotonic() - start
        summary.driver_peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return summary

    def _open_sink(self, uri: str, sink: str, schemas: dict[str, TableSchema]):
        """The Delta table ``sink`` (created if missing) and, for a route's sink, the schema its
        rows are written with: the widest of all its sources, the table widened to it first."""
        sources = self.router.sources(sink, schemas)
        if not sources:  # not routed: the source's own table
            return ensure_table(uri, output_schema(schemas[sink]), self.cfg.sink.storage_options), None
        members = [schemas[n] for n in sources]
        dt_ = ensure_table(uri, sink_schema(members, sink=sink), self.cfg.sink.storage_options)
        widened = widen_to(dt_, sink_schema(members, base=delta_schema(dt_), sink=sink))
        if widened:
            log.info("snapshot: %s %s", sink, widened)
        return dt_, delta_schema(dt_)

    def _group_size(self, pending: int) -> int:
        size = max(1, math.ceil(pending / (self.slots * TARGET_GROUPS_PER_SLOT)))
        snap = self.cfg.source.snapshot
        return max(1, min(size, snap.max_rows_per_task // snap.chunk_size))

    def _execute(self, tasks, tables, by_table, summary: SnapshotSummary, total: int) -> None:
        done_chunks = 0
        if self.progress:
            self.progress(0, total, 0)
        pool = ThreadPoolExecutor(self.slots, thread_name_prefix="snapshot")
        futures = {pool.submit(self._run_on_spark, t): t for t in tasks}
        try:
            for fut in as_completed(futures):
                task = futures[fut]
                result = fut.result()
                name = task.schema.qualified_name
                self._commit(tables[self.router.sink(name)], task.target or output_schema(task.schema), result)
                if self.on_commit:
                    self.on_commit(name, result["records"])
                s = by_table[name]
                rows = result["rows"]
                s.rows_written += rows
                summary.rows_read += rows
                summary.task_peak_rss_mb = max(summary.task_peak_rss_mb, result["task_peak_rss_mb"])
                done_chunks += len(task.chunks)
                if self.progress:
                    self.progress(done_chunks, total, summary.rows_read)
        except BaseException:
            # Interrupted or failed: queued groups must not run (their rows would never be committed).
            pool.shutdown(wait=False, cancel_futures=True)
            self.spark.sparkContext.cancelAllJobs()
            raise
        finally:
            self._flush_mirror()
        pool.shutdown()

    def _run_on_spark(self, task: GroupTask) -> dict:
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            sid = self.cfg.source.server_id + 1 + slot
            sc = self.spark.sparkContext
            sc.setJobDescription(f"binlake snapshot {task.schema.qualified_name} chunks "
                                 f"{task.chunks[0].index}-{task.chunks[-1].index}")
            return sc.parallelize([replace(task, server_id=sid)], 1).map(run_group).collect()[0]
        finally:
            with self._slot_lock:
                self._slots.append(slot)

    def _commit(self, table, schema: pa.Schema, result: dict) -> None:
        # Called on the driver's main thread only: commits never race each other (also
        # those of several routed sources into one sink table).
        records = result["records"]
        files = [result["file"]] if result["file"] else []
        version = commit_files(table, files, schema, {SNAPSHOT_CHUNKS_KEY: records})
        for r in records:
            r["delta_version"] = version
            r["completed_at"] = dt.datetime.fromisoformat(r["completed_at"])
        # The data commit already holds these records; the mirror table is appended in
        # batches (recovery unites both, see pipelines/control_store.py).
        self._unmirrored.extend(records)
        if len(self._unmirrored) >= MIRROR_BATCH_RECORDS:
            self._flush_mirror()

    def _flush_mirror(self) -> None:
        if self._unmirrored:
            self.store.record_chunks(self._unmirrored)
            self._unmirrored = []
