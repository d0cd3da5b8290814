"""MySQL's compressed transactions: TRANSACTION_PAYLOAD_EVENT (type 40), written while
``binlog_transaction_compression`` is ON, holds a whole transaction's events (BEGIN, table maps,
row events, XID) compressed. python-mysql-replication does not decode it; this module opens it
into the library's own event objects, which the event loop (cdc_core/binlog/event_loop.py) hands
to the same handlers as the events of an uncompressed transaction.

The body (MySQL's libs/mysql/binlog/event/control_events.h, Transaction_payload_event): fields
``<type> <length> <value>`` (length-encoded integers; type 0 ends them: 1 the payload's size, 2
the compression type, 3 the uncompressed size), then the payload. Inside, the events are written
one after another as in a binlog file, without CRC32 trailers.

Invariants (tests/test_transaction_payload.py, tests/test_mysql_corpus.py):
- Compression types zstd (0) and none (255) are decoded; any other is refused.
- The uncompressed size is bounded: a payload whose header or whose data says more than
  ``MAX_UNCOMPRESSED`` bytes is refused before (or while) it is decompressed, so a corrupt or
  hostile size cannot exhaust memory; a compressed transaction is held whole while it is read.
- The decompressed bytes are exactly the header's uncompressed size and split into whole events
  (each at least a header long, none running past the end), else the payload is refused.
- Every inner event is decoded by the library's event classes as the stream decodes an event of a
  server with CRC32 checksums (a trailer is appended: the library's readers assume one), with the
  stream's table map cache, so inner table maps serve inner row events as outer ones do.
- A refusal is a ``CompressedTransaction`` (cdc_core/binlog/undecodable.py) naming the payload's end
  position and why: never a payload passed over.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import zstandard
from pymysql.protocol import MysqlPacket
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import TableMapEvent

from cdc_core.binlog.undecodable import refusal
from cdc_core.offset.position import BinlogPosition

TRANSACTION_PAYLOAD_EVENT = 0x28
HEADER = 19  # a v4 event's common header
CRC = 4
ZSTD, NONE = 0, 255
# A compressed transaction is decoded in memory whole: its uncompressed size is bounded by the largest
# event a MySQL replica accepts (replica_max_allowed_packet's maximum, 1 GiB).
MAX_UNCOMPRESSED = 1 << 30
_END, _PAYLOAD_SIZE, _COMPRESSION, _UNCOMPRESSED_SIZE = 0, 1, 2, 3


@dataclass(frozen=True)
class PayloadHeader:
    """A TRANSACTION_PAYLOAD_EVENT's fields; the payload starts at ``data_at`` of the body."""

    compression: int
    payload_size: int
    uncompressed_size: int
    data_at: int


def _refused(why: str, at: BinlogPosition):
    return refusal(TRANSACTION_PAYLOAD_EVENT, at, why)


def lenenc(body: bytes, at: int) -> tuple[int, int]:
    """A length-encoded integer (MySQL's net_field_length) at ``at`` and the position after it;
    raises ValueError when it is malformed or runs past ``body``."""
    if at >= len(body):
        raise ValueError(f"a length-encoded integer past the end (byte {at})")
    first = body[at]
    if first < 0xFB:
        return first, at + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if width is None or at + 1 + width > len(body):
        raise ValueError(f"bad length-encoded integer at byte {at}")
    return int.from_bytes(body[at + 1:at + 1 + width], "little"), at + 1 + width


def payload_header(body: bytes) -> PayloadHeader:
    """The fields of a TRANSACTION_PAYLOAD_EVENT body (raises ValueError on a malformed one)."""
    fields: dict[int, int] = {}
    at = 0
    while True:
        if at >= len(body):
            raise ValueError("the payload's fields run past the event")
        kind, at = lenenc(body, at)
        if kind == _END:
            break
        length, at = lenenc(body, at)
        if at + length > len(body):
            raise ValueError(f"payload field {kind} runs past the event")
        fields[kind], _ = lenenc(body[:at + length], at)
        at += length
    size = fields.get(_PAYLOAD_SIZE, len(body) - at)
    if at + size > len(body):
        raise ValueError(f"the payload's size {size} runs past the event")
    return PayloadHeader(fields.get(_COMPRESSION, NONE), size, fields.get(_UNCOMPRESSED_SIZE, size), at)


