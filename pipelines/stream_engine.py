"""The stream engine: one binlog reader process → bounded queue → micro-batches →
per-table Delta commits (in parallel) → pipeline checkpoint.

Invariants (tests/test_stream*.py):
- Exactly once: every table commit carries its offset atomically (Delta transaction
  identifier + commit metadata); a restart skips row events at or before the
  checkpoint and, per table, at or before that table's own committed offset
  (cdc_core/offsets.py). The start position is checkpointed before the first table
  commit. A SIGKILL at any instant loses and repeats nothing.
- Ordered commit: the checkpoint is written only after every table of the batch is
  committed, and batches are applied one after another, so the checkpoint never
  passes a change that is not durable; a key's changes keep binlog order.
- Hand-off: until the stream passes a table's highest chunk high watermark, a
  change on key k is dropped when it is at or before the high watermark of k's chunk.
- Batches are cut at ``max_batch_rows`` / ``max_batch_seconds`` (and a byte bound),
  at DDL and TRUNCATE, before a stop, and before a reconnect; a batch never splits a
  row event. Heartbeats advance the checkpoint when only other tables change.
- Transient faults (connection loss, server restart) commit what was read and
  reconnect from the checkpoint with backoff; a purged position or a server_id in
  use stops the engine with an error saying what to do.
- Schema changes (pause/flush/apply/resume): everything before a DDL is committed
  before it takes effect. Inline, the change is applied before the next event is read.
  With ``stream.schema_changes: external`` the change is recorded pending and the
  table is held: its later rows wait in memory (other tables keep flowing) until the
  schema history shows the change resolved; past ``max_held_rows`` held rows reading
  pauses. While a table is held the pipeline checkpoint stays at the offset before
  its DDL (other tables' own offsets skip what they already have), so a crash or
  reconnect re-reads the DDL and the held rows; nothing held is ever lost.
- Routes (cdc_core/routes.py): tables, offsets and the per-table skip filter are per
  Delta (sink) table; the sources of one route that change in a batch are applied to
  their sink in one commit (one MERGE on ``(_cdc_source, key)``). Schemas, schema
  history and hand-off filters stay per source table.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue as queue_mod
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdc_core.chunk_reader import output_schema
from cdc_core.config import BinlakeConfig
from cdc_core.handoff import HandoffFilter
from cdc_core.lifecycle import Lifecycle, State
from cdc_core.offsets import SkipFilter, StreamOffset
from cdc_core.positions import BinlogPosition, master_position
from cdc_core.routes import RouteError, Router, sink_key, sink_schema
from cdc_core.schema_change import SchemaChange, UnparsedDDL, evolve_schema, parse_ddl
from cdc_core.source import captured_tables, connect, connection_settings
from cdc_core.startup import (
    PositionPurged,
    ServerIdInUse,
    StartupError,
    check_available,
    check_server_id,
    earliest_position,
    scan_for_start,
)
from cdc_core.stream_reader import QUEUE_ITEMS, ReaderSpec, run_reader
from cdc_core.table_batch import TableBatch, plan_to_arrow
from cdc_core.table_commit import TableCommit  # [dagster hook]
from cdc_core.table_schema import TableSchema, describe_table
from pipelines.control_store import ControlStore
from pipelines.delta_sink import (
    applied_position_key,
    apply_changes,
    count_rows,
    ensure_table,
    open_table,
    source_predicate,
    stream_commit_properties,
    table_uri,
    truncate,
)
from pipelines.schema_applier import SchemaChangeRejected, conform, conform_routed, delta_schema, widen_to
from pipelines.schema_registry import PendingChange, apply_pending, resolutions

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 64 << 20
RETRY_DELAYS = (0.5, 1, 2, 4, 8, 15, 30)
RETRY_FOR_SECONDS = 300.0  # give up on a transient fault that lasts longer than this
HOLD_POLL_SECONDS = 0.5  # how often a held table's change is looked up in the schema history


class StreamFailed(RuntimeError):
    """The stream stopped on an error that retrying cannot fix."""


@dataclass
class StreamSummary:
    """What one engine run did."""

    start: BinlogPosition | None = None
    end: BinlogPosition | None = None
    changes: int = 0  # row changes read (after skip and hand-off filtering)
    batches: int = 0
    commits: int = 0
    reconnects: int = 0
    seconds: float = 0.0
    stop_reason: str = ""
    tables: dict[str, int] = field(default_factory=dict)  # changes per table
    held_rows_peak: int = 0  # most rows of held tables kept in memory at once (external schema changes)


@dataclass
class _Batch:
    tables: dict[str, TableBatch] = field(default_factory=dict)
    rows: int = 0
    bytes: int = 0
    opened: float = 0.0  # monotonic time of the first row


@dataclass
class _Hold:
    """A table waiting for its pending schema change to be applied by another process."""

    pending: PendingChange
    before: TableSchema  # the source schema before the DDL (restored when the DDL is read again)
    checkpoint: StreamOffset  # the pipeline offset before the DDL: the checkpoint stays here
    batch: _Batch = field(default_factory=_Batch)  # the table's rows after the DDL


class StreamEngine:
    """Streams the binlog into Delta from the committed offsets (see module invariants)."""

    def __init__(self, cfg: BinlakeConfig, *, until_now: bool = False, max_seconds: float | None = None,
                 progress=None, on_commit=None):
        self.cfg = cfg
        self.until_now = until_now
        self.max_seconds = max_seconds
        self.progress = progress  # callable(StreamSummary, StreamOffset) after each commit, or None
        self.on_commit = on_commit  # [dagster hook] callable(list[TableCommit]) after each batch's checkpoint, or None
        self.conn = connection_settings(cfg)
        self.store = ControlStore.of(cfg)
        self.router = Router(cfg.routes)  # source table → Delta (sink) table
        self.life = Lifecycle()
        self.summary = StreamSummary()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="apply")
        self._reader = None
        self._queue = None
        self.offset: StreamOffset | None = None  # the last checkpointed offset
        self.holds: dict[str, _Hold] = {}  # by Delta (sink) table
        self._polled = 0.0

    # --- set-up -------------------------------------------------------------------------

    def _prepare(self, cur) -> None:
        names = captured_tables(self.cfg, cur)
        self.schemas: dict[str, TableSchema] = {n: describe_table(cur, *n.split(".", 1)) for n in names}
        keyless = [n for n, s in self.schemas.items() if not s.primary_key]
        if keyless:
            raise StartupError(f"tables without a primary key cannot be streamed (updates and deletes need a key): "
                               f"{', '.join(keyless)}; add a primary key or exclude them (source.exclude_tables)")
        try:
            self.router.check(self.schemas)
        except RouteError as e:
            raise StartupError(str(e)) from None
        # By Delta table name (a routed table's sink); opened once the schema history says what is captured.
        self.tables: dict[str, DeltaTable] = {}
        self.sink_schemas: dict[str, pa.Schema] = {}
        self.filters: dict[str, HandoffFilter] = {}
        self.low_watermark: BinlogPosition | None = None
        plans = self.store.load_plans()
        for n in names:
            if n not in plans:
                continue
            done = self.store.completed_chunks(n, open_table(table_uri(self.cfg.sink.path, self.router.sink(n)),
                                                             self.cfg.sink.storage_options))
            missing = [c.index for c in plans[n] if c.index not in done]
            if missing:
                raise StartupError(f"the snapshot of {n} is not complete ({len(missing)} of {len(plans[n])} chunks "
                                   "to go): run `binlake snapshot` (or `binlake run`) first")
            self.filters[n] = HandoffFilter(plans[n], {i: BinlogPosition(r["hw_file"], r["hw_pos"])
                                                       for i, r in done.items()})
            lws = [BinlogPosition(r["lw_file"], r["lw_pos"]) for r in done.values()]
            self.low_watermark = min([self.low_watermark, *lws] if self.low_watermark else lws)

    def _start_position(self, cur) -> tuple[BinlogPosition, BinlogPosition | None]:
        """Where reading starts and what was applied already (checkpoint), per the startup mode."""
        cp = self.store.checkpoint()
        if cp is not None:
            return cp.offset.resume, cp.offset.applied
        startup = self.cfg.source.startup
        mode = startup.mode
        if mode in ("initial", "snapshot"):
            unsnapped = [n for n in self.schemas if n not in self.filters]
            if unsnapped:
                raise StartupError(f"no snapshot of {', '.join(unsnapped)}: run `binlake snapshot` (or `binlake run`) "
                                   "before streaming with startup.mode " + mode)
            return (self.low_watermark or master_position(cur)), None
        if mode == "latest":
            return master_position(cur), None
        if mode == "earliest":
            return earliest_position(cur), None
        if mode == "specific" and startup.gtid:
            return scan_for_start(self.conn, self.cfg.source.server_id, cur, gtid=startup.gtid), None
        if mode == "specific":
            if not startup.file or startup.pos is None:
                raise StartupError("source.startup.mode specific needs file and pos (or gtid)")
            return BinlogPosition(startup.file, startup.pos), None
        if startup.timestamp_ms is None:
            raise StartupError("source.startup.mode timestamp needs timestamp_ms")
        return scan_for_start(self.conn, self.cfg.source.server_id, cur, timestamp_ms=startup.timestamp_ms), None

    def _load_history(self, start: BinlogPosition, applied: BinlogPosition | None) -> None:
        """The source schema in force at the restart point, from the schema history (a
        table without history gets its current schema as a baseline)."""
        upto = applied or start
        self.history_keys: set[tuple] = set()
        for r in self.store.schema_history():
            pos = BinlogPosition(r["file"], r["pos"])
            self.history_keys.add((r["table"], r["file"], r["pos"], r["change_index"], r["status"]))
            if pos > upto:
                continue
            if r["status"] == "recorded":  # dropped, renamed away, or waiting for a backfill: not streamed
                self.schemas.pop(r["table"], None)
            elif r["status"] in ("baseline", "applied", "skipped") and r["schema_json"]:
                self.schemas[r["table"]] = TableSchema.from_json(r["schema_json"])
        known = {k[0] for k in self.history_keys}
        for n, schema in list(self.schemas.items()):
            if n in known:
                continue
            if applied is None:  # the stream's first start: every captured table begins here
                self._record(n, start, 0, "baseline", "baseline", schema=schema, description="schema at stream start")
            else:  # appeared while the stream was stopped, with whatever rows it has: never half-capture it
                del self.schemas[n]
                self._record(n, start, 0, "appeared", "recorded", description="table appeared while stopped",
                             detail="entered the capture list with existing rows: needs a backfill (not streamed)")
        for n, schema in self.schemas.items():
            self._open_sink(n, schema)

    def _open_sink(self, name: str, schema: TableSchema) -> DeltaTable:
        """The table's Delta table (created empty with ``schema`` if missing), with its schema noted."""
        if self.router.routed(name):
            return self._open_routed(name, schema)
        dt = self.tables[name] = ensure_table(table_uri(self.cfg.sink.path, name), output_schema(schema),
                                              self.cfg.sink.storage_options)
        self.sink_schemas[name] = delta_schema(dt)
        return dt

    def _open_routed(self, name: str, schema: TableSchema) -> DeltaTable:
        """A routed table's shared sink, created with the widest schema of its captured sources."""
        sink = self.router.sink(name)
        dt = self.tables.get(sink)
        if dt is None:
            members = [self.schemas[n] for n in self.router.sources(sink, self.schemas)] or [schema]
            dt = self.tables[sink] = ensure_table(table_uri(self.cfg.sink.path, sink),
                                                  sink_schema(members, sink=sink), self.cfg.sink.storage_options)
            self.sink_schemas[sink] = delta_schema(dt)
        return dt

    def _record(self, table: str, pos: BinlogPosition, index: int, kind: str, status: str, *,
                schema: TableSchema | None = None, description: str = "", ddl: str = "", detail: str = "",
                held_ms: float | None = None) -> None:
        key = (table, pos.file, pos.pos, index, status)
        if key in self.history_keys:
            return  # recorded before a restart
        self.history_keys.add(key)
        self.store.record_schema(table, pos, index, kind, status=status, description=description, ddl=ddl,
                                 schema_json=schema.to_json() if schema else None, detail=detail, held_ms=held_ms)

    def _skip_filter(self, checkpoint: BinlogPosition | None) -> SkipFilter:
        per_table = {}
        for n, t in self.tables.items():
            t.update_incremental()
            key = applied_position_key(t, self.cfg.pipeline.name)
            if key is not None:
                per_table[n] = key
        return SkipFilter(checkpoint, per_table)

    # --- reader process -------------------------------------------------------------------

    def _start_reader(self, start: BinlogPosition, skip_through: BinlogPosition | None) -> None:
        # fork, not spawn: spawn re-imports the caller's __main__ (a script, Dagster, pytest),
        # and the reader needs nothing the parent's threads could hold (it only opens sockets).
        ctx = multiprocessing.get_context("fork")
        self._queue = ctx.Queue(maxsize=QUEUE_ITEMS)
        spec = ReaderSpec(self.conn, self.cfg.source.server_id, start, skip_through, self.until,
                          tuple(self.cfg.source.tables), tuple(self.cfg.source.exclude_tables),
                          report_as=f"binlake:{self.cfg.pipeline.name}")
        self._reader = ctx.Process(target=run_reader, args=(spec, self._queue, os.getpid()), name="binlake-reader",
                                   daemon=True)
        self._reader.start()

    def _stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.terminate()
            self._reader.join(10)
            if self._reader.is_alive():
                self._reader.kill()
                self._reader.join()
            self._queue.close()
            self._queue.cancel_join_thread()
            self._reader = None

    # --- main loop ------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the engine to commit what it has read and stop (thread- and signal-safe)."""
        self._stop.set()

    def run(self) -> StreamSummary:
        """Stream until ``--until now``'s end, ``max_seconds``, a stop request or a fatal error."""
        started = time.monotonic()
        handlers = self._install_signals()
        self.life.to(State.STARTING)
        try:
            with connect(self.conn) as control, control.cursor() as cur:
                self._prepare(cur)
                start, applied = self._start_position(cur)
                self.until = master_position(cur) if self.until_now else None
                if self.cfg.source.startup.mode == "snapshot" and self.filters:
                    hw = max(f.max_high_watermark for f in self.filters.values())
                    self.until = hw if self.until is None else min(self.until, hw)
                check_available(cur, start)
                check_server_id(cur, self.cfg.source.server_id)
            self.summary.start = start
            self._load_history(start, applied)
            self.skip = self._skip_filter(applied)
            self.resume, self.position = start, applied or start
            self.offset = StreamOffset(start, applied or start)
            if applied is None:
                # The start point is durable before any table commit: a crash between the first
                # table commits and the first checkpoint must resume here, not at a new "latest".
                self.store.save_checkpoint(self.offset, self.life.state, 0)
            self._loop(start, applied)
            self.life.to(State.STOPPING)
            self.life.to(State.STOPPED)
            self.store.save_checkpoint(self.offset, State.STOPPED, self.summary.changes)
        except BaseException:
            if self.life.state not in (State.STOPPED, State.FAILED):
                self.life.to(State.FAILED)
            raise
        finally:
            self._stop_reader()
            self._pool.shutdown()
            self._restore_signals(handlers)
            self.summary.seconds = time.monotonic() - started
            self.summary.end = self.offset.applied if self.offset else None
        return self.summary

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return None
        return {s: signal.signal(s, lambda *_: self.request_stop()) for s in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signals(handlers) -> None:
        for s, h in (handlers or {}).items():
            signal.signal(s, h)

    def _loop(self, start: BinlogPosition, applied: BinlogPosition | None) -> None:
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        self.batch = _Batch()
        self.gtid, self.event_time = None, 0
        self._start_reader(start, applied)
        self.life.to(State.STREAMING)
        last_checkpoint = time.monotonic()
        failing_since = None
        attempt = 0
        ended = False  # the reader reached --until now's end
        while True:
            if self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                self._commit()
                self.summary.stop_reason = "stop requested" if self._stop.is_set() else "max-seconds reached"
                return
            self._poll_holds()
            if ended and not self.holds:
                self._commit()
                self.summary.stop_reason = f"reached {self.until}"
                return
            items = []
            if ended or self._held_rows() >= self.cfg.stream.max_held_rows:
                self._stop.wait(0.05)  # the reader blocks on the full queue: memory stays bounded
            else:
                try:
                    items = self._queue.get(timeout=0.05)
                except queue_mod.Empty:
                    if not self._reader.is_alive():
                        items = [("error", "transient", f"reader process exited with code {self._reader.exitcode}")]
            for item in items:
                kind = item[0]
                if kind == "rows":
                    self._on_rows(item)
                elif kind == "txn":
                    _, file, pos, gtid, ts = item
                    self.position = self.resume = BinlogPosition(file, pos)
                    self.gtid, self.event_time = gtid or self.gtid, ts or self.event_time
                elif kind == "beat":
                    if self.resume == self.position:  # between transactions: everything up to here is read
                        self.position = self.resume = max(self.position, BinlogPosition(item[1], item[2]))
                elif kind == "query":
                    if not self._on_query(item):
                        break  # stopping while waiting for a held table: the statement is read again
                elif kind == "end":
                    ended = True  # done once every held table is released
                else:  # error
                    _, what, message = item
                    self._commit()
                    self._stop_reader()
                    if what == "purged":
                        raise PositionPurged(f"reading the binlog failed: {message}. Re-snapshot: delete the sink "
                                             "folder (or use a new pipeline.name) and run `binlake run` again")
                    if what == "server_id":
                        raise ServerIdInUse(f"source.server_id {self.cfg.source.server_id} is in use by another "
                                            f"replica, which took over the binlog connection ({message}); give each "
                                            "pipeline and replica its own server_id")
                    if what != "transient":
                        raise StreamFailed(f"reading the binlog failed: {message}")
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since > RETRY_FOR_SECONDS:
                        raise StreamFailed(f"the source has been unreachable for over {RETRY_FOR_SECONDS:.0f} s: "
                                           f"{message}")
                    delay = RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)]
                    log.warning("binlog connection lost (%s); reconnecting from %s in %.1f s",
                                message, self.offset.resume, delay)
                    attempt += 1
                    self.summary.reconnects += 1
                    self.life.to(State.STARTING)
                    if self._stop.wait(delay):
                        return
                    self._drop_holds()  # their DDLs and rows are read again from the checkpoint
                    self.skip = self._skip_filter(self.offset.applied)
                    self.resume, self.position = self.offset.resume, self.offset.applied
                    self._start_reader(self.offset.resume, self.offset.applied)
                    self.life.to(State.STREAMING)
                    break
            b = self.batch
            now = time.monotonic()
            if b.rows and (b.rows >= self.cfg.stream.max_batch_rows or b.bytes >= MAX_BATCH_BYTES
                           or now - b.opened >= self.cfg.stream.max_batch_seconds):
                self._commit()
                last_checkpoint, failing_since, attempt = now, None, 0
            elif now - last_checkpoint >= self.cfg.stream.heartbeat_seconds and self.position > self.offset.applied:
                self._commit()  # nothing captured changed: move the restart point anyway
                last_checkpoint = now

    def _on_rows(self, item) -> None:
        _, db, table, op, file, pos, columns, rows, ts, size = item
        name = f"{db}.{table}"
        p = BinlogPosition(file, pos)
        self.position, self.event_time = p, ts or self.event_time
        if name not in self.schemas or self.skip.applied(self.router.sink(name), p):
            return
        hold = self.holds.get(self.router.sink(name)) if self.holds else None
        b = hold.batch if hold else self.batch
        tb = b.tables.get(name)
        if tb is None:
            f = self.filters.get(name)
            if f is not None and p > f.max_high_watermark:
                del self.filters[name]  # past the hand-off: no more filtering for this table
                f = None
            tb = b.tables[name] = TableBatch(self.schemas[name], f.should_drop if f else None,
                                             f.chunks[0].key if f else None)
        tb.add_event(op, columns, rows, p)
        if not b.rows:
            b.opened = time.monotonic()
        b.rows += len(rows)
        b.bytes += size
        if hold:
            self.summary.held_rows_peak = max(self.summary.held_rows_peak, self._held_rows())

    # --- held tables (stream.schema_changes: external) ---------------------------------------

    def _held_rows(self) -> int:
        return sum(h.batch.rows for h in self.holds.values())

    def _poll_holds(self, force: bool = False) -> None:
        """Release every held table whose change the schema history shows resolved."""
        now = time.monotonic()
        if not self.holds or (not force and now - self._polled < HOLD_POLL_SECONDS):
            return
        self._polled = now
        resolved = resolutions(self.store)
        for sink, hold in list(self.holds.items()):
            name = hold.pending.table
            r = resolved.get(hold.pending.key)
            if r is None:
                continue
            if r["status"] == "failed":
                raise SchemaChangeRejected(f"the schema change of {name} at {hold.pending.position} failed: "
                                           f"{r['detail']} (DDL: {hold.pending.ddl})")
            del self.holds[sink]
            table = self.tables[sink]
            table.update_incremental()  # the change was committed by another process
            self.sink_schemas[sink] = delta_schema(table)
            if hold.batch.rows:  # none of the sink's sources is in the open batch: their rows all went to the hold
                b = self.batch
                b.tables.update(hold.batch.tables)
                b.opened = min(b.opened, hold.batch.opened) if b.rows else hold.batch.opened
                b.rows += hold.batch.rows
                b.bytes += hold.batch.bytes
            log.info("%s released: %s %s (%s)", name, hold.pending.description, r["status"], r["detail"])

    def _drop_holds(self) -> None:
        """Forget held rows before reading again from the checkpoint, which is before their DDLs."""
        for hold in self.holds.values():
            self.schemas[hold.pending.table] = hold.before
        self.holds.clear()

    def _wait_for_holds(self, names: list[str]) -> bool:
        """Block until none of ``names`` is held; False if a stop was requested meanwhile."""
        while any(self.router.sink(n) in self.holds for n in names):
            if self._stop.wait(HOLD_POLL_SECONDS / 5):
                return False
            self._poll_holds(force=True)
            if self.batch.rows and time.monotonic() - self.batch.opened >= self.cfg.stream.max_batch_seconds:
                self._commit()  # other tables' rows read so far keep flowing
        return True

    # --- DDL ----------------------------------------------------------------------------------

    def _on_query(self, item) -> bool:
        """Handle a DDL statement; False when a stop was requested before it could be handled."""
        _, db, sql, file, pos, gtid, ts = item
        seen = time.monotonic()
        p = BinlogPosition(file, pos)
        behavior = self.cfg.pipeline.schema_change_behavior
        unparsed = None
        try:
            changes = parse_ddl(sql, db)
        except UnparsedDDL as e:
            changes, unparsed = [], e
        touched = [c.table for c in changes] + [c.new_name for c in changes if c.new_name] + list(
            unparsed.tables if unparsed else ())
        if not self._wait_for_holds(touched):  # a table's changes stay in binlog order
            return False
        self._commit()  # everything before the statement is durable before it takes effect
        self.position = self.resume = p
        self.gtid, self.event_time = gtid or self.gtid, ts or self.event_time
        offset = StreamOffset(p, p, self.gtid, self.event_time)
        if unparsed is not None:
            e = unparsed
            touched = [n for n in e.tables if n in self.schemas]
            if touched or not e.tables:
                for n in touched or ["?"]:
                    self._record(n, p, 0, "unparsed", "unparsed", ddl=sql, detail=str(e))
                if behavior == "exception" and touched:
                    raise SchemaChangeRejected(f"schema_change_behavior is exception and a DDL on {', '.join(touched)} "
                                               f"at {p} cannot be parsed: {sql}") from None
                log.warning("DDL at %s not understood, recorded in the schema history: %s", p, e)
        for i, change in enumerate(changes):
            self._schema_change(change, i, p, sql, offset, seen)
        self._checkpoint(offset)
        return True

    def _schema_change(self, c: SchemaChange, index: int, p: BinlogPosition, sql: str, offset: StreamOffset,
                       seen: float) -> None:
        """Pause/flush/apply/resume for one change: the batch before it is already committed;
        the table's later rows wait (the engine is single-threaded here) until it is applied."""
        props = stream_commit_properties(self.cfg.pipeline.name, offset)
        name = c.table
        captured = self.cfg.source.captures(name)
        if c.kind == "truncate_table":
            if name in self.schemas and not self.skip.applied(self.router.sink(name), p):
                # A routed source's rows only: its sink holds the other sources' rows too.
                truncate(self.tables[self.router.sink(name)], props,
                         source_predicate(name) if self.router.routed(name) else None)
                log.info("%s truncated at %s", name, p)
            return
        if c.kind == "create_table":
            if not captured:
                return
            schema = c.schema or (self.schemas.get(c.like) or self._describe(c.like)).renamed(name)
            if not schema.primary_key:
                self._record(name, p, index, c.kind, "recorded", ddl=sql, description=c.describe(),
                             detail="no primary key: not streamed")
                return
            if self.router.routed(name) or self.router.is_sink(name):  # a route's sink: never overwrite it
                self._create_routed(c, schema, index, p, sql, props, seen)
                return
            dt = self._open_sink(name, schema)
            reused = dt.version() > 0 or self.sink_schemas[name] != output_schema(schema)
            if reused and not self.skip.applied(name, p):
                # A table of that name existed before (dropped since): MySQL's new table is empty.
                write_deltalake(dt, output_schema(schema).empty_table(), mode="overwrite", schema_mode="overwrite",
                                commit_properties=props)
                self.sink_schemas[name] = delta_schema(dt)
            self.schemas[name] = schema
            self._record(name, p, index, c.kind, "applied", schema=schema, ddl=sql, description=c.describe(),
                         detail="captured from its creation", held_ms=(time.monotonic() - seen) * 1000)
            return
        if c.kind in ("drop_table", "rename_table"):
            if name in self.schemas:
                del self.schemas[name]
                self._record(name, p, index, c.kind, "recorded", ddl=sql, description=c.describe(),
                             detail="no longer captured under this name; the Delta table is kept")
            if c.kind == "rename_table" and self.cfg.source.captures(c.new_name):
                self._record(c.new_name, p, index, c.kind, "recorded", ddl=sql, description=c.describe(),
                             detail="entered the capture list with existing rows: needs a backfill (not streamed)")
            return
        if name not in self.schemas:
            return
        before = self.schemas[name]
        after = evolve_schema(before, c)
        self._record(name, p, index, c.kind, "pending", ddl=sql, description=c.describe(), schema=after)
        pending = PendingChange(name, p, index, c.kind, sql, c.describe(), after.to_json(),
                                datetime.now(UTC) - timedelta(seconds=time.monotonic() - seen))
        self.schemas[name] = after  # the table's rows after the DDL are decoded with its new schema
        sink = self.router.sink(name)
        if self.cfg.stream.schema_changes == "external":
            # The whole sink is held: a route's other sources must not move the sink's offset past rows held here.
            self.holds[sink] = _Hold(pending, before, self.offset)
            log.info("%s held at %s until %s is applied (Dagster sensor)", sink, p, c.describe())
            return
        apply_pending(self.cfg, pending, store=self.store, table=self.tables[sink])
        self.sink_schemas[sink] = delta_schema(self.tables[sink])

    def _create_routed(self, c: SchemaChange, schema: TableSchema, index: int, p: BinlogPosition, sql: str, props,
                       seen: float) -> None:
        """A new table matching a route: captured from its creation into the route's sink,
        which widens to hold it; refused (recorded, not streamed) if it cannot share the sink,
        or if it is an unrouted table named like a route's sink."""
        name, sink = c.table, self.router.sink(c.table)
        others = {n: self.schemas[n] for n in self.router.sources(sink, self.schemas)}
        try:
            self.router.check({**others, name: schema})
            dt = self._open_sink(name, schema)
            target = sink_schema([schema], base=self.sink_schemas[sink], sink=sink)
        except RouteError as e:
            self._record(name, p, index, c.kind, "recorded", ddl=sql, description=c.describe(),
                         detail=f"cannot join route sink {sink}, not streamed: {e}")
            log.error("%s is not streamed: %s", name, e)
            return
        if not self.skip.applied(sink, p):
            widen_to(dt, target, props)
            if count_rows(dt, name):  # routed here before (dropped since): MySQL's new table is empty
                truncate(dt, props, source_predicate(name))
            self.sink_schemas[sink] = delta_schema(dt)
        self.schemas[name] = schema
        self._record(name, p, index, c.kind, "applied", schema=schema, ddl=sql, description=c.describe(),
                     detail=f"captured from its creation into {sink}", held_ms=(time.monotonic() - seen) * 1000)

    def _describe(self, name: str) -> TableSchema:
        with connect(self.conn) as c, c.cursor() as cur:
            return describe_table(cur, *name.split(".", 1))

    def _commit(self) -> None:
        """Apply the batch (tables in parallel), then advance the checkpoint past it."""
        b, self.batch = self.batch, _Batch()
        if self.position <= self.offset.applied and not b.tables:
            return
        offset = StreamOffset(min(self.resume, self.position), self.position, self.gtid, self.event_time)
        props = stream_commit_properties(self.cfg.pipeline.name, offset)
        work: dict[str, list] = {}  # by Delta table: a route's sources go into one commit, never two at once
        for name, tb in b.tables.items():
            plan = tb.plan()
            self.summary.tables[name] = self.summary.tables.get(name, 0) + tb.rows_in - tb.dropped
            self.summary.changes += tb.rows_in - tb.dropped
            if not plan.empty:
                work.setdefault(self.router.sink(name), []).append((name, tb.schema, plan))
        futures = [self._pool.submit(self._apply, sink, parts, props) for sink, parts in work.items()]
        commits = [f.result() for f in futures]  # a failed table stops the engine before the checkpoint moves
        self.summary.commits += len(work)
        self.summary.batches += 1
        self._checkpoint(offset)
        if self.on_commit and commits:  # [dagster hook] per-table commit records, once the checkpoint is written
            self.on_commit([replace(c, offset=offset) for c in commits])

    def _apply(self, sink: str, parts: list[tuple[str, TableSchema, object]], props) -> TableCommit:
        """One commit to Delta table ``sink`` with the plans of its sources (one unless routed)."""
        target = self.sink_schemas[sink]
        routed = self.router.routed(parts[0][0])

        def rows(kind: str) -> pa.Table:
            if not routed:
                _, schema, plan = parts[0]
                return conform(plan_to_arrow(schema, getattr(plan, kind)), target)
            return pa.concat_tables([conform_routed(plan_to_arrow(schema, getattr(plan, kind)), name, target)
                                     for name, schema, plan in parts])

        key = sink_key(parts[0][1]) if routed else parts[0][1].primary_key
        applied = apply_changes(self.tables[sink], key, rows("append"), rows("upsert"), rows("delete"), props)
        # [dagster hook] the commit as a typed record (offset filled in by _commit: the one in props)
        return TableCommit(sink, tuple(p[0] for p in parts), self.offset, self.tables[sink].version(), applied)

    def _checkpoint(self, offset: StreamOffset) -> None:
        if self.holds:  # a held table's rows after its DDL are only in memory: restart before the DDL
            first = min((h.checkpoint for h in self.holds.values()), key=lambda o: o.applied)
            offset = min(first, offset, key=lambda o: o.applied)
        if offset != self.offset or not self.holds:
            self.store.save_checkpoint(offset, self.life.state, self.summary.changes)
        self.offset = offset
        if self.progress:
            self.progress(self.summary, offset)
