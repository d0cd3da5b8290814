"""The one binlog event loop: every reader of the binlog is this loop and what it does with
the loop's records.

The loop opens an event source (cdc_core/binlog/event_source.py) at a transaction boundary,
gives each event its position and hands it to the one handler registered for its library
class (a dict from class to handler, as Debezium's reader registers one handler per event
type). What a rotate, a GTID, an XA statement or an event binlake cannot decode means is
decided here, once; the handlers turn events into typed records (cdc_core/binlog/events.py):
``TableLayout``, ``RowsEvent``, ``TransactionStart`` (only when asked: ``starts``),
``TransactionEnd``, ``PreparedCommit``, ``Statement`` (a query other than BEGIN, COMMIT and
XA's, or a LOAD DATA written as SQL), ``Heartbeat`` and last ``ReaderEnd``.
The readers are consumers of these records: the stream's reader process
(cdc_core/binlog/reader.py), the chunk windows and the snapshot's statement scan
(cdc_core/binlog/range_reads.py), the start scan (cdc_core/offset/startup.py), failover's
transaction spans (cdc_core/offset/failover.py) and the XA look-back
(cdc_core/binlog/xa_lookup.py).

Invariants, what the loop guarantees every consumer (tests/test_event_loop.py):
- Positions and order: records come in binlog order; a record's position is the end
  position of its event, carrying the base of ``start`` (cdc_core/offset/position.py).
- Bounds: reading starts at ``start``, a transaction boundary, so every row event follows
  its table map. With ``end`` the loop stops after the first event at or past ``end`` and
  yields ``ReaderEnd`` at its position last; the events a binlog end can follow
  (``END_MARKERS``: a transaction's end, a statement, a rotate, a format description, a
  checkpoint, a GTID list, a stop) are always read, so an end is seen wherever it is; an
  ``end`` at or before ``start`` yields ``ReaderEnd(start)`` and reads nothing. Row events
  at or before ``skip_through`` (applied before a restart) are neither decoded nor yielded.
- Layouts: with a ``decoder``, a ``TableLayout`` is yielded before the first ``RowsEvent``
  or ``PreparedCommit`` that refers to it.
- Rotate and reconnect: the decoder's table-map cache is reset when the source opens, at
  every rotate (a new file, and the rotate a reconnect begins with: table ids may be
  reused) and after an XA look-back (its table ids are another reader's).
- GTIDs: every record carries the GTID of its transaction, the last GTID event read (None before
  one): MariaDB's ``d-s-n``, MySQL's ``uuid:n`` (GTID_LOG_EVENT) or ``uuid:tag:n``
  (GTID_TAGGED_LOG_EVENT), read by cdc_core/binlog/mysql_gtid.py; an anonymous transaction's
  (ANONYMOUS_GTID_LOG_EVENT, a MySQL without GTIDs) is None. Row events carry their
  transaction's original commit time in µs where its MySQL 8 GTID event holds one
  (``commit_us``; 0 on MariaDB, whose events hold seconds).
- Compressed transactions (TRANSACTION_PAYLOAD_EVENT, cdc_core/binlog/payload.py): the events
  inside go to the same handlers as an uncompressed transaction's, every one at the payload's end
  position (its position in the file). Their row events come as one ``PreparedCommit`` with the
  transaction's end, each numbering its rows on from the events before it (``first_row``), so
  ``_cdc_seq`` orders and tells apart the transaction's rows and no checkpoint falls inside it; row
  events at or before ``skip_through`` are left out as any are (a restart after the payload reads
  none of it again). A payload without row events yields its records as they come.
- XA (cdc_core/binlog/xa.py): the row events of a prepared XA group are held, not yielded;
  XA START and XA END yield nothing; an XA_PREPARE is a ``TransactionEnd`` (nothing to
  apply: a place to resume from). An XA COMMIT after ``skip_through`` yields its held rows
  as one ``PreparedCommit`` stamped at its own position; rows whose XA PREPARE this loop did
  not read are ``unread_commit``'s to find (the stream looks back, a chunk window refuses);
  an XA ROLLBACK, a commit without captured rows or one at or before ``skip_through`` is a
  ``TransactionEnd``.
- Capture: a row event is decoded only when ``capture(schema, table)`` accepts its table.
- Partial JSON updates (PARTIAL_UPDATE_ROWS_EVENT) are updates whose JSON diffs the decoder
  applies (cdc_core/binlog/json_diff.py).
- Refusal: reading stops with an ``UndecodableEvent`` (cdc_core/binlog/undecodable.py) at
  any event that may hold what the loop reads and is not decoded: an event the library does
  not know (``NotImplementedEvent``) unless binlake reads it (a compressed transaction, a tagged
  GTID) or it is known to be harmless (a loop without a decoder also passes over those that hold
  row changes only); a compressed transaction binlake cannot open; a captured table's partial
  JSON update whose diffs it cannot apply. None is passed over unnamed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from pymysqlreplication.event import (
    ExecuteLoadQueryEvent,
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbBinLogCheckPointEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    StopEvent,
    XAPrepareEvent,
    XidEvent,
)

from cdc_core.binlog import mysql_gtid
from cdc_core.binlog.decoder import OPS, ROW_EVENTS, RowDecoder, partial_image
from cdc_core.binlog.event_source import Opener, SourceRequest, TableFilter
from cdc_core.binlog.events import (
    Heartbeat,
    PreparedCommit,
    ReaderEnd,
    RowsEvent,
    Statement,
    TableLayout,
    TransactionEnd,
    TransactionStart,
)
from cdc_core.binlog.json_diff import DiffError, refused
from cdc_core.binlog.payload import TRANSACTION_PAYLOAD_EVENT, event_body, inner_events
from cdc_core.binlog.undecodable import ROW_CHANGES_ONLY, harmless, refusal
from cdc_core.binlog.xa import FL_PREPARED_XA, XaHold, XaStatement, XaVerb, xa_statement
from cdc_core.offset.position import BinlogPosition

LoopRecord = (TableLayout | RowsEvent | TransactionStart | TransactionEnd | PreparedCommit | Statement | Heartbeat
              | ReaderEnd)
Handler = Callable[[Any, BinlogPosition], LoopRecord | None]

ANONYMOUS_GTID_LOG_EVENT, GTID_TAGGED_LOG_EVENT = 0x22, 0x2A

# Every kind of event a binlog end (SHOW MASTER STATUS) can come right after: a transaction's
# end, a statement, and the events a server writes between transactions (a new file's
# header, a binlog checkpoint, a shutdown). A reader that left these out would wait for the
# next event forever at an end position that follows one (found with a server restarted
# mid-snapshot: tests/test_snapshot_faults.py).
END_MARKERS = frozenset({XidEvent, QueryEvent, RotateEvent, FormatDescriptionEvent, MariadbGtidListEvent,
                         MariadbBinLogCheckPointEvent, StopEvent})


class UnreadCommit(Protocol):
    """What a loop does at an XA COMMIT whose XA PREPARE it did not read (``xid``, the
    commit as ``end``): the records holding the prepared rows (their layouts, then the
    ``RowsEvent``s), or an error when a reader cannot have them."""

    def __call__(self, xid: str, end: TransactionEnd, loop: EventLoop) -> list[TableLayout | RowsEvent]: ...


def statement_text(event: QueryEvent) -> tuple[str, str]:
    """A QueryEvent's (default database, SQL text)."""
    sql = event.query if isinstance(event.query, str) else event.query.decode("utf-8", "replace")
    db = event.schema if isinstance(event.schema, str) else event.schema.decode("utf-8", "replace")
    return db, sql


