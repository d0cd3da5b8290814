"""The one binlog event loop (cdc_core/binlog/event_loop.py): what it guarantees every reader.

Against the real MariaDB: positions are the server's own (SHOW BINLOG EVENTS), in order,
with each transaction's GTID; layouts come before their rows; a rotate resets the decoder
and an end right after a rotate is seen; ``skip_through`` leaves applied rows out.

On constructed events (library event objects built here, fed through the event-source seam,
cdc_core/binlog/event_source.py): the refusal floor (cdc_core/binlog/undecodable.py) in every
reader (the stream's loop, a chunk window, the statement scan, the start scan, failover's
spans), for the types no MariaDB writes here (MySQL's TRANSACTION_PAYLOAD and
PARTIAL_UPDATE_ROWS, unknown types); the harmless types; the bounds; XA's records and the
GTIDs they carry.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import PartialUpdateRowsEvent

from cdc_core.binlog.decoder import RowDecoder
from cdc_core.binlog.event_loop import END_MARKERS, EventLoop
from cdc_core.binlog.event_source import SourceRequest, TableFilter, server_source
from cdc_core.binlog.events import (
    PreparedCommit,
    ReaderEnd,
    RowsEvent,
    Statement,
    TableLayout,
    TransactionEnd,
    TransactionStart,
)
from cdc_core.binlog.range_reads import changes, statements
from cdc_core.binlog.reader import ReaderSpec, stream_loop
from cdc_core.binlog.undecodable import (
    LOG_EVENT_IGNORABLE_F,
    CompressedBinlog,
    CompressedTransaction,
    PartialJsonUpdate,
    UnknownEvent,
)
from cdc_core.binlog.xa import FL_PREPARED_XA
from cdc_core.offset.failover import spans
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.startup import start_in
from cdc_core.source.connection import ConnectionSettings, connection_settings

# --- constructed events --------------------------------------------------------------------------


def P(pos: int, file: str = "binlog.000001") -> BinlogPosition:
    return BinlogPosition(file, pos)


def make(cls, **attrs):
    """A library event object with the attributes the library's parser would have set."""
    event = object.__new__(cls)
    event.__dict__.update({"timestamp": 1, **attrs})
    return event


def gtid(text: str, flags: int = 0, timestamp: int = 1):
    return make(MariadbGtidEvent, gtid=text, flags=flags, timestamp=timestamp)


def query(sql: str, db: str = "d"):
    return make(QueryEvent, query=sql, schema=db)


def typed(event_type: int, flags: int = 0):
    """An event the library does not know (it returns those as NotImplementedEvent)."""
    return make(NotImplementedEvent, event_type=event_type, packet=SimpleNamespace(flags=flags))


class Recorded:
    """An event source over constructed events (the seam): it yields the requested classes only,
    as a replication connection does, with ``log_file``/``log_pos`` of each."""

    def __init__(self, events: list, request: SourceRequest) -> None:
        self.events = [(at, e) for at, e in events if at > request.start and type(e) in request.events]
        self.log_file, self.log_pos = request.start.file, request.start.pos
        self.closed = False

    def __iter__(self):
        for at, event in self.events:
            self.log_file, self.log_pos = at.file, at.pos
            yield event

    def close(self) -> None:
        self.closed = True


class Opener:
    """Opens :class:`Recorded` sources over ``events`` and remembers what it was asked."""

    def __init__(self, events: list) -> None:
        self.events, self.requests, self.sources = events, [], []

    def __call__(self, request: SourceRequest) -> Recorded:
        self.requests.append(request)
        self.sources.append(Recorded(self.events, request))
        return self.sources[-1]


def _spec(start: BinlogPosition, end: BinlogPosition) -> ReaderSpec:
    return ReaderSpec(ConnectionSettings(host="127.0.0.1", port=1, user="nobody", password=""), 1, start, None, end,
                      (r"d\..*",), ())


# Every reader of the binlog, each as its consumer of the loop, reading (start, end] from an opener.
READERS = {
    "stream": lambda opener, start, end: list(stream_loop(_spec(start, end), opener).records()),
    "chunk window": lambda opener, start, end: list(changes(opener, start, end, {("d", "t")})),
    "statement scan": lambda opener, start, end: list(statements(opener, start, end)),
    "start scan": lambda opener, start, end: start_in(opener, start, end, timestamp_ms=10**15),  # never found
    "failover spans": lambda opener, start, end: spans(opener, start, end, {"0-1-99"}, lambda db, t: True),
}
READS_ROWS = {"stream", "chunk window", "failover spans"}


