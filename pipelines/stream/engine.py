"""The stream engine: a short loop over the parts of the algorithm —

    start.py           where reading starts, what is applied, what each table's schema is
    reader.py          the binlog reader process (cdc_core/binlog/reader.py), or several decoding a
                       backlog in parallel (source.parallel_decode), and retries
    cdc_core/batch/micro_batch.py + table_batch.py   row events folded into micro-batches
    schema_operator.py DDL, table maps, capture changes, holds
    online_backfill.py online backfill: chunks read between watermarks, merged at their high watermark
    commit.py          one Delta commit per table per batch, carrying the offset
    metrics.py         what the loop reports (batches, checkpoints), served to Prometheus
    pipelines/lake/maintenance/   compaction and vacuum of the tables, between batches
    (here)             the pipeline checkpoint, lifecycle and the loop

Control flows one way: the engine asks a part, the part answers with a typed decision, and
the engine carries it out. Only the engine commits and checkpoints: a schema change that
needs the batch before it durable comes back as ``Ddl`` / ``RowsUnseen`` / ``Diverged``, a
backfill group whose Delta range is read as of the stream's position as ``NextGroup(flush)``,
and the engine pauses (waits for holds), flushes (commits), then hands it back — so the
loop below reads as the algorithm: pause, flush, apply, resume; merge at the high watermark.

Invariants (tests/test_stream*.py; the parts' own docstrings state theirs):
- Exactly once: every table commit carries its offset atomically; a restart skips row
  events at or before the checkpoint and, per table, at or before that table's own
  committed offset (cdc_core/offset/stream_offset.py). The start position is checkpointed before
  the first table commit. A SIGKILL at any instant loses and repeats nothing.
- Ordered commit: the checkpoint is written only after every table of the batch is
  committed, and batches are applied one after another, so the checkpoint never passes
  a change that is not durable; a key's changes keep binlog order.
- Hand-off: until the stream passes a table's highest chunk high watermark, a change on
  key k is dropped when it is at or before the high watermark of k's chunk.
- Batches are cut at ``max_batch_rows`` / ``max_batch_seconds`` (``catchup_batch_rows`` /
  ``catchup_batch_seconds`` while reading a backlog; and a byte bound), at
  every statement, when a table's columns change, before a stop and before a reconnect.
  Heartbeats advance the checkpoint when only other tables change.
- Online backfill (cdc_core/chunks/incremental.py): a chunk in flight is merged right after the
  batch holding every change up to its high watermark is committed, before any later
  change; ``--until now`` also finishes every waiting backfill (and decides every table
  entering the capture) before it stops. A table's row changes at or before its
  baseline are already in what binlake read of it and are not applied.
- Faults that pass (connection lost, server restart, the lake briefly unwritable)
  commit what was read and read again from the checkpoint with backoff; a purged
  position or a server_id in use stops the engine with an error saying what to do.
- Maintenance (pipelines/lake/maintenance/maintainer.py) commits only between batches, never
  between a batch's table commits and its checkpoint, never while a table is held; its
  commits carry no offset, so they change neither the skip filter nor the exactly-once.
- A stop is a stop: after a stop request (SIGTERM/SIGINT, also sent to the whole process
  group) the engine commits what it read and ends, naming the signal; a fault seen once
  a stop is requested ends the run without a reconnect (tests/test_stream_signals.py).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable

from cdc_core.batch.micro_batch import BatchLimits, BatchPolicy, MicroBatch
from cdc_core.batch.mode_batch import mode_batch
from cdc_core.batch.table_batch import TableBatch, keyless_problem, table_batch
from cdc_core.batch.table_commit import TableCommit
from cdc_core.binlog.events import (
    Heartbeat,
    Op,
    PreparedCommit,
    ReaderEnd,
    ReaderError,
    ReadFailure,
    RowsEvent,
    Statement,
    TableLayout,
    TransactionEnd,
)
from cdc_core.binlog.reader import STOP_SIGNALS, ReaderSpec
from cdc_core.binlog.row_images import UndecodedRows
from cdc_core.config import BinlakeConfig
from cdc_core.errors import STORE, TerminalError, is_transient
from cdc_core.lifecycle import Lifecycle, State
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import (
    PURGED_WAY_OUT,
    PositionPurged,
    ServerIdInUse,
    StartupError,
    check_available,
    check_server_id,
    clock_offset,
)
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.retry import Retry, RetryPolicy, fault_line, retrying
from cdc_core.routes import RouteError, Router, sink_key
from cdc_core.schema.modes import SinkColumns, mode_problem
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import captured_tables, connect, connection_settings
from cdc_core.source.foreign_keys import Cascade, by_parent, cascades
from cdc_core.types.key_order import KeyOrders, ServerSql
from pipelines.arenas import limit_arenas
from pipelines.lake.control_store import ControlStore
from pipelines.lake.maintenance.maintainer import Maintainer
from pipelines.stream.commit import Committer
from pipelines.stream.malloc_trim import MallocTrim, use_system_pool
from pipelines.stream.memory_probe import MemoryProbe
from pipelines.stream.metrics import stream_observer
from pipelines.stream.online_backfill import Backfills
from pipelines.stream.reader import ParallelReader, ReaderProcess
from pipelines.stream.schema_operator import APPEARED, HOLD_POLL_SECONDS, Diverged, RowsUnseen, SchemaChanges
from pipelines.stream.sinks import Sinks
from pipelines.stream.start import resolve_start
from pipelines.stream.state import EngineState, HistoryRecorder, StreamSummary

log = logging.getLogger(__name__)


class StreamFailed(TerminalError):
    """The stream stopped on an error that retrying cannot fix."""


class StopRequested(Exception):
    """A stop was requested while waiting for a held table: the statement is read again later."""


class StreamEngine:
    """Streams the binlog into Delta from the committed offsets (see the module invariants).

    ``progress(summary, offset)`` is called after each checkpoint; ``on_commit(commits)``
    after each batch's checkpoint with its Delta commits, each carrying the batch's offset
    (Dagster records them as asset metadata)."""

    def __init__(self, cfg: BinlakeConfig, *, until_now: bool = False, max_seconds: float | None = None,
                 progress: Callable[[StreamSummary, StreamOffset], None] | None = None,
                 on_commit: Callable[[list[TableCommit]], None] | None = None, retry: RetryPolicy | None = None):
        self.cfg = cfg
        self.until_now = until_now
        self.max_seconds = max_seconds
        self.progress = progress
        self.on_commit = on_commit
        self.conn = connection_settings(cfg)
        self.policy = retry or RetryPolicy()
        self.store = ControlStore.of(cfg, self.policy)
        self.router = Router(cfg.routes)
        self.life = Lifecycle()
        st = cfg.stream
        self.batching = BatchPolicy.of(st.max_batch_rows, st.max_batch_seconds, st.catchup_batch_rows,
                                       st.catchup_batch_seconds)
        self._clock_offset = 0.0  # this host's clock minus the source's (set at start)
        self.sinks = Sinks(cfg, self.router)
        self.committer = Committer(cfg.pipeline.name, self.router, self.sinks, self.policy)
        self.reader: ReaderProcess | ParallelReader | None = None
        self.backfills: Backfills | None = None
        self.maintenance: Maintainer | None = None
        self._cascades: dict[str, tuple[Cascade, ...]] = {}  # by parent table (cdc_core/source/foreign_keys.py)
        self.retry = Retry(self.policy)  # the loop's faults: reconnects from the checkpoint
        # Chunk keys in the server's order (the hand-off), on one connection made on first use.
        self.key_orders = KeyOrders(ServerSql(lambda: connect(self.conn), policy=self.policy))
        self._stop = threading.Event()
        self._stop_reason = "stop requested"
        self.state: EngineState | None = None
        self._summary = StreamSummary()
        self._report_as = f"binlake:{cfg.pipeline.name}"  # how the binlog connection registers (SHOW SLAVE HOSTS)
        self.metrics = stream_observer(self)  # Prometheus metrics when metrics.port is set (metrics.py)
        self.probe = MemoryProbe.from_env(lambda: self.sinks.tables)  # None unless the environment asks
        use_system_pool()  # Arrow's memory in the C heap the trim gives back (malloc_trim.py)
        limit_arenas()  # the C heap in few arenas (pipelines/arenas.py; the CLI has asked already)
        self.trim = MallocTrim()  # the C heap's free pages back to the system, once a minute (malloc_trim.py)

    @property
    def summary(self) -> StreamSummary:
        return self.state.summary if self.state else self._summary

    def source_time(self) -> float:
        """Now by the source's clock (binlog timestamps are the source's), in seconds since the epoch."""
        return time.time() - self._clock_offset

    def request_stop(self, reason: str = "stop requested") -> None:
        """Ask the engine to commit what it has read and stop (thread- and signal-safe); ``reason``
        becomes the summary's stop reason."""
        self._stop_reason = reason  # before the event: the loop reads it once the event is set
        self._stop.set()

    # --- start ----------------------------------------------------------------------------------

    def _start(self) -> None:
        """The start, again from its beginning after a fault that passes (as a restart would):
        it reads the source and the lake, and writes only what a restart writes again."""
        def attempt() -> None:
            if self.backfills is not None:  # of an attempt that failed
                self.backfills.close()
                self.backfills = None
            self._start_once()

        retrying("starting the stream (reading the source's binlog position, tables and settings, and the lake)",
                 attempt, self.policy, stop=self._stop)

    def _start_once(self) -> None:
        with connect(self.conn) as control, control.cursor() as cur:
            plan = resolve_start(self.cfg, self.store, self.router, self.conn, cur, until_now=self.until_now,
                                 key_orders=self.key_orders)
            s = self.state = EngineState(plan.start, plan.offset.applied, plan.start, plan.offset, plan.decide_at,
                                         gtid=plan.offset.gtid, server_id=plan.server_id,
                                         tables=plan.tables, filters=plan.filters, undecided=plan.undecided,
                                         summary=self._summary)
            s.rewind()
            problems = [p for p in map(keyless_problem, s.streamed().values()) if p] + [
                p for n, sch in s.streamed().items()
                if (p := mode_problem(SinkColumns.of(self.cfg.sink, self.router.sink(n)), sch, self.router.routed(n)))]
            if problems:
                raise StartupError("; ".join(problems))
            try:  # every captured table: one that cannot join its route stops the start until excluded
                self.router.check(plan.live)
            except RouteError as e:
                raise StartupError(str(e)) from None
            check_available(cur, plan.start)
            self._clock_offset = clock_offset(cur)
            check_server_id(cur, self.cfg.source.server_id, own=self._report_as)
        self.until = plan.until
        self._live, self._live_at = plan.live, plan.live_at  # checked once the stream reaches live_at
        s.summary.start = plan.start
        history = self.store.schema_history()
        self.recorder = HistoryRecorder(self.store, history)
        self.recorder.record(*plan.baselines)
        self.sinks.open_all(s.streamed(), s.streamed())
        s.skip = self.sinks.skip_filter(plan.applied)
        self.changes = SchemaChanges(self.cfg, self.router, s, self.sinks, self.store, self.recorder, self.conn)
        self.backfills = Backfills(self.cfg, s, self.sinks, self.store, self.recorder, self.router, self.key_orders,
                                   self.conn, self.policy)
        self.maintenance = Maintainer(self.cfg, self._maintained, self._row_key, self.store, reopen=self.sinks.reopen)
        self._cascades = self._foreign_keys()
        self.backfills.poll(force=True)
        # --until now with backfills to finish (or tables still to decide, which may need one): the
        # reader goes on past the end at start, and the loop stops once they are done.
        self.bounded = plan.until is not None and not (self.until_now and (self.backfills.busy or s.undecided))
        # A read timeout on the binlog connection: a stalled one fails, and is read again, instead of
        # blocking forever (tests/test_stream_faults.py).
        binlog_conn = dataclasses.replace(self.conn, read_timeout=self.retry.policy.binlog_silence_seconds)
        spec = ReaderSpec(
            binlog_conn, self.cfg.source.server_id, plan.start, plan.applied, plan.until if self.bounded else None,
            tuple(self.cfg.source.tables), tuple(self.cfg.source.exclude_tables),
            tuple(self.cfg.source.exclude_columns), report_as=self._report_as)
        decode = self.cfg.source.parallel_decode
        self.reader = ParallelReader(spec, decode) if decode.workers > 1 else ReaderProcess(spec)
        if plan.applied is None:
            # The start point is durable before any table commit: a crash between the first
            # table commits and the first checkpoint must resume here, not at a new "latest".
            self.store.save_checkpoint(s.offset, self.life.state, 0)
            self.metrics.checkpointed()

    def _foreign_keys(self) -> dict[str, tuple[Cascade, ...]]:
        """The captured tables' cascading foreign keys by parent (cdc_core/source/foreign_keys.py); a
        child whose parent is not captured is named: the stream cannot repair it."""
        def read() -> list[Cascade]:
            with connect(self.conn) as c, c.cursor() as cur:
                return cascades(cur, captured_tables(self.cfg, cur))

        found = retrying("reading the captured tables' foreign keys", read, self.policy, stop=self._stop)
        for fk in found:
            if not self.cfg.source.captures(fk.parent):
                log.warning("%s: foreign key %s changes its rows when %s (not captured) changes, and MySQL does not "
                            "write those changes to the binlog: capture %s too, or run `binlake reconcile --repair "
                            "--table %s` after such changes", fk.child, fk.constraint, fk.parent, fk.parent, fk.child)
        return by_parent(found)

    def _cascade(self, parent: str, op: Op, why: str, seen: frozenset[str] = frozenset(),
                  changed=lambda fk: True) -> None:
        """A change ``op`` of ``parent`` (``changed``: whether it touched a key's referenced
        columns) may have changed child rows unseen: each such child, and theirs in turn (a
        cascaded change fires the child's own keys), is backfilled."""
        for fk in self._cascades.get(parent, ()):
            if fk.fires_on(op) and fk.child not in seen and changed(fk):
                self.backfills.cascaded(fk.child, f"{fk.constraint} {'deletes' if op == Op.DELETE else 'updates'} "
                                                  f"rows {why}")
                child_op = Op.DELETE if op == Op.DELETE and fk.on_delete == "CASCADE" else Op.UPDATE
                self._cascade(fk.child, child_op, why, seen | {parent, fk.child})

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> StreamSummary:
        """Stream until ``--until now``'s end, ``max_seconds``, a stop request or a fatal error."""
        started = time.monotonic()
        handlers = self._install_signals()
        self.life.to(State.STARTING)
        try:
            self.metrics.serve()
            self._start()
            self._loop()
            self.life.to(State.STOPPING)
            self.life.to(State.STOPPED)
            self.store.save_checkpoint(self.state.offset, State.STOPPED, self.summary.changes)
        except BaseException:
            if self.life.state not in (State.STOPPED, State.FAILED):
                self.life.to(State.FAILED)
            raise
        finally:
            if self.reader is not None:
                self.reader.stop()
            self.committer.close()
            self.key_orders.close()
            if self.backfills is not None:
                self.backfills.close()
            if self.maintenance is not None:
                self.maintenance.close()
            self.metrics.close()
            self._restore_signals(handlers)
            self.summary.seconds = time.monotonic() - started
            self.summary.end = self.state.offset.applied if self.state else None
        return self.summary

    def _loop(self) -> None:
        s = self.state
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        self.reader.start(s.resume, s.offset.applied if s.offset.applied > s.start else None)
        self.life.to(State.STREAMING)
        last_checkpoint = time.monotonic()
        ended = False  # the reader reached the end position
        records = []
        while True:
            # Any step may meet a fault that passes: of the source (a control query, the reader) or of
            # the lake (a commit, the checkpoint, a merge); the stream reads again from its checkpoint.
            try:
                if self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    self._commit()
                    s.summary.stop_reason = self._stop_reason if self._stop.is_set() else "max-seconds reached"
                    return
                self.changes.poll_holds()
                if (ended and not s.holds) or self._past_until():
                    if self.until_now:
                        self.backfills.poll(force=True)  # tables found needing one on the way get their request
                    if not (self.until_now and self.backfills.busy):
                        self._commit()
                        s.summary.stop_reason = f"reached {self.until}"
                        return
                    if ended:  # --until now with a backfill to finish: read on past the end, unbounded
                        self._commit()
                        self.bounded, ended = False, False
                        self.reader.spec = dataclasses.replace(self.reader.spec, until=None)
                        self._restart_reader()
                        continue
                self.backfills.poll()
                self._step_backfills(streaming=bool(records))  # records came last time: the stream is busy
                if self.backfills.ready():  # every change up to the group's high watermark applied: merge now
                    self._commit()
                    self.backfills.merge()
                # Between batches: the last one is committed and checkpointed, the next not begun.
                self.maintenance.step(may_commit=not s.holds, may_vacuum=not self.backfills.inflight)
                # Once a minute, with the trim: worn handles opened afresh (a scan of every table's
                # handle each loop turn would cost the stream's hot path for nothing); a held table's
                # handle and schema stay as the schema change left them.
                if self.trim.step() and not s.holds:
                    self.sinks.renew()
                if self.probe is not None:
                    self.probe.step()
                records = []
                if ended or s.held_rows() >= self.cfg.stream.max_held_rows:
                    self._stop.wait(0.05)  # the reader blocks on the full queue: memory stays bounded
                else:
                    records = self.reader.take(0.05)
                for rec in records:
                    if self._handle(rec):
                        ended = True
                    elif s.batch.due(time.monotonic(), self._limits()):  # inside a list of records too
                        last_checkpoint = self._commit_due()
                now = time.monotonic()
                if s.batch.due(now, self._limits()):
                    last_checkpoint = self._commit_due()
                elif now - last_checkpoint >= self.cfg.stream.heartbeat_seconds and s.position > s.offset.applied:
                    self._commit()  # nothing captured changed: move the restart point anyway
                    last_checkpoint = now
                if s.undecided and s.position >= s.decide_at:
                    self.changes.decide(s.position)
            except StopRequested:
                continue  # the statement is read again after a restart; the loop commits and stops
            except Exception as e:
                if not is_transient(e):
                    raise
                self._reconnect(e)
                ended, records = False, []

    def _limits(self) -> BatchLimits:
        """The batch limits for the stream's lag now (cdc_core/batch/micro_batch.py: BatchPolicy)."""
        t = self.state.event_time
        return self.batching.limits(time.time() - self._clock_offset - t if t else 0.0)

    def _past_until(self) -> bool:
        """``--until now`` with an unbounded reader: past the end, nothing left to finish."""
        s = self.state
        return (not self.bounded and self.until is not None and s.position >= self.until and not s.undecided
                and not s.holds and not self.backfills.busy)

    def _handle(self, rec) -> bool:
        """Apply one reader record to the state; True when the reader reached its end."""
        s = self.state
        if self.backfills.due(rec):  # every change up to the chunk's high watermark is read: commit, merge
            self._commit()
            self.backfills.merge()
        # At live_at (or at the reader's end, which is past it with no captured change after it):
        # a table whose schema differs from its live one changed unread, and is backfilled.
        if self._live_at is not None and (isinstance(rec, ReaderEnd) or s.passed(rec, self._live_at)):
            for d in self.changes.live_divergences(self._live, self._live_at):
                self._adopt(d)
            self._live_at = None
        if isinstance(rec, RowsEvent):
            self._on_rows(rec)
        elif isinstance(rec, TransactionEnd):
            s.boundary(rec.position, rec.gtid, rec.timestamp)
        elif isinstance(rec, PreparedCommit):  # an XA COMMIT: its transaction's rows, as one unit
            for ev in rec.events:
                self._on_rows(ev)
            s.boundary(rec.end.position, rec.end.gtid, rec.end.timestamp)
        elif isinstance(rec, TableLayout):
            s.layouts[rec.id] = rec
        elif isinstance(rec, Heartbeat):
            if s.resume == s.position:  # between transactions: everything up to here is read
                s.position = s.resume = max(s.position, rec.position)
        elif isinstance(rec, Statement):
            self._on_statement(rec)
        elif isinstance(rec, ReaderEnd):
            return True  # done once every held table is released
        elif isinstance(rec, ReaderError):
            self._on_reader_error(rec)
        return False

    def _on_rows(self, ev: RowsEvent) -> None:
        try:
            self._fold_rows(ev)
        except UndecodedRows as e:  # rows read as columns, decoded as tuples here (cdc_core/binlog/row_images.py)
            raise StreamFailed(f"reading the binlog failed: {e} (decoding {ev.table}'s rows at {ev.position})") from e

    def _fold_rows(self, ev: RowsEvent) -> None:
        s = self.state
        name = ev.table
        if name in self._cascades:
            columns = [c.name for c in s.layouts[ev.layout].schema.columns]
            self._cascade(name, ev.op, f"with {name} at {ev.position}",
                          changed=lambda fk: ev.op != Op.UPDATE or ev.partial or fk.changes_key(columns, ev.rows))
        if ev.partial:
            if not s.skip.applied(self.router.sink(name), ev.position):
                self._backfill_unseen(self.changes.partial_image(name, ev.position))
            s.read(ev)
            return
        t = s.tables.get(name)
        if t is None or not t.streamed:
            if name in s.undecided:  # a row of it before its CREATE: it existed before the stream's start
                self.changes.needs_backfill(name, ev.position, 0, "appeared", APPEARED)
            s.read(ev)
            return
        sink = self.router.sink(name)
        if s.skip.applied(sink, ev.position) or (t.baseline is not None and ev.position <= t.baseline):
            s.read(ev)
            return
        key = (name, ev.layout)
        schema = s.conversions.get(key)
        if schema is None:
            found = self.changes.conversion(name, s.layouts[ev.layout], ev.position)
            if found.diverged is not None:
                self._adopt(found.diverged)
            schema = found.schema
            if schema is None:  # not streamed after all (no primary key)
                s.read(ev)
                return
            s.conversions[key] = schema
        hold = s.holds.get(sink)
        batch = hold.batch if hold else s.batch
        if not batch.accepts(name, schema):  # the same columns in another order, or a case-only rename
            self._pause_and_flush((name,))
            batch = s.batch
        s.read(ev)
        s.event_time = ev.timestamp or s.event_time
        self.backfills.on_rows(name, schema, ev)
        f = s.filters.get(name)
        if f is not None:
            f.place_event(schema, ev.op, ev.rows, ev.position)
        batch.add(name, schema, lambda: self._table_batch(name, schema, ev.position), ev.op, ev.rows, ev.position,
                  ev.size, time.monotonic(), ev.time_us, ev.gtid, ev.first_row)
        if hold:
            s.summary.held_rows_peak = max(s.summary.held_rows_peak, s.held_rows())

    # --- the parts' decisions, carried out ------------------------------------------------------

    def _on_statement(self, st: Statement) -> None:
        """A statement: rows logged as SQL are backfilled; a DDL is paused, flushed, applied and
        checkpointed past (schema_operator.py's invariants)."""
        unseen = self.changes.rows_as_statement(st)
        if unseen is not None:
            self._backfill_unseen(unseen)
            return
        ddl = self.changes.ddl(st)
        self._pause_and_flush(ddl.tables)
        self._checkpoint(self.changes.apply(ddl))
        self._cascades = self._foreign_keys()  # a DDL may add or drop a foreign key

    def _backfill_unseen(self, unseen: RowsUnseen) -> None:
        if unseen.tables:
            self._pause_and_flush(unseen.tables)
            self.changes.backfill_unseen(unseen)

    def _adopt(self, diverged: Diverged) -> None:
        self._pause_and_flush(diverged.tables)
        self.changes.adopt(diverged)

    def _pause_and_flush(self, tables: tuple[str, ...]) -> None:
        """Before a change to ``tables`` takes effect: wait until none of them is held (a table's
        changes stay in binlog order), then commit everything read before it."""
        self._wait_for_holds(tables)
        self._commit()

    def _wait_for_holds(self, tables: tuple[str, ...]) -> None:
        """Block until none of ``tables`` is held (StopRequested if a stop comes meanwhile); other
        tables' rows read so far keep flowing, a batch at a time."""
        s = self.state
        while self.changes.held(tables):
            if self._stop.wait(HOLD_POLL_SECONDS / 5):
                raise StopRequested()
            self.changes.poll_holds(force=True)
            if s.batch.rows and time.monotonic() - s.batch.opened >= self.cfg.stream.max_batch_seconds:
                self._commit()

    def _step_backfills(self, streaming: bool = False) -> None:
        """Between batches: the backfill collects what was read and names the next group to
        read, if one is due; a group whose Delta range is read as of the stream's position
        starts after the open batch is committed."""
        group = self.backfills.step(streaming=streaming)
        if group is None:
            return
        if group.flush:
            self._commit()
        self.backfills.start(group)

    def _maintained(self) -> dict:
        """The Delta tables maintenance may compact and vacuum now: the stream's, held ones left out."""
        held = self.state.holds
        return {sink: dt for sink, dt in self.sinks.tables.items() if sink not in held}

    def _row_key(self, sink: str) -> tuple[str, ...] | None:
        """The row key of the Delta table ``sink`` (a route's: ``(_cdc_source, key)``), None without one."""
        own = self.state.tables.get(sink)  # a table not routed is its own sink: found without a scan
        if own is not None and own.streamed and own.schema is not None and not self.router.routed(sink):
            return own.schema.row_key or None
        for name, schema in self.state.streamed().items():
            if self.router.sink(name) == sink and schema.row_key:
                return sink_key(schema) if self.router.routed(name) else schema.row_key
        return None

    def _table_batch(self, name: str, schema: TableSchema, position: BinlogPosition) -> TableBatch:
        f = self.state.filters.get(name)
        if f is not None and position > f.max_high_watermark:
            del self.state.filters[name]  # past the hand-off: no more filtering for this table
            f = None
        columns = self.sinks.columns(self.router.sink(name))
        drop, column = (f.should_drop, f.chunks[0].key) if f else (None, None)
        self.metrics.table_opened(name, self.state.event_time)  # its first change of this batch (or hold)
        return table_batch(schema, drop, column) if columns.plain else mode_batch(schema, columns, drop, column)

    # --- faults -----------------------------------------------------------------------------------

    def _on_reader_error(self, rec: ReaderError) -> None:
        self._commit()
        self.reader.stop()
        if rec.kind == ReadFailure.PURGED:
            raise PositionPurged(f"reading the binlog failed: {rec.message}; {PURGED_WAY_OUT}")
        if rec.kind == ReadFailure.SERVER_ID:
            raise ServerIdInUse(f"source.server_id {self.cfg.source.server_id} is in use by another replica, which "
                                f"took over the binlog connection ({rec.message}); give each pipeline and replica "
                                "its own server_id")
        if rec.kind != ReadFailure.TRANSIENT:
            raise StreamFailed(f"reading the binlog failed: {rec.message}")
        self._reconnect(f"binlog connection lost ({rec.message})")

    def _reconnect(self, cause: BaseException | str) -> None:
        """Read again from the checkpoint after a fault that passes (``cause``: the error, or the
        reader's message), with backoff. What was read after the checkpoint is dropped and read
        again, also when a stop ends the run instead: a batch whose commit failed must never be
        checkpointed past."""
        s = self.state
        reason = cause if isinstance(cause, str) else fault_line(cause)
        self.reader.stop()
        s.batch = MicroBatch()  # everything it held is after the checkpoint: read again
        self.changes.drop_holds()  # their DDLs and rows are read again from the checkpoint
        self.metrics.batch_dropped()
        s.rewind()
        if self._stop.is_set():
            # A stop is a stop: once one is requested, a fault is not retried (a retry would read
            # on past the stop); the loop ends next, at the checkpoint.
            log.info("stopping (%s) after: %s", self._stop_reason, reason)
            return
        if self.life.state != State.STARTING:
            self.life.to(State.STARTING)
        while True:
            delay = self.retry.next_delay()
            if delay is None:
                budget = self.retry.policy.budget_seconds
                who = "the object store has been failing" if reason.startswith(STORE) else \
                    "the source has been unreachable"
                raise StreamFailed(f"{who} for over {budget:.0f} s: {reason}; a re-run resumes from the checkpoint")
            log.warning("%s; reconnecting from %s in %.1f s", reason, s.offset.resume, delay)
            s.summary.reconnects += 1
            if self._stop.wait(delay):
                return
            try:
                self._restart_reader()
            except Exception as e:
                if not is_transient(e):
                    raise
                reason = fault_line(e)
                continue
            self.life.to(State.STREAMING)
            return

    def _restart_reader(self) -> None:
        """A new reader process from the checkpoint (its table-map ids are new)."""
        s = self.state
        self.reader.stop()
        s.layouts.clear()
        s.conversions.clear()
        s.skip = self.sinks.skip_filter(s.offset.applied)
        s.rewind()
        self.reader.start(s.offset.resume, s.offset.applied)

    # --- commit and checkpoint ------------------------------------------------------------------------

    def _commit_due(self) -> float:
        """Commit a batch that is due (its row, byte or time limit reached); when it was done."""
        self._commit()
        self.retry.succeeded()
        return time.monotonic()

    def _commit(self) -> None:
        """Apply the batch (tables in parallel), then advance the checkpoint past it."""
        s = self.state
        self.changes.open_new()  # the tables met first in this batch: in the history and in Delta before its data
        b, s.batch = s.batch, MicroBatch()
        if s.position <= s.offset.applied and not b.tables:
            return
        offset = s.offset_here()
        for name, tb in b.tables.items():
            s.summary.tables[name] = s.summary.tables.get(name, 0) + tb.rows_in - tb.dropped
            s.summary.changes += tb.rows_in - tb.dropped
        if self.backfills is not None:
            self.backfills.save_cascades()  # durable before the checkpoint passes the cascade
        started = time.monotonic()
        commits = self.committer.apply(b, offset)
        if self.maintenance is not None:
            self.maintenance.committed(c.table for c in commits)
        s.summary.commits += len(commits)
        s.summary.batches += 1
        self._checkpoint(offset)
        self.metrics.batch_committed(b, time.monotonic() - started)
        if self.on_commit and commits:
            self.on_commit(commits)

    def _checkpoint(self, offset: StreamOffset) -> None:
        s = self.state
        if s.holds:  # a held table's rows after its DDL are only in memory: restart before the DDL
            first = min((h.checkpoint for h in s.holds.values()), key=lambda o: o.applied)
            offset = min(first, offset, key=lambda o: o.applied)
        if offset != s.offset or not s.holds:
            self.store.save_checkpoint(offset, self.life.state, s.summary.changes)
            self.metrics.checkpointed()
        s.offset = offset
        if self.progress:
            self.progress(s.summary, offset)

    # --- signals ---------------------------------------------------------------------------------------

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_signal(signum: int, _frame) -> None:
            self.request_stop(f"stopped by {signal.Signals(signum).name}")

        return {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}

    @staticmethod
    def _restore_signals(handlers) -> None:
        for sig, h in (handlers or {}).items():
            signal.signal(sig, h)
