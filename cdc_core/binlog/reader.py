"""The binlog reader of the stream: one process that decodes the binlog and hands
typed records (cdc_core/binlog/events.py) to the apply side through a bounded queue.

Decoding (python-mysql-replication) is the most expensive step of the stream and
is pure Python, so it runs in its own process: the apply side (canonical values,
dedupe, Delta MERGE) uses the other core instead of competing for one GIL.

Records are put on the queue in binlog order, as lists (one list per ``put``):
``TableLayout`` (before the first row event written with it), ``RowsEvent``,
``TransactionEnd``, ``Statement`` (DDL, TRUNCATE), ``Heartbeat``, and last
``ReaderEnd`` or ``ReaderError``.

Invariants:
- Reading starts at a transaction boundary (``start``), so every row event comes
  after its table map; row events at or before ``skip_through`` (already applied
  before a restart) are not sent.
- The queue is bounded (``QUEUE_ITEMS`` puts of at most ``FLUSH_ROWS`` rows or
  ``FLUSH_BYTES`` of events each): when the apply side is slow the reader blocks,
  so memory stays bounded however large the backlog.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import pymysql
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)

from cdc_core.binlog.decoder import (
    OPS,
    ROW_EVENTS,
    RowDecoder,
    is_transaction_statement,
    open_binlog,
    partial_image,
    refuse_compressed,
    statement_text,
)
from cdc_core.binlog.events import (
    Heartbeat,
    PreparedCommit,
    ReaderEnd,
    ReaderError,
    ReadFailure,
    RowsEvent,
    Statement,
    TransactionEnd,
)
from cdc_core.binlog.xa import FL_PREPARED_XA, XaHold, XaStatement, XaVerb, xa_statement
from cdc_core.binlog.xa_lookup import prepared_group
from cdc_core.config import captures, excludes_column
from cdc_core.errors import is_transient
from cdc_core.offset.position import BinlogPosition
from cdc_core.source.connection import ConnectionSettings

log = logging.getLogger(__name__)

QUEUE_ITEMS = 8
FLUSH_ROWS = 2000
FLUSH_BYTES = 4 << 20
FLUSH_SECONDS = 0.02
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})  # a stop of the stream, handled by the engine
HEARTBEAT_SECONDS = 0.25  # the server sends one when idle: wakes the reader and shows progress

ER_MASTER_FATAL_READING_BINLOG = 1236  # position purged / not found
ER_SLAVE_SAME_ID = 4052  # MariaDB: "A slave with the same server_uuid/server_id is already connected"


@dataclass(frozen=True)
class ReaderSpec:
    """What one reader process reads."""

    conn: ConnectionSettings
    server_id: int
    start: BinlogPosition
    skip_through: BinlogPosition | None
    until: BinlogPosition | None
    tables: tuple[str, ...]  # capture regexes over "db.table" (source.tables)
    exclude: tuple[str, ...]  # source.exclude_tables
    exclude_columns: tuple[str, ...] = ()  # source.exclude_columns
    report_as: str = "binlake"
    first_layout_id: int = 1  # readers of one stream's ranges number their layouts apart (events.py)


class _CaptureFilter:
    """Capture by regex inside python-mysql-replication, so row events of other tables
    are never decoded and tables created later are captured too.

    The library asks ``table in only_tables`` and then ``schema in only_schemas`` for
    each table map and row event; the first view remembers the table name, the second
    decides on "schema.table" (cached)."""

    def __init__(self, tables: tuple[str, ...], exclude: tuple[str, ...]):
        self.tables, self.exclude = tables, exclude
        self.table: str | None = None
        self.cache: dict[tuple[str, str], bool] = {}
        outer = self

        class _Tables:
            def __contains__(self, table: str) -> bool:
                outer.table = table
                return True

        class _Schemas:
            def __contains__(self, schema: str) -> bool:
                return outer.captured(schema, outer.table or "")

        self.only_tables, self.only_schemas = _Tables(), _Schemas()

    def captured(self, schema: str, table: str) -> bool:
        key = (schema, table)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = captures(self.tables, self.exclude, f"{schema}.{table}")
        return hit


class _Buffer:
    """Items waiting for the queue, put as one list at most every ``FLUSH_SECONDS``
    (sooner when full); the reading thread blocks while the buffer is twice full."""

    def __init__(self, queue):
        self.queue = queue
        self.items: list = []
        self.rows = 0
        self.bytes = 0
        self.cond = threading.Condition()
        self.closed = False

    def _full(self, factor: int = 1) -> bool:
        return self.rows >= FLUSH_ROWS * factor or self.bytes >= FLUSH_BYTES * factor

    def add(self, item, rows: int = 0, size: int = 0) -> None:
        with self.cond:
            while self._full(2):
                self.cond.wait(0.1)  # backpressure: the flusher is blocked on a full queue
            self.items.append(item)
            self.rows += rows
            self.bytes += size
            if len(self.items) == 1 or self._full():
                self.cond.notify_all()

    def flusher(self) -> None:
        last = 0.0
        while True:
            with self.cond:
                while not (self.closed or self._full()
                           or (self.items and time.monotonic() - last >= FLUSH_SECONDS)):
                    self.cond.wait(FLUSH_SECONDS - (time.monotonic() - last) if self.items else None)
                items, self.items, self.rows, self.bytes = self.items, [], 0, 0
                closed = self.closed
                self.cond.notify_all()
            if items:
                self.queue.put(items)  # blocks while the apply side is behind
                last = time.monotonic()
            elif closed:
                return

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def classify(error: BaseException) -> ReadFailure:
    """What a reading error means for the engine (cdc_core/errors.py decides what passes)."""
    if isinstance(error, pymysql.err.MySQLError) and error.args:
        code = error.args[0]
        if code == ER_SLAVE_SAME_ID:
            return ReadFailure.SERVER_ID
        if code == ER_MASTER_FATAL_READING_BINLOG:
            return ReadFailure.PURGED
    return ReadFailure.TRANSIENT if is_transient(error) else ReadFailure.FATAL


PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """A SIGKILLed engine must not leave its reader holding the replication connection
    (and the server_id): the kernel kills this process when the thread that forked it ends."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: rely on the engine terminating the reader
        log.debug("prctl(PR_SET_PDEATHSIG) unavailable")
    if os.getppid() != parent:  # the engine died before prctl took effect
        os._exit(1)