def _around(event, at: int = 300) -> list:
    """A transaction holding ``event`` (ending at ``at``), between two others."""
    return [(P(100), gtid("0-1-1")), (P(200), xid_event()), (P(250), gtid("0-1-2")), (P(at), event),
            (P(at + 50), xid_event()), (P(at + 100), gtid("0-1-3")), (P(at + 150), xid_event())]


def xid_event():
    return make(XidEvent)


@pytest.mark.parametrize("event_type, error, says", [
    (0x28, CompressedTransaction, r"\(TRANSACTION_PAYLOAD_EVENT, type 40\).*binlog_transaction_compression is ON"),
    (0xA5, CompressedBinlog, r"\(QUERY_COMPRESSED_EVENT, type 165\).*log_bin_compress is ON"),
    (0xA9, CompressedBinlog, r"\(WRITE_ROWS_COMPRESSED_EVENT, type 169\).*log_bin_compress is ON"),
    (0x2A, UnknownEvent, r"type 42 \(0x2A, GTID_TAGGED_LOG_EVENT\)"),
    (0xC8, UnknownEvent, r"type 200 \(0xC8, not a type binlake knows\)"),
])
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_stops_at_an_event_it_cannot_decode(reader, event_type, error, says):
    """Never passed over: each reader stops at it, naming its type, its position and (when known)
    the server setting that wrote it. Compressed row events hide rows only: the readers that read
    no rows pass over them."""
    opener = Opener(_around(typed(event_type)))
    if event_type == 0xA9 and reader not in READS_ROWS:
        READERS[reader](opener, P(4), P(500))
    else:
        with pytest.raises(error, match=f"ending at binlog.000001:300 .*{says}") as e:
            READERS[reader](opener, P(4), P(500))
        assert (e.value.event_type, e.value.position) == (event_type, P(300))
    assert all(s.closed for s in opener.sources)


@pytest.mark.parametrize("event_type, flags", [(0x22, 0), (0x1C, 0), (0x24, 0), (0x25, 0), (0x29, 0),
                                               (0xC8, LOG_EVENT_IGNORABLE_F)])
@pytest.mark.parametrize("reader", READERS)
def test_harmless_events_are_passed_over(reader, event_type, flags):
    """ANONYMOUS_GTID, IGNORABLE, TRANSACTION_CONTEXT, VIEW_CHANGE, HEARTBEAT_V2, and an unknown type
    the server flagged ignorable: no reader stops at them."""
    READERS[reader](Opener(_around(typed(event_type, flags))), P(4), P(500))


def test_a_partial_json_update_stops_the_readers_of_its_tables_rows():
    """PARTIAL_UPDATE_ROWS is an UpdateRowsEvent to the library; the loop's handlers are keyed by
    the exact class, so it goes to the refusal, never to the rows handler."""
    partial = make(PartialUpdateRowsEvent, event_type=0x27, schema="d", table="t")
    with pytest.raises(PartialJsonUpdate, match=r"ending at binlog.000001:300 \(PARTIAL_UPDATE_ROWS_EVENT, type 39\)"
                                                r".*binlog_row_value_options is PARTIAL_JSON"):
        list(changes(Opener(_around(partial)), P(4), P(500), {("d", "t")}))
    assert not list(changes(Opener(_around(partial)), P(4), P(500), {("d", "other")}))  # not a table it reads
    assert [r.position for r in statements(Opener(_around(partial)), P(4), P(500))] == []
    loop = EventLoop(Opener([]), P(4), decoder=RowDecoder())
    assert loop.handlers[PartialUpdateRowsEvent] != loop.handlers[XidEvent]


def test_bounds_positions_and_end_markers():
    """Records carry their event's end position in order; the loop stops after the first event at
    or past ``end`` (an end right after a rotate and a new file's header is seen: END_MARKERS are
    always asked for) and yields ReaderEnd there last; an end at or before the start reads nothing."""
    events = [(P(100), gtid("0-1-1")), (P(200), query("CREATE TABLE t (id INT)")), (P(300), xid_event()),
              (P(400), make(RotateEvent)), (P(4, "binlog.000002"), make(RotateEvent)),
              (P(256, "binlog.000002"), make(FormatDescriptionEvent)), (P(300, "binlog.000002"), gtid("0-1-2")),
              (P(350, "binlog.000002"), xid_event())]
    opener = Opener(events)
    records = list(EventLoop(opener, P(4), end=P(250)).records())
    assert records == [Statement("d", "CREATE TABLE t (id INT)", P(200), "0-1-1", 1),
                       TransactionEnd(P(300), "0-1-1", 1), ReaderEnd(P(300))]
    assert END_MARKERS <= opener.requests[0].events and NotImplementedEvent in opener.requests[0].events
    records = list(EventLoop(opener, P(4), end=P(256, "binlog.000002")).records())
    assert records[-1] == ReaderEnd(P(256, "binlog.000002"))
    assert [type(r) for r in EventLoop(opener, P(300), end=P(300)).records()] == [ReaderEnd]
    assert len(opener.requests) == 2  # the last loop opened nothing