_LOAD_QUERY_FIXED = 26  # bytes of an EXECUTE_LOAD_QUERY event's post-header (13 of a query's, 13 of its own)


def load_statement_text(event: ExecuteLoadQueryEvent) -> tuple[str, str]:
    """An EXECUTE_LOAD_QUERY event's (default database, SQL text): the library reads its fixed
    fields only, and leaves the packet at its status variables, followed by the database
    (NUL-terminated) and the SQL."""
    packet = event.packet
    packet.advance(event.status_vars_length)
    db = packet.read(event.schema_length).decode("utf-8", "replace")
    packet.advance(1)
    size = event.event_size - _LOAD_QUERY_FIXED - event.status_vars_length - event.schema_length - 1
    return db, packet.read(size).decode("utf-8", "replace")


class EventLoop:
    """One read of the binlog from ``start`` through the source ``opener`` gives (see the
    module invariants). Rows are read only with a ``decoder``, of the tables ``capture``
    accepts (all when None; a ``TableFilter`` is also handed to the source, any other callable
    is asked on each row event and may change its mind while reading)."""

    def __init__(self, opener: Opener, start: BinlogPosition, *, end: BinlogPosition | None = None,
                 skip_through: BinlogPosition | None = None, decoder: RowDecoder | None = None,
                 capture: Callable[[str, str], bool] | None = None, starts: bool = False,
                 unread_commit: UnreadCommit | None = None) -> None:
        self.start, self.end, self.skip_through = start, end, skip_through
        self.decoder, self.capture = decoder, capture
        self.gtid: str | None = None  # the GTID of the transaction being read
        self.commit_us = 0  # its commit time (µs) where its GTID event holds one (MySQL 8), else 0
        self.xa = XaHold()
        self._opener, self._starts, self._unread_commit = opener, starts, unread_commit
        self._before: list[LoopRecord] = []  # records that go before the handler's own (layouts)
        self.handlers: dict[type, Handler] = {
            RotateEvent: self._rotate,
            MariadbGtidEvent: self._mariadb_gtid,
            GtidEvent: self._mysql_gtid,
            XidEvent: self._xid,
            QueryEvent: self._query,
            ExecuteLoadQueryEvent: self._load_query,
            XAPrepareEvent: self._xa_prepare,
            HeartbeatLogEvent: self._heartbeat,
            NotImplementedEvent: self._not_implemented,
        }
        if decoder is not None:
            self.handlers.update(dict.fromkeys(ROW_EVENTS, self._rows))

    def records(self) -> Iterator[LoopRecord]:
        """Read and yield the records (see the module invariants); the source is closed when
        this ends, is closed or raises."""
        start, end = self.start, self.end
        if end is not None and end <= start:
            yield ReaderEnd(start)
            return
        tables = self.capture if isinstance(self.capture, TableFilter) else None
        source = self._opener(SourceRequest(start, frozenset(self.handlers) | END_MARKERS, tables))
        if self.decoder is not None:
            self.decoder.reset()
        handlers, before = self.handlers, self._before
        at, end_key = start, end.key if end is not None else None
        try:
            for event in source:
                at = at.at(source.log_file, source.log_pos)  # from the last one: a file's number is parsed once
                handler = handlers.get(type(event))
                if handler is not None:
                    record = handler(event, at)
                    if before:
                        yield from before
                        before.clear()
                    if record is not None:
                        yield record
                if end_key is not None and at.key >= end_key:
                    yield ReaderEnd(at)
                    return
        finally:
            source.close()

    # --- the handlers: one per library event class ---------------------------------------------

    def _rows(self, event, at: BinlogPosition) -> RowsEvent | None:
        capture = self.capture
        if capture is not None and not capture(event.schema, event.table):
            return None
        if self.xa.holding:  # an XA transaction's rows: held until its outcome
            self.xa.hold(self._decode(event, at))
            return None
        skip = self.skip_through
        if skip is not None and at <= skip:
            return None
        return self._decode(event, at)

    def _decode(self, event, at: BinlogPosition) -> RowsEvent:
        d, new = self.decoder.decoding(event)
        if new:
            self._before.append(d.layout)
        partial = partial_image(event)  # not decoded: its table needs a backfill
        try:
            rows = [] if partial else self.decoder.rows(event, d)
        except DiffError as e:  # a partial JSON update binlake cannot complete
            raise refused(e, at) from None
        return RowsEvent(d.layout.table, OPS[type(event)], at, d.layout.id, rows, event.timestamp, event.event_size,
                         self.gtid, partial, self.commit_us)

    def _not_implemented(self, event, at: BinlogPosition) -> LoopRecord | None:
        kind = event.event_type
        if kind == TRANSACTION_PAYLOAD_EVENT:
            return self._payload(event, at)
        if kind == GTID_TAGGED_LOG_EVENT:
            return self._mysql_gtid_fields(self._read_gtid(mysql_gtid.tagged_gtid_event, event, at), event, at)
        if kind == ANONYMOUS_GTID_LOG_EVENT:
            self.gtid, self.commit_us = None, 0  # a transaction without a GTID (a MySQL whose gtid_mode is OFF)
            return None
        if harmless(event) or (self.decoder is None and kind in ROW_CHANGES_ONLY):
            return None  # no change in it, or none this loop reads
        raise refusal(kind, at)

    def _payload(self, event, at: BinlogPosition) -> LoopRecord | None:
        """A compressed transaction: its events through the handlers, at its end position (see
        the module invariants)."""
        records: list[LoopRecord] = []
        before, handlers = self._before, self.handlers
        for inner in inner_events(event, handlers, at):
            record = handlers[type(inner)](inner, at)
            records.extend(before)
            before.clear()
            if record is not None:
                records.append(record)
        rows = [r for r in records if type(r) is RowsEvent]
        if rows:
            end = records[-1]
            if type(end) is not TransactionEnd or any(type(r) not in (TableLayout, TransactionStart, RowsEvent)
                                                      for r in records[:-1]):
                raise refusal(TRANSACTION_PAYLOAD_EVENT, at, "its row events are not one transaction ending it "
                              f"({', '.join(type(r).__name__ for r in records)})")
            records = [r for r in records if type(r) is not RowsEvent and r is not end]
            records.append(PreparedCommit(_numbered(rows, end, self.commit_us), end))
        if not records:
            return None
        before.extend(records[:-1])
        return records[-1]

    def _read_gtid(self, parse: Callable[[bytes], mysql_gtid.MysqlGtid], event,
                   at: BinlogPosition) -> mysql_gtid.MysqlGtid:
        try:
            return parse(event_body(event))
        except (ValueError, IndexError) as e:
            raise refusal(event.event_type, at, str(e)) from None

    def _rotate(self, event, at: BinlogPosition) -> None:
        if self.decoder is not None:
            self.decoder.reset()  # a new file, or a reconnect after which table ids may be reused

    def _mariadb_gtid(self, event, at: BinlogPosition) -> TransactionStart | None:
        if event.flags & FL_PREPARED_XA:  # MariaDB's start of an XA group
            self.xa.start()
        return self._gtid_text(event.gtid, event, at)

    def _mysql_gtid(self, event, at: BinlogPosition) -> TransactionStart | None:
        return self._mysql_gtid_fields(self._read_gtid(mysql_gtid.gtid_event, event, at), event, at)

    def _mysql_gtid_fields(self, g: mysql_gtid.MysqlGtid, event, at: BinlogPosition) -> TransactionStart | None:
        return self._gtid_text(g.gtid, event, at, g.commit_us)

    def _gtid_text(self, gtid: str | None, event, at: BinlogPosition, commit_us: int = 0) -> TransactionStart | None:
        self.gtid, self.commit_us = gtid, commit_us
        return TransactionStart(at, gtid, event.timestamp) if self._starts else None

    def _xid(self, event, at: BinlogPosition) -> TransactionEnd:
        return TransactionEnd(at, self.gtid, event.timestamp)

    def _xa_prepare(self, event, at: BinlogPosition) -> TransactionEnd:
        self.xa.prepared()
        return TransactionEnd(at, self.gtid, event.timestamp)  # nothing applied: a place to resume from

    def _heartbeat(self, event, at: BinlogPosition) -> Heartbeat:
        return Heartbeat(at)

    def _query(self, event, at: BinlogPosition) -> LoopRecord | None:
        db, sql = statement_text(event)
        head = sql.lstrip()[:6].upper()
        if head.startswith("BEGIN"):
            return TransactionStart(at, None, event.timestamp) if self._starts else None
        if head == "COMMIT":
            return TransactionEnd(at, self.gtid, event.timestamp)
        statement = xa_statement(sql) if head.startswith("XA") else None
        if statement is not None:
            return self._xa(statement, event, at)
        return Statement(db, sql, at, self.gtid, event.timestamp)

    def _load_query(self, event, at: BinlogPosition) -> Statement:
        # a LOAD DATA its session wrote as SQL (binlog_format STATEMENT or MIXED): its rows are not
        # in the binlog, the statement is (cdc_core/schema/statements.py reads it as a row change)
        db, sql = load_statement_text(event)
        return Statement(db, sql, at, self.gtid, event.timestamp)

    def _xa(self, statement: XaStatement, event, at: BinlogPosition) -> LoopRecord | None:
        """An XA statement (see the module invariants)."""
        if statement.verb == XaVerb.START:  # MySQL's start of a group (MariaDB flags its GTID event)
            self.xa.start()
            return TransactionStart(at, None, event.timestamp) if self._starts else None
        if statement.verb == XaVerb.END:
            self.xa.end(statement.xid)
            return None
        if self._starts:  # an outcome is a transaction of its own
            self._before.append(TransactionStart(at, None, event.timestamp))
        end = TransactionEnd(at, self.gtid, event.timestamp)
        held = self.xa.outcome(statement.xid)
        skip = self.skip_through
        if statement.verb != XaVerb.COMMIT or (skip is not None and at <= skip):
            return end
        if held is None and self._unread_commit is not None:
            found = self._unread_commit(statement.xid, end, self)
            if self.decoder is not None:
                self.decoder.reset()
            self._before.extend(r for r in found if isinstance(r, TableLayout))
            held = [r for r in found if isinstance(r, RowsEvent)]
        if not held:
            return end
        return PreparedCommit(_numbered(held, end, self.commit_us), end)


def _numbered(events: list[RowsEvent], end: TransactionEnd, commit_us: int) -> tuple[RowsEvent, ...]:
    """Row events that become one unit at ``end``: stamped with its position, GTID and times, each
    numbering its rows on from the events before it (``RowsEvent.first_row``)."""
    out, first = [], 0
    for ev in events:
        rows = ev.rows if type(ev.rows) is list else ev.rows.decoded()  # packed: counted here
        out.append(dataclasses.replace(ev, position=end.position, gtid=end.gtid, timestamp=end.timestamp,
                                       commit_us=commit_us, first_row=first, rows=rows))
        first += len(rows)
    return tuple(out)