def inner_event_bytes(body: bytes, at: BinlogPosition) -> list[bytes]:
    """The events a TRANSACTION_PAYLOAD_EVENT body holds (each its header and body, no trailer);
    refused as the module invariants say. ``at``: the payload's end position, for the message."""
    try:
        head = payload_header(body)
    except (ValueError, IndexError) as e:
        raise _refused(f"its fields are malformed ({e})", at) from None
    if head.uncompressed_size > MAX_UNCOMPRESSED:
        raise _refused(f"it says it holds {head.uncompressed_size} bytes uncompressed, more than binlake "
                              f"decodes ({MAX_UNCOMPRESSED})", at)
    data = body[head.data_at:head.data_at + head.payload_size]
    if head.compression == ZSTD:
        raw = _zstd(data, head.uncompressed_size, at)
    elif head.compression == NONE:
        raw = bytes(data)
    else:
        raise _refused(f"its compression type {head.compression} is not zstd (0) or none (255)", at)
    if len(raw) != head.uncompressed_size:
        raise _refused(f"its data does not decompress to its stated size ({len(raw)} bytes, the header says "
                       f"{head.uncompressed_size})", at)
    events, pos = [], 0
    while pos < len(raw):
        if pos + HEADER > len(raw):
            raise _refused(f"an inner event at byte {pos} is cut short", at)
        size = struct.unpack_from("<I", raw, pos + 9)[0]
        if size < HEADER or pos + size > len(raw):
            raise _refused(f"the inner event at byte {pos} says it is {size} bytes long", at)
        events.append(raw[pos:pos + size])
        pos += size
    return events


def _zstd(data: bytes, size: int, at: BinlogPosition) -> bytes:
    """A zstd frame's data, never more than ``size`` bytes: a frame that states another content size
    is refused before anything is allocated for it."""
    try:
        stated = zstandard.frame_content_size(data)
        if stated not in (-1, size):
            raise _refused(f"its data does not decompress to its stated size (its zstd frame says {stated} bytes, "
                           f"the header {size})", at)
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=max(size, 1))
    except zstandard.ZstdError as e:
        raise _refused(f"its data does not decompress to its stated size ({e})", at) from None


def server_form(raw: bytes) -> bytes:
    """An inner event as a server with binlog_checksum=CRC32 sends it: the size counts a trailer,
    the CRC32 of header and body follows."""
    event = bytearray(raw)
    struct.pack_into("<I", event, 9, len(raw) + CRC)
    return bytes(event) + zlib.crc32(event).to_bytes(CRC, "little")


def event_body(event) -> bytes:
    """The body (after the 19-byte header, without a trailer) of a library event object."""
    data = event.packet.packet.get_all_data()
    return bytes(data[1 + HEADER:1 + HEADER + event.event_size])


def inner_events(payload, handled: Iterable[type], at: BinlogPosition) -> Iterator[object]:
    """The library's event objects for the events in ``payload`` (a library event of type 40, read
    from the stream: its table map cache, control connection and server version are used), of the
    classes in ``handled``; other events inside (table maps aside, which are read into the cache)
    are not built."""
    allowed = frozenset(handled)
    built = allowed | {TableMapEvent}  # table maps go to the cache, for the row events after them
    for raw in inner_event_bytes(event_body(payload), at):
        if raw[4] == TRANSACTION_PAYLOAD_EVENT:
            raise _refused("it holds another compressed transaction", at)
        packet = MysqlPacket(b"\x00" + server_form(raw), "utf8")
        wrapped = BinLogPacketWrapper(packet, payload.table_map, payload._ctl_connection, payload.mysql_version,
                                      True, built, None, None, None, None, False, False, False, True, False,
                                      False, payload._post_header_lengths)
        if wrapped.event is not None and type(wrapped.event) in allowed:
            yield wrapped.event