def test_gtids_xa_and_transaction_starts():
    """Every record carries the last GTID read; MySQL's GTID events only where asked for. XA START
    and XA END yield nothing, XA_PREPARE is a transaction's end; an XA COMMIT whose XA PREPARE the
    loop did not read goes to ``unread_commit``, unless it is at or before ``skip_through``."""
    asked = []

    def unread(xid, end, loop):
        asked.append((xid, end.position))
        return []

    events = [(P(100), gtid("0-1-7", FL_PREPARED_XA)), (P(150), query("XA END X'61',X'',1")),
              (P(200), make(XAPrepareEvent)), (P(250), gtid("0-1-8")), (P(300), query("XA COMMIT X'62',X'',1")),
              (P(350), make(GtidEvent, sid=bytes(range(16)), gno=5)), (P(400), query("BEGIN")), (P(450), xid_event()),
              (P(500), gtid("0-1-9")), (P(550), query("XA ROLLBACK X'63',X'',1"))]
    loop = EventLoop(Opener(events), P(4), end=P(550), starts=True, unread_commit=unread)
    assert list(loop.records()) == [
        TransactionStart(P(100), "0-1-7", 1), TransactionEnd(P(200), "0-1-7", 1),
        TransactionStart(P(250), "0-1-8", 1), TransactionStart(P(300), None, 1), TransactionEnd(P(300), "0-1-8", 1),
        TransactionStart(P(400), None, 1), TransactionEnd(P(450), "0-1-8", 1),  # MySQL's GTID not asked for
        TransactionStart(P(500), "0-1-9", 1), TransactionStart(P(550), None, 1), TransactionEnd(P(550), "0-1-9", 1),
        ReaderEnd(P(550))]
    assert asked == [("x'62',x'',1", P(300))]
    with_mysql = list(EventLoop(Opener(events), P(4), end=P(550), mysql_gtids=True, skip_through=P(300),
                                unread_commit=unread).records())
    mysql_gtid = "00010203-0405-0607-0809-0a0b0c0d0e0f:5"
    assert TransactionEnd(P(450), mysql_gtid, 1) in with_mysql and len(asked) == 1  # the commit was skipped


def test_a_table_filter_asks_once_per_table():
    asked = []
    f = TableFilter(lambda db, table: asked.append((db, table)) or table == "t")
    schemas, tables = f.views()
    assert [f("d", "t"), f("d", "t"), f("d", "u")] == [True, True, False]
    assert "t" in tables and "d" in schemas and "u" in tables and "d" not in schemas  # the library's order
    assert asked == [("d", "t"), ("d", "u")]


# --- the real server -----------------------------------------------------------------------------


class CountingDecoder(RowDecoder):
    """The loop's decoder, counting the resets of its table-map cache."""

    resets = 0

    def reset(self) -> None:
        self.resets += 1
        super().reset()


def _server_events(cur, start: BinlogPosition, end: BinlogPosition) -> list[tuple[str, BinlogPosition, str]]:
    """(kind, end position, info) of every event in (start, end], as the server lists them."""
    out = []
    cur.execute("SHOW BINARY LOGS")
    for (name, *_) in cur.fetchall():
        if start.at(name, 0).file_number < start.file_number or start.at(name, 0).file_number > end.file_number:
            continue
        cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
        out += [(r[2], start.at(name, int(r[4])), str(r[5])) for r in cur.fetchall()
                if start < start.at(name, int(r[4])) <= end]
    return out


