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
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from urllib.parse import quote

import pyarrow as pa
import pymysql

from cdc_core.binlog import ConnectionSettings
from cdc_core.chunk_reader import ChunkReader, output_schema
from cdc_core.chunking import Chunk, chunk_key, plan_chunks
from cdc_core.config import BinlakeConfig
from cdc_core.table_schema import TableSchema, describe_table, list_tables, quote_ident
from pipelines.control_store import ControlStore, chunk_record
from pipelines.delta_sink import SNAPSHOT_CHUNKS_KEY, commit_files, ensure_table, table_uri, write_parquet

log = logging.getLogger(__name__)

TARGET_GROUPS_PER_SLOT = 4
MAX_GROUP_ROWS = 250_000


def connection_settings(cfg: BinlakeConfig) -> ConnectionSettings:
    s = cfg.source
    return ConnectionSettings(s.host, s.port, s.user, s.password.get_secret_value())


def connect(conn: ConnectionSettings, **kwargs) -> pymysql.connections.Connection:
    """A control-plane connection: utf8mb4, autocommit, UTC session time zone."""
    return pymysql.connect(host=conn.host, port=conn.port, user=conn.user, password=conn.password,
                           charset="utf8mb4", autocommit=True, init_command="SET time_zone = '+00:00'", **kwargs)


@dataclass(frozen=True)
class GroupTask:
    """Work for one Spark task: consecutive chunks of one table."""

    conn: ConnectionSettings
    server_id: int
    schema: TableSchema
    chunks: tuple[Chunk, ...]
    uri: str
    pipeline: str


