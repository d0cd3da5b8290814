"""The binlog reader of the stream: one process that decodes the binlog and hands
typed records (cdc_core/binlog/events.py) to the apply side through a bounded queue.

Decoding (python-mysql-replication) is the most expensive step of the stream and
is pure Python, so it runs in its own process: the apply side (canonical values,
dedupe, Delta MERGE) uses the other core instead of competing for one GIL.

The reading is the event loop's (cdc_core/binlog/event_loop.py): its records are put on
the queue in binlog order, as lists (one list per ``put``): ``TableLayout`` (before the
first row event written with it), ``RowsEvent``, ``TransactionEnd``, ``PreparedCommit``,
``Statement`` (DDL, TRUNCATE), ``Heartbeat``, and last ``ReaderEnd`` or ``ReaderError``
(an event binlake cannot decode among them: cdc_core/binlog/undecodable.py).

Invariants:
- Reading starts at a transaction boundary (``start``), so every row event comes
  after its table map; row events at or before ``skip_through`` (already applied
  before a restart) are not sent; reading ends at ``until`` (the loop's end).
- Only the captured tables' row events are decoded (``source.tables``/``exclude_tables``,
  decided inside python-mysql-replication too), without ``source.exclude_columns``.
- An XA COMMIT whose XA PREPARE lies before ``start`` finds its rows by looking back
  (cdc_core/binlog/xa_lookup.py).
- The queue is bounded (``QUEUE_ITEMS`` puts of at most ``FLUSH_ROWS`` rows or
  ``FLUSH_BYTES`` of events each; packed rows, whose count only the engine learns, count
  one per ``PACKED_ROW_BYTES``): when the apply side is slow the reader blocks, so memory
  stays bounded however large the backlog, and the reader stays at most a few puts ahead
  of the engine (its connection open until the engine nears the end).
- Rows of the table maps cdc_core/binlog/row_images.py decodes cross the queue packed (their
  row data, decoded as the engine unpickles them); pickling decoded per-row values cost
  the two processes as much as decoding them.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import pymysql

from cdc_core.binlog.decoder import RowDecoder
from cdc_core.binlog.event_loop import EventLoop
from cdc_core.binlog.event_source import Opener, TableFilter, server_source
from cdc_core.binlog.events import PreparedCommit, ReaderError, ReadFailure, RowsEvent
from cdc_core.binlog.xa_lookup import XaLookBack
from cdc_core.config import captures, excludes_column
from cdc_core.errors import is_transient
from cdc_core.offset.position import BinlogPosition
from cdc_core.source.connection import ConnectionSettings

log = logging.getLogger(__name__)

QUEUE_ITEMS = 8
FLUSH_ROWS = 2000
FLUSH_BYTES = 4 << 20
PACKED_ROW_BYTES = 128  # a packed event's rows, estimated from its bytes for the row bound
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


def _libc_prctl():
    """libc's ``prctl``, or None where there is none (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up as the module is imported, in the engine's process: the forked reader then calls it
# without the dynamic loader, whose lock another thread of the engine may have held at the fork.
_PRCTL = _libc_prctl()


def _die_with_parent(parent: int) -> None:
    """A SIGKILLed engine must not leave its reader holding the replication connection
    (and the server_id): the kernel kills this process when the thread that forked it ends."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
    else:  # not Linux: rely on the engine terminating the reader
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


def stream_loop(spec: ReaderSpec, opener: Opener, packed: bool = False) -> EventLoop:
    """The event loop (cdc_core/binlog/event_loop.py) that reads what ``spec`` says from the
    source ``opener`` opens; ``packed``: rows left for the process that unpickles them."""
    return EventLoop(
        opener, spec.start, end=spec.until, skip_through=spec.skip_through,
        # capture by regex inside python-mysql-replication too: row events of other tables are never
        # decoded, and tables created later are captured
        capture=TableFilter(lambda db, table: captures(spec.tables, spec.exclude, f"{db}.{table}")),
        decoder=RowDecoder(lambda table, column: not excludes_column(spec.exclude_columns, f"{table}.{column}"),
                           spec.first_layout_id, packed),
        unread_commit=XaLookBack(spec.conn, spec.server_id),
    )


def _read(spec: ReaderSpec, buffer: _Buffer) -> None:
    """Read the server's binlog as ``spec`` says and add every record to ``buffer``, counting
    the rows and bytes of row events for its bounds."""
    source = server_source(spec.conn, spec.server_id, slave_heartbeat=HEARTBEAT_SECONDS, report_slave=spec.report_as,
                           enable_logging=False)
    add = buffer.add
    for record in stream_loop(spec, source, packed=True).records():
        kind = type(record)
        if kind is RowsEvent:
            rows = record.rows
            add(record, len(rows) if type(rows) is list else record.size // PACKED_ROW_BYTES + 1, record.size)
        elif kind is PreparedCommit:
            add(record, sum(len(ev.rows) for ev in record.events), sum(ev.size for ev in record.events))
        else:
            add(record)