def test_positions_gtids_layouts_rotate_and_skip_on_the_server(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY)")
        start = master_position(cur)
        for i in range(3):
            cur.execute("INSERT INTO t VALUES (%s, %s), (%s, %s)", (2 * i, f"a{i}", 2 * i + 1, f"b{i}"))
            cur.execute("INSERT INTO other VALUES (%s)", (i,))
        cur.execute("FLUSH BINARY LOGS")
        after_rotate = master_position(cur)
        cur.execute("INSERT INTO t VALUES (10, 'after')")
        cur.execute("ALTER TABLE t ADD COLUMN w INT")
        cur.execute("INSERT INTO t VALUES (11, 'new', 1)")
        end = master_position(cur)
        listed = _server_events(cur, start, end)
    cfg = make_config(name)
    opener = server_source(connection_settings(cfg), cfg.source.server_id + 9)
    decoder = CountingDecoder()
    records = list(EventLoop(opener, start, end=end, decoder=decoder,
                             capture=TableFilter(lambda db, table: (db, table) == (name, "t"))).records())

    # positions: the server's own, in order, ReaderEnd at the end
    positions = [r.position for r in records if not isinstance(r, TableLayout)]
    assert positions == sorted(positions) and records[-1] == ReaderEnd(end)
    assert [r.position for r in records if isinstance(r, TransactionEnd)] == [at for kind, at, _ in listed
                                                                              if kind == "Xid"]
    # each record carries its transaction's GTID (the last Gtid event the server lists before it)
    gtid_at = {}
    current = None
    for kind, at, info in listed:
        current = info.split()[-1] if kind == "Gtid" else current
        gtid_at[at] = current
    assert all(r.gtid == gtid_at[r.position] for r in records if isinstance(r, RowsEvent | TransactionEnd | Statement))
    # rows of the captured table only, each after the layout it refers to; a new layout after the ALTER only
    rows = [r for r in records if isinstance(r, RowsEvent)]
    assert [row for r in rows for row in r.rows] == [
        (0, "a0"), (1, "b0"), (2, "a1"), (3, "b1"), (4, "a2"), (5, "b2"), (10, "after"), (11, "new", 1)]
    layouts = [i for i, r in enumerate(records) if isinstance(r, TableLayout)]
    assert len(layouts) == 2 and all(
        any(isinstance(records[j], TableLayout) and records[j].id == r.layout for j in range(i))
        for i, r in enumerate(records) if isinstance(r, RowsEvent))
    assert [s.sql for s in records if isinstance(s, Statement)] == ["ALTER TABLE t ADD COLUMN w INT"]
    assert decoder.resets >= 2  # on open, and at the rotate
    # skip_through: the rows applied before a restart are left out, the others come as before
    skip = rows[1].position
    again = [r for r in EventLoop(opener, start, end=end, decoder=RowDecoder(), skip_through=skip,
                                  capture=TableFilter(lambda db, table: (db, table) == (name, "t"))).records()
             if isinstance(r, RowsEvent)]
    assert [r.position for r in again] == [r.position for r in rows[2:]]
    # an end right after a rotate (the new file's header, its GTID list and checkpoint) is seen
    done = []
    reader = threading.Thread(target=lambda: done.extend(EventLoop(opener, start, end=after_rotate).records()),
                              daemon=True)
    reader.start()
    reader.join(60)
    assert done and done[-1] == ReaderEnd(after_rotate)


def test_an_xa_commit_yields_its_held_rows_at_its_own_position(mariadb, db, make_config):
    name, conn = db
    other = mariadb.connect(name)
    with conn.cursor() as cur, other, other.cursor() as between:
        cur.execute("CREATE TABLE x (id INT PRIMARY KEY)")
        start = master_position(cur)
        cur.execute("XA START 'g'")
        cur.execute("INSERT INTO x VALUES (1), (2)")
        cur.execute("XA END 'g'")
        cur.execute("XA PREPARE 'g'")
        between.execute("INSERT INTO x VALUES (3)")  # another session's, between the two phases
        cur.execute("XA COMMIT 'g'")
        end = master_position(cur)
    cfg = make_config(name)
    opener = server_source(connection_settings(cfg), cfg.source.server_id + 9)
    records = [r for r in EventLoop(opener, start, end=end, decoder=RowDecoder()).records()
               if not isinstance(r, TableLayout)]
    kinds = [type(r) for r in records]
    assert kinds == [TransactionEnd, RowsEvent, TransactionEnd, PreparedCommit, ReaderEnd]  # prepare, 3, commit
    commit = records[3]
    assert [row for ev in commit.events for row in ev.rows] == [(1,), (2,)]
    assert {ev.position for ev in commit.events} == {commit.position} and commit.position > records[1].position