def run_group(task: GroupTask) -> dict:
    """Executor side: read each chunk, write one Parquet file, describe it for the driver."""
    import connectorx as cx  # imported on the executor

    c = task.conn
    url = f"mysql://{quote(c.user, safe='')}:{quote(c.password, safe='')}@{c.host}:{c.port}/{task.schema.database}"
    control = connect(c)
    try:
        reader = ChunkReader(c, control, lambda sql: cx.read_sql(url, sql, return_type="arrow"), task.server_id)
        results = [reader.read(task.schema, ch) for ch in task.chunks]
    finally:
        control.close()
    table = pa.concat_tables([r.table for r in results])
    written = write_parquet(task.uri, table) if table.num_rows else None
    return {
        "file": written,
        "records": [chunk_record(task.pipeline, r.chunk, r.table.num_rows, r.low_watermark, r.high_watermark,
                                 r.window_changes) for r in results],
        "task_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


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


def captured_tables(cfg: BinlakeConfig, cursor) -> list[str]:
    """Captured "db.table" names on the server, in name order."""
    return [t for t in list_tables(cursor) if cfg.source.captures(t)]


def _groups(chunks: list[Chunk], size: int) -> list[list[Chunk]]:
    return [chunks[i : i + size] for i in range(0, len(chunks), size)]


class SnapshotJob:
    """Driver of one snapshot run."""

    def __init__(self, cfg: BinlakeConfig, spark, progress=None, only: set[str] | None = None):
        self.cfg = cfg
        self.only = only  # restrict to these "db.table" names (Dagster asset subsets)
        self.spark = spark
        self.progress = progress  # callable(chunks_done, chunks_total, rows) or None
        self.conn = connection_settings(cfg)
        self.sink = cfg.sink.path
        self.store = ControlStore(self.sink, cfg.pipeline.name, cfg.sink.storage_options)
        self._locks: dict[str, threading.Lock] = {}
        self._slots: list[int] = list(range(cfg.pipeline.parallelism))
        self._slot_lock = threading.Lock()

    def run(self) -> SnapshotSummary:
        """Snapshot every captured table; resumes where an earlier run stopped."""
        start = time.monotonic()
        summary = SnapshotSummary()
        with connect(self.conn) as control, control.cursor() as cur:
            names = [n for n in captured_tables(self.cfg, cur) if self.only is None or n in self.only]
            schemas = {n: describe_table(cur, *n.split(".", 1)) for n in names}
            plans = self.store.load_plans()
            work: list[GroupTask] = []
            tables = {}
            for name in names:
                schema = schemas[name]
                uri = table_uri(self.sink, name)
                tables[name] = ensure_table(uri, output_schema(schema), self.cfg.sink.storage_options)
                if name not in plans:
                    key = chunk_key(schema, self.cfg.source.snapshot.chunk_key_columns)
                    plans[name] = plan_chunks(cur, schema, key, self.cfg.source.snapshot.chunk_size)
                    self.store.save_plan(plans[name])
                done = self.store.completed_chunks(name, tables[name])
                pending = [c for c in plans[name] if c.index not in done]
                summary.tables.append(TableSummary(name, len(plans[name]), len(pending)))
                work.append((schema, uri, pending))
            total_pending = sum(len(p) for _, _, p in work)
            per_group = self._group_size(total_pending)
            tasks = [GroupTask(self.conn, 0, schema, tuple(g), uri, self.cfg.pipeline.name)
                     for schema, uri, pending in work for g in _groups(pending, per_group)]
            log.info("snapshot: %d tables, %d chunks to read in %d tasks", len(names), total_pending, len(tasks))
            by_table = {s.table: s for s in summary.tables}
            self._execute(tasks, tables, by_table, summary, total_pending)
            for s in summary.tables:
                db, t = s.table.split(".", 1)
                cur.execute(f"SELECT COUNT(*) FROM {quote_ident(db)}.{quote_ident(t)}")
                s.mysql_rows = cur.fetchone()[0]
                tables[s.table].update_incremental()
                s.delta_rows = tables[s.table].to_pyarrow_dataset().count_rows()
        summary.seconds = time.monotonic() - start
        summary.driver_peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return summary

    def _group_size(self, pending: int) -> int:
        slots = self.cfg.pipeline.parallelism
        size = max(1, math.ceil(pending / (slots * TARGET_GROUPS_PER_SLOT)))
        return max(1, min(size, MAX_GROUP_ROWS // self.cfg.source.snapshot.chunk_size))

    def _execute(self, tasks, tables, by_table, summary: SnapshotSummary, total: int) -> None:
        done_chunks = 0
        if self.progress:
            self.progress(0, total, 0)
        pool = ThreadPoolExecutor(self.cfg.pipeline.parallelism, thread_name_prefix="snapshot")
        futures = {pool.submit(self._run_on_spark, t): t for t in tasks}
        try:
            for fut in as_completed(futures):
                task = futures[fut]
                result = fut.result()
                name = task.schema.qualified_name
                self._commit(name, tables[name], task.schema, result)
                s = by_table[name]
                rows = sum(r["rows"] for r in result["records"])
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
        pool.shutdown()

    def _run_on_spark(self, task: GroupTask) -> dict:
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            sid = self.cfg.source.server_id + 1 + slot
            sc = self.spark.sparkContext
            sc.setJobDescription(f"binlake snapshot {task.schema.qualified_name} chunks "
                                 f"{task.chunks[0].index}-{task.chunks[-1].index}")
            bound = GroupTask(task.conn, sid, task.schema, task.chunks, task.uri, task.pipeline)
            return sc.parallelize([bound], 1).map(run_group).collect()[0]
        finally:
            with self._slot_lock:
                self._slots.append(slot)

    def _commit(self, name: str, dt_, schema: TableSchema, result: dict) -> None:
        lock = self._locks.setdefault(name, threading.Lock())
        records = result["records"]
        with lock:
            files = [result["file"]] if result["file"] else []
            version = commit_files(dt_, files, output_schema(schema), {SNAPSHOT_CHUNKS_KEY: records})
        for r in records:
            r["delta_version"] = version
            r["completed_at"] = dt.datetime.fromisoformat(r["completed_at"])
        self.store.record_chunks(records)
