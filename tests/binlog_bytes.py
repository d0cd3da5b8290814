"""Binlog events from bytes, without a server: the corpus in tests/mysql_binlogs/ and decoders fed from it.

Invariants (checked by tests/test_mysql_corpus.py):
- ``load_sequence`` yields every event of a ``NAME.events`` file as a ``RecordedEvent`` whose header is the
  event's own 19 bytes and whose body excludes any CRC32 trailer; ``framing`` says whether the header and
  trailer were recorded by the source or built by us (the corpus's expected file names it per event).
- ``server_form`` is what a server with ``binlog_checksum=CRC32`` sends: header size = 19 + body + 4, CRC32 of
  header and body appended. A CRC32 depends only on those bytes, so for events whose source stripped the
  trailer it restores the original one.
- ``payload_events`` splits a TRANSACTION_PAYLOAD_EVENT (type 40) into its inner events; inner events carry
  no CRC32 trailer (MySQL writes them without one).
- ``decode_pymysqlreplication`` runs python-mysql-replication's event classes on bytes, the way its stream
  reader does after reading a packet, so that a decoder's behaviour can be measured on recorded bytes.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS_DIR = Path(__file__).parent / "mysql_binlogs"
HEADER_LEN = 19
CRC_LEN = 4
FORMAT_DESCRIPTION_EVENT = 15
TRANSACTION_PAYLOAD_EVENT = 40
LOG_EVENT_BINLOG_IN_USE_F = 0x1


@dataclass(frozen=True)
class EventHeader:
    """The common 19-byte header of a v4 binlog event."""

    timestamp: int
    type_code: int
    server_id: int
    event_size: int
    log_pos: int
    flags: int

    @classmethod
    def parse(cls, raw: bytes) -> EventHeader:
        return cls(*struct.unpack("<IBIIIH", raw[:HEADER_LEN]))


@dataclass(frozen=True)
class RecordedEvent:
    """One event: its header, its body (no CRC32 trailer) and the trailer when the bytes carry one."""

    header: EventHeader
    body: bytes
    checksum: bytes | None
    framing: str

    @property
    def raw(self) -> bytes:
        """The bytes as the corpus holds them."""
        return struct.pack("<IBIIIH", *_header_fields(self.header)) + self.body + (self.checksum or b"")


@dataclass(frozen=True)
class CorpusSequence:
    """A recorded sequence: its events in order and the expected values the sources state for them."""

    name: str
    events: tuple[RecordedEvent, ...]
    expected: dict[str, Any]


def _header_fields(h: EventHeader) -> tuple[int, int, int, int, int, int]:
    return (h.timestamp, h.type_code, h.server_id, h.event_size, h.log_pos, h.flags)


def sequence_names() -> list[str]:
    """Names of the corpus's sequences (``NAME.events`` files)."""
    return sorted(p.name[: -len(".events")] for p in CORPUS_DIR.glob("*.events"))


def split_event(raw: bytes, framing: str) -> RecordedEvent:
    """Split one event's bytes into header, body and CRC32 trailer (when the header size counts one and the
    bytes hold it)."""
    header = EventHeader.parse(raw)
    if len(raw) == header.event_size and _has_crc32(raw, header):
        return RecordedEvent(header, raw[HEADER_LEN:-CRC_LEN], raw[-CRC_LEN:], framing)
    return RecordedEvent(header, raw[HEADER_LEN:], None, framing)


def _has_crc32(raw: bytes, header: EventHeader) -> bool:
    covered = bytearray(raw[:-CRC_LEN])
    if header.type_code == FORMAT_DESCRIPTION_EVENT:
        # the server computes the FDE's CRC32 before it sets the in-use flag of an open binlog
        covered[17] &= 0xFF ^ LOG_EVENT_BINLOG_IN_USE_F
    return zlib.crc32(bytes(covered)).to_bytes(CRC_LEN, "little") == raw[-CRC_LEN:]