def run_reader(spec: ReaderSpec, queue, parent: int) -> None:
    """Process entry point: read from ``spec.start`` and put items on ``queue`` (anything
    with a blocking ``put(list)``: a bounded queue, or a spool file) until ``spec.until``
    (if any), an error, or the process is terminated."""
    # SIGTERM and SIGINT to the whole process group (a supervisor, Ctrl-C) are the engine's to
    # handle: it commits what this process read, then ends it. Were this process to die of them
    # first, the engine would see a lost reader. They arrive blocked (ReaderProcess.start); a
    # pending one is discarded when ignored.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    _die_with_parent(parent)
    buffer = _Buffer(queue)
    flusher = threading.Thread(target=buffer.flusher, name="flusher", daemon=True)
    flusher.start()
    try:
        _read(spec, buffer)
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the apply side
        log.debug("reader stopped", exc_info=True)
        buffer.add(ReaderError(classify(e), f"{type(e).__name__}: {e}"))
    buffer.close()
    flusher.join()


def _read(spec: ReaderSpec, buffer: _Buffer) -> None:
    capture = _CaptureFilter(spec.tables, spec.exclude)
    reader = open_binlog(
        spec.conn, spec.server_id, spec.start,
        slave_heartbeat=HEARTBEAT_SECONDS,
        report_slave=spec.report_as,
        enable_logging=False,
        only_events=[*ROW_EVENTS, XidEvent, QueryEvent, MariadbGtidEvent, HeartbeatLogEvent, RotateEvent,
                     XAPrepareEvent, NotImplementedEvent],
        filter_non_implemented_events=False,  # compressed events must be seen, to stop at them
        only_schemas=capture.only_schemas,
        only_tables=capture.only_tables,
    )
    decoder = RowDecoder(lambda table, column: not excludes_column(spec.exclude_columns, f"{table}.{column}"),
                         spec.first_layout_id)
    skip, until = spec.skip_through, spec.until
    gtid, xa = None, XaHold()

    def row_event(event, at: BinlogPosition) -> RowsEvent:
        d, new = decoder.decoding(event)
        if new:
            buffer.add(d.layout)
        partial = partial_image(event)  # not decoded: the engine backfills its table
        rows = [] if partial else decoder.rows(event, d)
        return RowsEvent(d.layout.table, OPS[type(event)], at, d.layout.id, rows, event.timestamp, event.event_size,
                         gtid, partial)

    def on_xa(statement: XaStatement, end: TransactionEnd) -> None:
        """An XA statement (cdc_core/binlog/xa.py): a group's start holds its rows; an ``XA COMMIT`` sends
        them, stamped at its own position (looked up in the binlog when their XA PREPARE was
        before this reader's start), unless a run before a restart applied them; an
        ``XA ROLLBACK`` drops them. Both end a transaction."""
        if statement.verb == XaVerb.START:  # MySQL's start of a group (MariaDB flags its GTID event)
            xa.start()
            return
        if statement.verb == XaVerb.END:
            xa.end(statement.xid)
            return
        held = xa.outcome(statement.xid)
        if statement.verb == XaVerb.COMMIT and (skip is None or end.position > skip):
            if held is None:
                decoder.reset()  # the look-back's table ids are not this reader's (before and after it)
                group = prepared_group(spec.conn, spec.server_id, statement.xid, spec.start)
                held = [row_event(e, at) for e, at in group
                        if isinstance(e, ROW_EVENTS) and capture.captured(e.schema, e.table)]
                decoder.reset()
            if held:
                events = tuple(dataclasses.replace(ev, position=end.position, gtid=end.gtid, timestamp=end.timestamp)
                               for ev in held)
                buffer.add(PreparedCommit(events, end), sum(len(ev.rows) for ev in held), sum(ev.size for ev in held))
                return
        buffer.add(end)

    try:
        if until is not None and spec.start >= until:
            buffer.add(ReaderEnd(spec.start))
            return
        for event in reader:
            at = spec.start.at(reader.log_file, reader.log_pos)
            if isinstance(event, ROW_EVENTS):
                if capture.captured(event.schema, event.table):
                    if xa.holding:  # an XA transaction's rows: held until its outcome (cdc_core/binlog/xa.py)
                        xa.hold(row_event(event, at))
                    elif skip is None or at > skip:
                        ev = row_event(event, at)
                        buffer.add(ev, len(ev.rows), event.event_size)
            elif isinstance(event, XidEvent):
                buffer.add(TransactionEnd(at, gtid, event.timestamp))
            elif isinstance(event, MariadbGtidEvent):
                gtid = event.gtid
                if event.flags & FL_PREPARED_XA:
                    xa.start()
            elif isinstance(event, XAPrepareEvent):
                xa.prepared()
                buffer.add(TransactionEnd(at, gtid, event.timestamp))  # nothing applied: a place to resume from
            elif isinstance(event, QueryEvent):
                db, sql = statement_text(event)
                if sql.lstrip()[:5].upper() == "BEGIN":
                    continue
                statement = xa_statement(sql)
                if statement is not None:
                    on_xa(statement, TransactionEnd(at, gtid, event.timestamp))
                elif is_transaction_statement(sql):  # COMMIT
                    buffer.add(TransactionEnd(at, gtid, event.timestamp))
                else:
                    buffer.add(Statement(db, sql, at, gtid, event.timestamp))
            elif isinstance(event, HeartbeatLogEvent):
                buffer.add(Heartbeat(at))
            elif isinstance(event, RotateEvent):
                decoder.reset()  # a new file, or a reconnect after which table ids may be reused
            else:
                refuse_compressed(event, at)
            if until is not None and at >= until:
                buffer.add(ReaderEnd(at))
                return
    finally:
        reader.close()

