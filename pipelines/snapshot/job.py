"""The snapshot phase: the driver plans chunks, tasks read groups of chunks
(watermarked, lock-free) and write Parquet into each table's folder, and the driver
commits each group's files to Delta together with its chunk records. A task runs as a
one-task Spark job, or (``source.snapshot.runner``: ``local``, and ``auto`` on a
``local[...]`` master) as the same function in a thread of this process, Spark not
started: on one machine Spark brings no cores, only a JVM's start and Python workers
(bench/snapshot.py --whole-process).

Invariants:
- A table's plan is stored before any of its chunks is read and reused on resume,
  so completed and redone chunks always tile the same key space.
- A chunk counts as done only once its rows are in a Delta commit that also carries
  its record; files of an interrupted group are never committed (no duplicates),
  and a re-run reads only chunks without a record. After success a re-run is a no-op.
- Concurrent binlog readers use distinct server ids: ``source.server_id + 1 + slot``.
- Either runner runs the same task function (``run_group``) with the same retries; a
  local attempt that stalls is left behind in its daemon thread (a thread cannot be
  interrupted), its file never committed, as a cancelled Spark task's is not
  (tests/test_snapshot_faults.py and tests/test_types.py run both runners).
- Spark tasks write their Parquet file into the table's folder through
  pipelines/lake/storage.py (a local folder or an object store, ``sink.storage_options``);
  only the driver commits. Before any work the sink must pass
  ``lake_storage.commit_problem``; a local sink whose files the driver cannot see (executors
  on other hosts) stops the run before a commit points at them
  (tests/test_object_store.py runs the snapshot on two workers writing to S3).
- Routed tables (cdc_core/routes.py): each source's chunks are written into its route's
  sink table, shaped as the sink (``_cdc_source`` filled; the sink is first widened to
  hold every source); chunk plans and records stay per source table. Only the driver
  commits, one group at a time, so several sources never race on one Delta table.
- Faults (tests/test_snapshot_faults.py): a group is idempotent until committed, so one hit
  by a transient source fault (cdc_core/retry.py) is read again, with backoff, until
  ``RetryPolicy.budget_seconds`` of failing; then the run stops (exit 1) and a re-run
  resumes. Once the driver gives up, no group starts another attempt. A resumed run groups
  only consecutive pending chunks, so no group spans a chunk committed earlier.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import resource
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from deltalake import CommitProperties, DeltaTable, write_deltalake
from pyspark import SparkContext
from pyspark.sql import SparkSession

from cdc_core.binlog.range_reads import read_statements
from cdc_core.chunks.planning import INTEGER_TYPES, Chunk, chunk_key, plan_chunks
from cdc_core.chunks.reader import ChunkReader, output_schema
from cdc_core.chunks.record import ChunkRecord
from cdc_core.config import BinlakeConfig
from cdc_core.errors import TerminalError, transient_cause
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.retry import Retry, RetryBudgetExceeded, RetryPolicy
from cdc_core.routes import Router, sink_schema
from cdc_core.schema.change import UnparsedDDL, parse_ddl
from cdc_core.schema.history import HistoryEntry, Status
from cdc_core.schema.table import TableSchema, describe_table, quote_ident
from cdc_core.source.capture import captured_schema
from cdc_core.source.connection import (
    ConnectionSettings,
    captured_tables,
    connect,
    connection_settings,
    describe_captured,
)
from pipelines.lake.control_store import ControlStore
from pipelines.lake.delta_sink import (
    SNAPSHOT_CHUNKS_KEY,
    SNAPSHOT_RESET_KEY,
    SNAPSHOT_VERIFIED_KEY,
    SnapshotCommits,
    commit_files,
    count_rows,
    ensure_table,
    open_table,
    snapshot_commits,
    source_predicate,
    table_uri,
    truncate,
    write_parquet,
)
from pipelines.lake.storage import UnsafeSink, is_local, require_safe_commits
from pipelines.pause_points import pause_at
from pipelines.schema.applier import conform_routed, delta_schema, widen_to
from pipelines.spark.session import context_of, get_spark_context, snapshot_on_spark

log = logging.getLogger(__name__)

# Each group is one Spark job of one task, read between one pair of watermarks. Few groups
# per task slot keep the slots busy without paying a job's ~80 ms many times over; the
# row cap (source.snapshot.max_rows_per_task) bounds what a crash makes us read again
# (bench/snapshot.py --profile).
TARGET_GROUPS_PER_SLOT = 2
MAX_PASSES = 5  # a table a DDL changed while it was read is read again, at most this often
MIRROR_BATCH_RECORDS = 256
# On an object store a Delta commit is about 9 requests (list, conditional put, reading it back
# twice): groups finishing within this many seconds of the last commit wait for the next one,
# which holds them all (a local commit costs little and is made at once). A crash re-reads
# what was waiting, as it does a group still running.
OBJECT_STORE_COMMIT_INTERVAL = 1.0


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
    storage_options: tuple[tuple[str, str], ...] = ()  # sink.storage_options: the executor writes there
    base: int = 0  # of the pipeline's positions on the source (after a failover, cdc_core/offset/position.py)


# Per thread: a Spark Python worker runs its tasks one after another in one thread (the cache
# lives across them); a local runner's thread is given its slot's cache.
_worker = threading.local()


def _worker_connections() -> dict[ConnectionSettings, pymysql.connections.Connection]:
    conns = getattr(_worker, "connections", None)
    if conns is None:
        conns = _worker.connections = {}
    return conns


def worker_connection(c: ConnectionSettings) -> pymysql.connections.Connection:
    """A control connection cached in the (reused) Python worker across tasks, one per thread."""
    conns = _worker_connections()
    conn = conns.get(c)
    if conn is not None:
        try:
            conn.ping(reconnect=True)
            return conn
        except pymysql.err.Error:
            conn.close()
    conn = conns[c] = connect(c)
    return conn


def close_connections(conns: dict[ConnectionSettings, pymysql.connections.Connection]) -> None:
    """Close and forget cached control connections (a local runner's, at the end of a pass)."""
    while conns:
        with contextlib.suppress(pymysql.err.Error):
            conns.popitem()[1].close()


def task_fault(e: Exception, c: ConnectionSettings) -> dict:
    """A failed Spark task's answer, so the task itself never fails (no stack traces in the
    user's terminal): ``{"retry": cause}`` for a transient source fault (the driver retries;
    the worker's cached connection to ``c`` is dropped), else ``{"failed": "Type: message",
    "traceback": ...}``."""
    cause = transient_cause(e)
    if cause is None:
        return {"failed": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    stale = _worker_connections().pop(c, None)  # may be half-broken (cut mid-packet): never reused
    if stale is not None:
        with contextlib.suppress(pymysql.err.Error):  # "Already closed" when pymysql closed it itself
            stale.close()
    return {"retry": cause}


def run_group(task: GroupTask) -> dict:
    """Executor side: read the group's consecutive chunks as one range between one pair of
    watermarks, write one Parquet file, and describe it and each chunk for the driver.
    Failures come back as values (:func:`task_fault`)."""
    c = task.conn
    try:
        reader = ChunkReader.bulk(c, worker_connection(c), task.schema, task.server_id, base=task.base)
        result = reader.read(task.schema, Chunk.span(list(task.chunks)))
        table = result.table
        counts = _rows_per_chunk(task.schema, task.chunks, table)
        if task.target is not None:
            table = conform_routed(table, task.schema.qualified_name, task.target)
        written = write_parquet(task.uri, table, dict(task.storage_options)) if table.num_rows else None
    except Exception as e:  # noqa: BLE001 - classified: transient faults are retried, the rest reported
        return task_fault(e, c)
    return {
        "file": written,
        "rows": table.num_rows,
        "records": [ChunkRecord.for_chunk(task.pipeline, ch, n, result.low_watermark, result.high_watermark,
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


class GroupFailed(RuntimeError):
    """A chunk group failed on an executor for a reason retrying cannot fix (the message says which)."""


@dataclass
class TableSummary:
    table: str
    chunks: int
    chunks_read: int = 0
    rows_written: int = 0
    delta_rows: int = 0
    mysql_rows: int = 0
    seconds: float = 0.0
    streamed: bool = False  # the stream owns it (see ``streamed_already``): not read by the snapshot

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
    retries: int = 0  # chunk-group attempts repeated after a transient source fault


def _groups(chunks: list[Chunk], size: int) -> list[list[Chunk]]:
    """Runs of at most ``size`` chunks with consecutive indexes: a group is read as one range
    (``Chunk.span``), so it must never bridge a chunk already committed by an earlier run
    (that chunk's rows would be written twice; tests/test_snapshot_faults.py)."""
    groups: list[list[Chunk]] = []
    for c in chunks:
        if groups and len(groups[-1]) < size and groups[-1][-1].index + 1 == c.index:
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def plan_table(cfg: BinlakeConfig, store: ControlStore, cur, schema: TableSchema, at: BinlogPosition
               ) -> list[Chunk]:
    """Record a table's baseline schema at ``at`` (a binlog position taken before ``schema`` was
    read: a DDL after it is found by the snapshot's check), then plan its chunks and store the
    plan (before any chunk of it is read)."""
    store.record_schema(HistoryEntry(schema.qualified_name, at, 0, "baseline", Status.BASELINE, schema=schema,
                                     description="schema at snapshot start"))
    key = chunk_key(schema, cfg.source.snapshot.chunk_key_columns)
    chunks = plan_chunks(cur, schema, key, cfg.source.snapshot.chunk_size)
    store.save_plan(chunks)
    return chunks


def streamed_already(router: Router, name: str, plans: dict[str, list[Chunk]], table: DeltaTable | None) -> bool:
    """Whether the stream owns ``name``: Delta holds rows of it and no snapshot planned it (it
    was streamed from the stream's first start, from its CREATE TABLE, or backfilled). A
    snapshot would append every row a second time; ``binlake backfill`` re-reads it online."""
    return name not in plans and table is not None and count_rows(table, name if router.routed(name) else None) > 0


def plan_snapshot(cfg: BinlakeConfig, names: list[str]) -> dict[str, list[Chunk]]:
    """The chunk plans of the captured tables ``names``: stored ones as they are, the
    others planned now against the source and stored (none for a table the stream already
    wrote: ``streamed_already``)."""
    store = ControlStore.of(cfg)
    plans = store.load_plans()
    router = Router(cfg.routes)
    missing = [n for n in names if n not in plans and not streamed_already(router, n, plans, open_table(
        table_uri(cfg.sink.path, router.sink(n)), cfg.sink.storage_options))]
    if missing:
        with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
            at = master_position(cur, store.position_base())
            for n, schema in describe_captured(cur, missing, cfg.source).items():
                plans[n] = plan_table(cfg, store, cur, schema, at)
    return {n: plans[n] for n in names if n in plans}


def finished_snapshot(cfg: BinlakeConfig, only: set[str] | None = None) -> SnapshotSummary | None:
    """The summary a snapshot run would print when it has nothing left to do — every captured
    table (of ``only``) planned and verified (a verification is committed only once every
    chunk is, and any later chunk or reset undoes it) — or None when there is work and
    :class:`SnapshotJob` must run. Needs no Spark: a re-run of a
    finished snapshot costs the checks and the row counts only."""
    start = time.monotonic()
    router = Router(cfg.routes)
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        names = [n for n in captured_tables(cfg, cur) if only is None or n in only]
    plans = ControlStore.of(cfg).load_plans()
    tables: dict[str, DeltaTable | None] = {}
    commits: dict[str, SnapshotCommits] = {}
    for name in names:
        sink = router.sink(name)
        if sink not in tables:
            tables[sink] = open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
            if tables[sink] is not None:
                commits[sink] = snapshot_commits(tables[sink])
        if streamed_already(router, name, plans, tables[sink]):
            continue
        if name not in plans or sink not in commits or not commits[sink].is_verified(name):
            return None
    summary = SnapshotSummary([TableSummary(n, len(plans.get(n, ())), streamed=n not in plans) for n in names])
    return _counted(cfg, summary, tables, start, plans)


def _counted(cfg: BinlakeConfig, summary: SnapshotSummary, tables: dict[str, DeltaTable | None], start: float,
             plans: dict[str, list[Chunk]], opened: Callable[[], pymysql.connections.Connection] | None = None
             ) -> SnapshotSummary:
    """``summary`` with each table's rows in MySQL (:func:`_mysql_rows` over its ``plans``) and
    in Delta (``tables``: open sink tables by name, others opened here), its time since
    ``start`` and the driver's peak RSS. ``opened``: how to get a connection (default: one
    plain connect)."""
    router = Router(cfg.routes)
    opened = opened or (lambda: connect(connection_settings(cfg)))
    # New connections: a run's planning one may have been dropped during the reads.
    with opened() as control, control.cursor() as cur:
        existing = set(captured_tables(cfg, cur))
    for s in summary.tables:
        if s.table in existing:  # not dropped meanwhile
            s.mysql_rows = _mysql_rows(opened, s.table, plans.get(s.table, []), cfg.pipeline.parallelism)
        sink = router.sink(s.table)
        dt_ = tables.get(sink) or open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
        s.delta_rows = count_rows(dt_, s.table if router.routed(s.table) else None)
    summary.seconds = time.monotonic() - start
    summary.driver_peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return summary


def _mysql_rows(opened: Callable[[], pymysql.connections.Connection], table: str, chunks: list[Chunk],
                parallelism: int) -> int:
    """Rows of MySQL ``table`` now: a COUNT(*) per span of consecutive ``chunks`` (its plan, which
    covers the whole key space), ``parallelism`` spans at once on connections of their own. A
    single COUNT(*) is one server thread scanning the whole index (5 s for 20M rows of
    bench/snapshot.py's table); a table without a plan is counted whole."""
    db, t = table.split(".", 1)
    sql = f"SELECT COUNT(*) FROM {quote_ident(db)}.{quote_ident(t)} WHERE ".replace("%", "%%")  # pymysql's
    ordered = sorted(chunks, key=lambda c: c.index)
    spans = [Chunk.span(g) for g in _groups(ordered, math.ceil(len(ordered) / parallelism))] if ordered \
        else [Chunk(table, 0, "", None, None)]

    def count(span: Chunk) -> int:
        where, params = span.where()
        with opened() as conn, conn.cursor() as cur:
            cur.execute(sql + where, params)
            return cur.fetchone()[0]

    with ThreadPoolExecutor(len(spans), thread_name_prefix="count") as pool:
        return sum(pool.map(count, spans))


class SnapshotJob:
    """Driver of one snapshot run."""

    group_fn = staticmethod(run_group)  # what reads a group (bench/snapshot.py --profile times it)

    def __init__(self, cfg: BinlakeConfig, spark: SparkSession | SparkContext | None = None, progress=None,
                 only: set[str] | None = None, chunks: set[int] | None = None, on_commit=None,
                 retry: RetryPolicy | None = None):
        self.cfg = cfg
        self.only = only  # restrict to these "db.table" names (Dagster asset subsets)
        self.chunks = chunks  # restrict to these chunk indexes of the planned tables (Dagster partitions)
        self.on_commit = on_commit  # callable(table, chunk records) after each group's Delta commit, or None
        # Where groups run (source.snapshot.runner): Spark tasks (sc set), or threads of this process.
        self.sc: SparkContext | None = None
        if snapshot_on_spark(cfg, spark):  # a session's or a bare context (`binlake snapshot` starts no SQL session)
            self.sc = context_of(spark) if spark is not None else get_spark_context(cfg.spark.master, cfg.spark.conf)
        self.progress = progress  # callable(chunks_done, chunks_total, rows) or None
        self.retry = retry or RetryPolicy()  # transient source faults: backoff, budget, stall timeout
        self.conn = connection_settings(cfg)
        # Executors do not share the driver's working directory: a local sink goes to them absolute.
        self.sink = cfg.sink.path if urlparse(cfg.sink.path).scheme else os.path.abspath(cfg.sink.path)
        self.router = Router(cfg.routes)
        self.store = ControlStore.of(cfg)
        self.base = self.store.position_base()
        # Concurrent groups: the configured parallelism, but no more than Spark has task slots
        # (extra concurrent jobs would only queue inside Spark).
        self.slots = max(1, min(cfg.pipeline.parallelism, self.sc.defaultParallelism if self.sc else math.inf))
        self._slots: list[int] = list(range(self.slots))
        self._slot_lock = threading.Lock()
        self._unmirrored: list[ChunkRecord] = []
        self._retries = 0
        self._abort = threading.Event()  # the driver gave up: no group starts another attempt
        # Snapshot commits of each sink table read so far (by table URI): later reads only read
        # the commits made since.
        self._commits: dict[str, SnapshotCommits] = {}
        # The local runner's cached control connections, per slot (one thread per slot at a time).
        self._slot_connections: dict[int, dict] = {}

    def run(self) -> SnapshotSummary:
        """Snapshot every captured table; resumes where an earlier run stopped."""
        start = time.monotonic()
        summary = SnapshotSummary()
        require_safe_commits(self.cfg.sink.path, self.cfg.sink.storage_options)
        with self._connect() as control, control.cursor() as cur:
            captured = captured_tables(self.cfg, cur)
        names = [n for n in captured if self.only is None or n in self.only]
        plans = self.store.load_plans()
        # Only a table without a plan can be the stream's: planned ones are not opened here.
        streamed = {n for n in names if n not in plans and streamed_already(self.router, n, plans, open_table(
            table_uri(self.sink, self.router.sink(n)), self.cfg.sink.storage_options))}
        for n in sorted(streamed):
            log.warning("snapshot: %s is streamed already (Delta holds its rows, no snapshot planned it): not read "
                        "again; `binlake backfill --table %s` re-reads it online", n, n)
        summary.tables = [TableSummary(n, 0, streamed=n in streamed) for n in names]
        by_table = {s.table: s for s in summary.tables}
        names = [n for n in names if n not in streamed]
        for _ in range(MAX_PASSES):
            tables: dict[str, DeltaTable] = {}
            # A connection per pass and per reset: a fault during the reads may have dropped the last one.
            with self._connect() as control, control.cursor() as cur:
                try:
                    self._pass(cur, captured, names, tables, by_table, summary)
                    failure = None
                except RetryBudgetExceeded:
                    raise  # the source is unreachable: whether a DDL ran cannot be read either
                except Exception as e:  # noqa: BLE001 - a chunk read may fail because a DDL changed its table
                    failure = e
            dirty = self._changed_during_snapshot(names, tables)
            if failure is not None and not dirty:
                raise failure
            if not dirty:
                self._verified(names, tables)
                break
            with self._connect() as control, control.cursor() as cur:
                for name in dirty:
                    self._reset(cur, name, tables, by_table[name])
        else:
            raise TerminalError(f"DDL kept changing {', '.join(sorted(dirty))} while it was being snapshotted "
                                f"({MAX_PASSES} attempts): run the snapshot again when no DDL runs on it")
        # The last pass's handles are current: no need to read their logs again.
        summary = _counted(self.cfg, summary, tables, start, self.store.load_plans(), self._connect)
        summary.retries = self._retries  # also the driver's own reconnects after the reads
        return summary

    def _pass(self, cur, captured: list[str], names: list[str], tables: dict, by_table: dict[str, TableSummary],
              summary: SnapshotSummary) -> None:
        """Plan what has no plan (recording its baseline schema first), then read every chunk
        of ``names`` that has no record."""
        at = master_position(cur, self.base)  # before describing: a DDL after it is found by _changed_during_snapshot
        # A routed sink is shaped by all its sources, also those outside an `only` subset.
        sinks = {self.router.sink(n) for n in names}
        routed = [n for n in captured if self.router.routed(n) and self.router.sink(n) in sinks]
        schemas = describe_captured(cur, sorted({*names, *routed}), self.cfg.source)
        self.router.check(schemas)
        names = [n for n in names if n in schemas]  # a table dropped since it was listed is not read
        plans = self.store.load_plans()
        work: list[tuple] = []
        targets: dict[str, pa.Schema | None] = {}
        for name in names:
            schema = schemas[name]
            sink = self.router.sink(name)
            uri = table_uri(self.sink, sink)
            if sink not in tables:
                tables[sink], targets[sink] = self._open_sink(uri, sink, schemas)
            if name not in plans:
                plans[name] = plan_table(self.cfg, self.store, cur, schema, at)
            done = self.store.completed_in(name, self._commits_of(tables[sink]))
            pending = [c for c in plans[name]
                       if c.index not in done and (self.chunks is None or c.index in self.chunks)]
            by_table[name].chunks = len(plans[name])
            by_table[name].chunks_read += len(pending)
            work.append((schema, uri, pending, targets[sink]))
        total_pending = sum(len(w[2]) for w in work)
        per_group = self._group_size(total_pending)
        task_conn = replace(self.conn, read_timeout=self.retry.read_timeout)  # a stalled read fails, then retries
        options = tuple(sorted(self.cfg.sink.storage_options.items()))
        tasks = [GroupTask(task_conn, 0, schema, tuple(g), uri, self.cfg.pipeline.name, target, options, self.base)
                 for schema, uri, pending, target in work for g in _groups(pending, per_group)]
        log.info("snapshot: %d tables, %d chunks to read in %d tasks", len(names), total_pending, len(tasks))
        self._execute(tasks, tables, by_table, summary, total_pending)

    def _connect(self) -> pymysql.connections.Connection:
        """A driver connection to the source, again with backoff while the source refuses or
        drops it (a restarting server) until the retry budget is spent."""
        retry = Retry(self.retry)
        while True:
            try:
                return connect(self.conn)
            except Exception as e:
                cause = transient_cause(e)
                if cause is None:
                    raise
                self._back_off(retry, "snapshot: connecting to the source", cause)

    def _changed_during_snapshot(self, names: list[str], tables: dict) -> set[str]:
        """Tables a statement changed between their baseline and their last chunk's high
        watermark: their chunks do not all hold the same columns (or rows a TRUNCATE removed)."""
        baselines = {}
        for e in self.store.schema_history():
            if e.status == Status.BASELINE and e.table in names:
                baselines[e.table] = e.position  # the last one: history is in binlog order
        with self._connect() as c, c.cursor() as cur:
            end = master_position(cur, self.base)
        windows = {}
        plans = self.store.load_plans()
        for name in names:
            commits = self._commits_of(tables.get(self.router.sink(name)))
            if commits is not None and commits.is_verified(name):
                continue
            done = self.store.completed_in(name, commits) if commits is not None else {}
            hws = [r.high_watermark for r in done.values()]
            plan_done = done and len(done) == len(plans.get(name, ()))
            if name in baselines:
                windows[name] = (baselines[name], max(hws) if plan_done else end)
        if not windows:
            return set()
        dirty = set()
        server_id = self.cfg.source.server_id + 1 + self.slots  # the chunk readers use +1 … +slots
        for st in read_statements(self.conn, server_id, min(w[0] for w in windows.values()),
                                  max(w[1] for w in windows.values())):
            for name in _changed_tables(st):
                w = windows.get(name)
                if w is not None and w[0] < st.position <= w[1]:
                    log.warning("snapshot: %s changed at %s while it was being read (%s): reading it again",
                                name, st.position, st.sql)
                    dirty.add(name)
        return dirty

    def _verified(self, names: list[str], tables: dict) -> None:
        """Mark complete, checked tables verified (a no-op re-run need not read their binlog again)."""
        plans = self.store.load_plans()
        by_sink: dict[str, list[str]] = {}
        for name in names:
            commits = self._commits_of(tables.get(self.router.sink(name)))
            if commits is None or commits.is_verified(name):
                continue
            if len(self.store.completed_in(name, commits)) == len(plans.get(name, ())):
                by_sink.setdefault(self.router.sink(name), []).append(name)
        for sink, sources in by_sink.items():
            dt_ = tables[sink]
            commit_files(dt_, [], delta_schema(dt_), {SNAPSHOT_VERIFIED_KEY: sources})

    def _commits_of(self, table: DeltaTable | None) -> SnapshotCommits | None:
        """The snapshot commits of a sink table (None for no table)."""
        if table is None:
            return None
        commits = self._commits[table.table_uri] = snapshot_commits(table, self._commits.get(table.table_uri))
        return commits

    def _reset(self, cur, name: str, tables: dict, summary: TableSummary) -> None:
        """Forget ``name``'s chunks and rows, record its new baseline and plan it again."""
        sink = self.router.sink(name)
        dt_ = tables[sink]
        at = master_position(cur, self.base)
        try:
            schema = captured_schema(describe_table(cur, *name.split(".", 1)), self.cfg.source)
        except LookupError:
            log.warning("snapshot: %s was dropped while it was being read; the stream records its drop", name)
            return
        props = CommitProperties(custom_metadata={SNAPSHOT_RESET_KEY: json.dumps([name])})
        if self.router.routed(name):
            truncate(dt_, props, source_predicate(name))
        else:
            write_deltalake(dt_, output_schema(schema).empty_table(), mode="overwrite", schema_mode="overwrite",
                            commit_properties=props)
        plan_table(self.cfg, self.store, cur, schema, at)  # a new baseline and plan: the table is read again
        summary.rows_written = 0

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
        self._abort.clear()  # a new pass after one that failed (a DDL changed a table while it was read)
        pool = ThreadPoolExecutor(self.slots, thread_name_prefix="snapshot")
        futures = {pool.submit(self._run_group, t): t for t in tasks}
        running = set(futures)
        interval = 0.0 if is_local(self.sink) else OBJECT_STORE_COMMIT_INTERVAL
        held: list[Future] = []  # finished groups waiting for the next commit
        last_commit = -math.inf
        try:
            while running:
                wait_for = max(0.0, last_commit + interval - time.monotonic()) if held else None
                finished, running = wait(running, timeout=wait_for, return_when=FIRST_COMPLETED)
                held.extend(finished)
                failed = any(f.exception() is not None for f in finished)
                if not held or (running and not failed and time.monotonic() - last_commit < interval):
                    continue
                batch, held, last_commit = held, [], time.monotonic()
                # Groups that finished together (or within the interval) go into one commit per
                # sink table; a failed one is raised after the others are committed.
                ready: dict[str, list[tuple[GroupTask, dict]]] = {}
                failure = None
                for fut in batch:
                    task = futures[fut]
                    try:
                        result = fut.result()
                    except BaseException as e:  # noqa: BLE001 - raised below, once the others are committed
                        failure = failure or e
                        continue
                    ready.setdefault(self.router.sink(task.schema.qualified_name), []).append((task, result))
                for sink, group in ready.items():
                    first = group[0][0]
                    records = iter(self._commit(tables[sink], first.target or output_schema(first.schema),
                                                [result for _, result in group]))
                    for task, result in group:
                        name = task.schema.qualified_name
                        if self.on_commit:
                            self.on_commit(name, [next(records) for _ in result["records"]])
                        by_table[name].rows_written += result["rows"]
                        summary.rows_read += result["rows"]
                        summary.task_peak_rss_mb = max(summary.task_peak_rss_mb, result["task_peak_rss_mb"])
                        done_chunks += len(task.chunks)
                if failure is not None:
                    raise failure
                if self.progress:
                    self.progress(done_chunks, total, summary.rows_read)
        except BaseException:
            # Interrupted or failed: queued groups must not run, and running ones must not start
            # another attempt (their rows would never be committed).
            self._abort.set()
            pool.shutdown(wait=False, cancel_futures=True)
            if self.sc is not None:
                self.sc.cancelAllJobs()
            pool.shutdown(wait=True)  # running groups end with their cancelled jobs: their slots are free again
            raise
        finally:
            self._flush_mirror()
            summary.retries = self._retries
            for conns in self._slot_connections.values():
                close_connections(conns)
        pool.shutdown()

    def _run_group(self, task: GroupTask) -> dict:
        """Run one group (a Spark job, or a thread here), again with backoff after a transient source fault (a group
        is idempotent until the driver commits it) until the retry budget is spent."""
        what = f"{task.schema.qualified_name} chunks {task.chunks[0].index}-{task.chunks[-1].index}"
        retry = Retry(self.retry)
        while True:
            if self._abort.is_set():
                return {"retry": "the snapshot was stopped"}  # never committed: the driver has left
            result = self._attempt(task, what)
            if "failed" in result:
                log.debug("snapshot of %s failed on the executor:\n%s", what, result["traceback"])
                raise GroupFailed(f"snapshot of {what}: {result['failed']}")
            cause = result.get("retry")
            if cause is None:
                return result
            self._back_off(retry, f"snapshot of {what}", cause, wait=self._abort.wait)  # the loop checks _abort

    def _back_off(self, retry: Retry, what: str, cause: str, wait: Callable[[float], object] = time.sleep) -> None:
        """``wait`` before the next attempt at ``what`` after a transient ``cause`` (counted as a
        retry); raise :class:`RetryBudgetExceeded` once the fault outlasted the budget."""
        delay = retry.next_delay()
        if delay is None:
            raise RetryBudgetExceeded(f"{what}: the source kept failing for over {self.retry.budget_seconds:.0f} s "
                                      f"({retry.attempt + 1} attempts): {cause}")
        log.warning("%s: %s; again in %.1f s", what, cause, delay)
        with self._slot_lock:
            self._retries += 1
        wait(delay)

    def _attempt(self, task: GroupTask, what: str) -> dict:
        """One attempt at the group, with a server id of its own (a free slot's)."""
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            bound = replace(task, server_id=self.cfg.source.server_id + 1 + slot)
            return self._on_spark(bound, what) if self.sc is not None else self._here(bound, slot)
        finally:
            with self._slot_lock:
                self._slots.append(slot)

    def _on_spark(self, task: GroupTask, what: str) -> dict:
        """The group as a one-task Spark job, cancelled as stalled after ``retry.stall_seconds``."""
        sc = self.sc
        group = f"binlake-{uuid.uuid4().hex}"
        stalled = threading.Event()

        def cancel() -> None:
            stalled.set()
            sc.cancelJobGroup(group)

        timer = threading.Timer(self.retry.stall_seconds, cancel)
        try:
            sc.setJobGroup(group, f"binlake snapshot {what}", interruptOnCancel=True)
            timer.start()
            return sc.parallelize([task], 1).map(self.group_fn).collect()[0]
        except Exception:
            if stalled.is_set():
                return {"retry": f"no answer from the source for {self.retry.stall_seconds:.0f} s (stalled read)"}
            raise
        finally:
            timer.cancel()

    def _here(self, task: GroupTask, slot: int) -> dict:
        """The group in a thread of this process (the local runner). A read blocked in the
        source's client cannot be interrupted from outside: after ``retry.stall_seconds`` (or
        when the driver gives up) the attempt is left behind in its daemon thread, its file is
        never committed, and the group is read again."""
        answer: list = []
        fn = self.group_fn
        conns = self._slot_connections.setdefault(slot, {})

        def work() -> None:
            _worker.connections = conns
            try:
                answer.append(fn(task))
            except BaseException as e:  # noqa: BLE001 - raised again on the driver's side below
                answer.append(e)

        thread = threading.Thread(target=work, name="snapshot-group", daemon=True)
        thread.start()
        deadline = time.monotonic() + self.retry.stall_seconds
        while thread.is_alive():
            left = deadline - time.monotonic()
            if self._abort.is_set() or left <= 0:
                self._slot_connections.pop(slot, None)  # the thread left behind keeps its connection
                if self._abort.is_set():
                    return {"retry": "the snapshot was stopped"}
                return {"retry": f"no answer from the source for {self.retry.stall_seconds:.0f} s (stalled read)"}
            thread.join(min(left, 0.2))
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]

    def _commit(self, table, schema: pa.Schema, results: list[dict]) -> list[ChunkRecord]:
        """Commit the files of groups of one sink table with their chunk records, in one commit;
        returns the records as committed, in the groups' order."""
        # Called on the driver's main thread only: commits never race each other (also
        # those of several routed sources into one sink table).
        records = [r for result in results for r in result["records"]]
        files = [result["file"] for result in results if result["file"]]
        folder = unquote(urlparse(table.table_uri).path)
        missing = [f for f in files if is_local(self.sink) and not os.path.exists(os.path.join(folder, f.path))]
        if missing:
            # Written on another host: a commit would point the table at a file it cannot read.
            raise UnsafeSink(f"sink.path {self.cfg.sink.path} is a local folder the Spark executors do not share "
                             f"with the driver ({missing[0].path} written by an executor is missing here); use an "
                             "object-store URI, or a folder mounted at the same path on every host")
        version = commit_files(table, files, schema, {SNAPSHOT_CHUNKS_KEY: [r.to_json_row() for r in records]})
        records = [replace(r, delta_version=version) for r in records]
        pause_at("snapshot_chunk_committed")
        # The data commit already holds these records; the mirror table is appended in
        # batches (recovery unites both, see pipelines/lake/control_store.py).
        self._unmirrored.extend(records)
        if len(self._unmirrored) >= MIRROR_BATCH_RECORDS:
            self._flush_mirror()
        return records

    def _flush_mirror(self) -> None:
        if self._unmirrored:
            self.store.record_chunks(self._unmirrored)
            self._unmirrored = []


def _changed_tables(st) -> set[str]:
    """Tables whose columns or rows a statement changes (an index does not)."""
    try:
        changes = parse_ddl(st.sql, st.database)
    except UnparsedDDL as e:
        return set(e.tables)
    return {c.table for c in changes} | {c.new_name for c in changes if c.new_name}