def load_sequence(name: str) -> CorpusSequence:
    """Read ``NAME.events`` (one base64 event a line, ``#`` comments) and ``NAME.expected.json``."""
    expected = json.loads((CORPUS_DIR / f"{name}.expected.json").read_text())
    lines = [
        line
        for line in (CORPUS_DIR / f"{name}.events").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    framings = [e["framing"] for e in expected["events"]]
    if len(lines) != len(framings):
        raise ValueError(f"{name}: {len(lines)} events but {len(framings)} expected entries")
    events = tuple(split_event(base64.b64decode(line), f) for line, f in zip(lines, framings, strict=True))
    return CorpusSequence(name, events, expected)


def server_form(event: RecordedEvent) -> bytes:
    """The event as a CRC32 server sends it: size field with the trailer counted, CRC32 appended."""
    h = event.header
    size = HEADER_LEN + len(event.body) + CRC_LEN
    head = struct.pack("<IBIIIH", h.timestamp, h.type_code, h.server_id, size, h.log_pos, h.flags)
    crc_flags = h.flags
    if h.type_code == FORMAT_DESCRIPTION_EVENT:
        crc_flags &= 0xFFFF ^ LOG_EVENT_BINLOG_IN_USE_F
    covered = struct.pack("<IBIIIH", h.timestamp, h.type_code, h.server_id, size, h.log_pos, crc_flags) + event.body
    return head + event.body + zlib.crc32(covered).to_bytes(CRC_LEN, "little")


@dataclass(frozen=True)
class TransactionPayload:
    """The fields of a TRANSACTION_PAYLOAD_EVENT body."""

    compression_type: int
    payload_size: int
    uncompressed_size: int
    payload: bytes


def _lenenc(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def parse_transaction_payload(body: bytes) -> TransactionPayload:
    """Read the TLV fields of a TRANSACTION_PAYLOAD_EVENT body (type, length, value; 0 ends them)."""
    fields: dict[int, int] = {}
    pos = 0
    while True:
        field_type, pos = _lenenc(body, pos)
        if field_type == 0:
            break
        length, pos = _lenenc(body, pos)
        fields[field_type], _ = _lenenc(body, pos)
        pos += length
    payload = body[pos:]
    return TransactionPayload(fields.get(2, 0), fields.get(1, len(payload)), fields.get(3, 0), payload)


def payload_events(body: bytes, decompress: Callable[[bytes, int], bytes]) -> list[RecordedEvent]:
    """The inner events of a TRANSACTION_PAYLOAD_EVENT body; ``decompress(data, uncompressed_size)``."""
    tp = parse_transaction_payload(body)
    raw = decompress(tp.payload, tp.uncompressed_size) if tp.compression_type == 0 else tp.payload
    out, pos = [], 0
    while pos < len(raw):
        header = EventHeader.parse(raw[pos:])
        out.append(RecordedEvent(header, raw[pos + HEADER_LEN : pos + header.event_size], None, "inner"))
        pos += header.event_size
    return out


class _NoControlConnection:
    """Stands where python-mysql-replication keeps its control connection: these bytes come from MySQL and
    no query is made (column names come from the TABLE_MAP's optional metadata or stay unknown)."""

    charset = "utf8mb4"

    @staticmethod
    def _get_dbms() -> str:
        return "mysql"


def decode_pymysqlreplication(
    events: Iterable[bytes], *, use_checksum: bool, table_map: dict[int, Any] | None = None
) -> list[Any]:
    """Decode event bytes (19-byte header first) with python-mysql-replication's packet wrapper and event
    classes; returns one event object per input (``None`` where the library builds none)."""
    from pymysql.protocol import MysqlPacket
    from pymysqlreplication.binlogstream import BinLogStreamReader
    from pymysqlreplication.packet import BinLogPacketWrapper

    tables = {} if table_map is None else table_map
    allowed = BinLogStreamReader._allowed_event_list(None, None, None, False)
    out = []
    for raw in events:
        packet = MysqlPacket(b"\x00" + raw, "utf8")
        wrapped = BinLogPacketWrapper(
            packet, tables, _NoControlConnection(), (8, 0, 0), use_checksum, allowed,
            None, None, None, None, False, False, False, True, False,
        )
        out.append(wrapped.event)
    return out


# --- an event source over recorded bytes (cdc_core/binlog/event_source.py's seam) ----------------------------


class RecordedSource:
    """The events of ``events`` (``(end position, bytes in server form)`` pairs, in order) as
    python-mysql-replication's stream reader yields them: library event objects of the requested classes,
    ``log_file``/``log_pos`` of each, table maps kept as the reader keeps them (reset at a rotate), a format
    description's server version and post-header lengths used for the events after it. It starts after
    ``request.start``."""

    def __init__(self, events: list[tuple[Any, bytes]], request: Any, mysql_version: tuple[int, int, int] = (8, 0, 0)):
        from pymysqlreplication.event import FormatDescriptionEvent, RotateEvent
        from pymysqlreplication.row_event import TableMapEvent

        self._events = [(at, raw) for at, raw in events if at > request.start]
        self._yield = frozenset(request.events)
        self._built = self._yield | {TableMapEvent, FormatDescriptionEvent, RotateEvent}
        self._mysql_version = mysql_version
        self.log_file, self.log_pos = request.start.file, request.start.pos
        self.closed = False

    def __iter__(self):
        from pymysql.protocol import MysqlPacket
        from pymysqlreplication.event import FormatDescriptionEvent, RotateEvent
        from pymysqlreplication.packet import BinLogPacketWrapper

        table_map: dict[int, Any] = {}
        version, post_header = self._mysql_version, None
        for at, raw in self._events:
            wrapped = BinLogPacketWrapper(MysqlPacket(b"\x00" + raw, "utf8"), table_map, _NoControlConnection(),
                                          version, True, self._built, None, None, None, None, False, False, False,
                                          True, False, False, post_header)
            event = wrapped.event
            if isinstance(event, RotateEvent) and event.timestamp:
                table_map = {}
            if isinstance(event, FormatDescriptionEvent):
                version, post_header = event.mysql_version, event.post_header_len
            self.log_file, self.log_pos = at.file, at.pos
            if event is not None and type(event) in self._yield:
                yield event

    def close(self) -> None:
        self.closed = True


def recorded_opener(events: list[tuple[Any, bytes]]) -> Callable[[Any], RecordedSource]:
    """An opener (cdc_core/binlog/event_source.py) of :class:`RecordedSource` over ``events``."""
    return lambda request: RecordedSource(events, request)


def positioned(events: Iterable[bytes], file: str = "binlog.000001", first: int = 4) -> list[tuple[Any, bytes]]:
    """Server-form event bytes given the end positions they would have one after another in ``file``
    from ``first`` (a file's first event starts after its 4-byte magic number)."""
    from cdc_core.offset.position import BinlogPosition

    out, pos = [], first
    for raw in events:
        pos += len(raw)
        out.append((BinlogPosition(file, pos), raw))
    return out


# --- TRANSACTION_PAYLOAD_EVENTs built from events (a server's own, or recorded) -----------------------------


def _lenenc_bytes(n: int) -> bytes:
    if n < 0xFB:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def _field(kind: int, value: int) -> bytes:
    encoded = _lenenc_bytes(value)
    return _lenenc_bytes(kind) + _lenenc_bytes(len(encoded)) + encoded


def without_checksum(raw: bytes) -> bytes:
    """A server-form event (CRC32 trailer) as MySQL writes it inside a payload: no trailer, no position."""
    h = EventHeader.parse(raw)
    return struct.pack("<IBIIIH", h.timestamp, h.type_code, h.server_id, h.event_size - CRC_LEN, 0, h.flags) + \
        raw[HEADER_LEN:-CRC_LEN]


def transaction_payload(inner: list[bytes], *, timestamp: int, server_id: int, log_pos: int, compression: int = 0,
                        uncompressed_size: int | None = None) -> bytes:
    """A TRANSACTION_PAYLOAD_EVENT in server form holding ``inner`` (events without trailers), its payload
    zstd-compressed (compression 0) or as is (255; any other type is stored as is too, to be refused)."""
    import zstandard

    data = b"".join(inner)
    payload = zstandard.ZstdCompressor().compress(data) if compression == 0 else data
    body = (_field(1, len(payload)) + _field(2, compression)
            + _field(3, len(data) if uncompressed_size is None else uncompressed_size) + b"\x00" + payload)
    header = EventHeader(timestamp, TRANSACTION_PAYLOAD_EVENT, server_id, HEADER_LEN + len(body), log_pos, 0)
    return server_form(RecordedEvent(header, body, None, "synthesized"))


class CompressingSource:
    """A server's event source whose transactions come compressed, as a MySQL with
    binlog_transaction_compression=ON writes them: the events of each transaction after its GTID event (table
    maps, row events, its XID) are read from the server as they are and yielded as one TRANSACTION_PAYLOAD_EVENT
    (zstd) ending where the XID ends. A statement of its own, an XA transaction and everything outside a
    transaction pass as they are. The library event of the payload is built as the stream's reader builds an
    event it does not know (with the reader's table map cache and control connection)."""

    def __init__(self, opener: Callable[[Any], Any], request: Any, read: Callable[[], None] = lambda: None):
        from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

        from cdc_core.binlog.event_source import SourceRequest

        self._wanted = frozenset(request.events)
        needed = {MariadbGtidEvent, QueryEvent, XidEvent, TableMapEvent, WriteRowsEvent, UpdateRowsEvent,
                  DeleteRowsEvent}
        self._source = opener(SourceRequest(request.start, self._wanted | needed, None))
        self.log_file, self.log_pos = request.start.file, request.start.pos
        self._read = read  # called at each payload yielded

    def __iter__(self):
        from pymysql.protocol import MysqlPacket
        from pymysqlreplication.event import MariadbGtidEvent, NotImplementedEvent, QueryEvent, XidEvent
        from pymysqlreplication.packet import BinLogPacketWrapper

        def ends(e: Any) -> bool:  # an XID, or the COMMIT of a transaction of non-transactional tables
            return type(e) is XidEvent or (type(e) is QueryEvent and str(e.query).strip().upper() == "COMMIT")

        held: list[bytes] | None = None
        source = self._source
        for event in source:
            raw = bytes(event.packet.packet.get_all_data()[1:])
            if held is not None:
                held.append(without_checksum(raw))
                if not ends(event):
                    continue
                h = EventHeader.parse(raw)
                data = transaction_payload(held, timestamp=h.timestamp, server_id=h.server_id, log_pos=h.log_pos)
                held = None
                wrapped = BinLogPacketWrapper(MysqlPacket(b"\x00" + data, "utf8"), source.table_map,
                                              source._ctl_connection, source.mysql_version, True,
                                              frozenset({NotImplementedEvent}), None, None, None, None, False, False,
                                              False, True, False)
                self.log_file, self.log_pos = source.log_file, source.log_pos
                self._read()
                yield wrapped.event
                continue
            if type(event) is MariadbGtidEvent and not event.flags & 0x01 and not event.flags & 0x40:
                held = []  # a transaction (not a statement of its own, FL_STANDALONE; not XA, FL_PREPARED_XA)
            self.log_file, self.log_pos = source.log_file, source.log_pos
            if type(event) in self._wanted:
                yield event

    def close(self) -> None:
        self._source.close()


def compressing(opener: Callable[[Any], Any], read: Callable[[], None] = lambda: None
                ) -> Callable[[Any], CompressingSource]:
    """An opener of :class:`CompressingSource` over the sources ``opener`` opens (``read``: called at each
    payload a source yields)."""
    return lambda request: CompressingSource(opener, request, read)
