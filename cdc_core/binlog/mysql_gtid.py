"""MySQL's GTID events read from their bytes: GTID_LOG_EVENT (33) with the fields MySQL 8.0 added
after the logical clock, GTID_TAGGED_LOG_EVENT (42, MySQL 8.4+: the MySQL serialization library's
format) and PREVIOUS_GTIDS_LOG_EVENT (35, untagged and tagged). An ANONYMOUS_GTID_LOG_EVENT (34,
a server without GTIDs) starts a transaction that has none: the event loop needs no field of it.
python-mysql-replication reads a GTID event's sid, gno and logical clock only, and knows neither
the tagged event nor the tagged GTID set.

A transaction's GTID is written ``uuid:n``, or ``uuid:tag:n`` for a tagged one, lower case (MySQL's
own text, what ``gtid_executed`` holds, cdc_core/offset/gtid.py's canonical form): the plain string
every record carries (cdc_core/binlog/events.py).

Formats (MySQL's libs/mysql/binlog/event/control_events.h, libs/mysql/serialization/readme.md):
- GTID_LOG_EVENT: flags (1), sid (16), gno (8), then from 5.7: typecode 2, last_committed (8),
  sequence_number (8); from 8.0.1: immediate commit timestamp (7 bytes, microseconds; bit 55 set
  when the original one follows, else original = immediate), original (7); from 8.0.2 a
  transaction length (length-encoded integer); from 8.0.14 the immediate server version (4; bit 31
  set when the original one follows), original (4); 8.0.20+ may add an 8-byte commit group ticket.
- GTID_TAGGED_LOG_EVENT: a serialization version byte, then a message: its size (varlen, counting
  the whole message), the last non-ignorable field id (varlen), and fields ``<id> <value>``: 0
  flags, 1 uuid (16 varlen bytes), 2 gno (signed varlen), 3 tag (varlen length + bytes), 4
  last_committed, 5 sequence_number (signed), 6 immediate commit timestamp, 7 original (when it
  differs), 8 transaction length, 9 immediate server version, 10 original (when it differs), 11 the
  commit group ticket (when set). Varlen: the count of trailing one bits of the first byte, plus one,
  is the number of bytes (little-endian); the value follows those bits (9 bytes: the next 8 bytes).
  Signed: the lowest bit is the sign, ``x >= 0`` as ``x << 1``, ``x < 0`` as ``(-(x + 1) << 1) | 1``.
- PREVIOUS_GTIDS_LOG_EVENT: 8 bytes, the top byte 1 for the tagged format (then the sid count in
  bits 8-55), else the sid count; per sid: uuid (16), in the tagged format a tag (varlen length +
  bytes, empty for none), the interval count (8), intervals [start, end) (8 + 8).

Invariants (tests/test_mysql_corpus.py): every field a source states is
read as it states it; an event shorter than its fields say, a tagged event whose version or
non-ignorable field binlake does not know raise ``ValueError`` (the event loop stops there).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from cdc_core.binlog.payload import lenenc

_UNDEFINED_SERVER_VERSION = 999999
_TAGGED_SERIALIZATION_VERSION = 1


@dataclass(frozen=True)
class MysqlGtid:
    """One GTID event's fields."""

    sid: str
    gno: int
    tag: str | None = None
    last_committed: int = 0
    sequence_number: int = 0
    immediate_commit_timestamp: int = 0  # microseconds since the epoch; 0: not written (before 8.0.1)
    original_commit_timestamp: int = 0
    transaction_length: int = 0
    immediate_server_version: int = 0  # e.g. 80019; 0: not written
    original_server_version: int = 0

    @property
    def gtid(self) -> str:
        """``uuid:n`` or ``uuid:tag:n``."""
        return f"{self.sid}:{self.tag}:{self.gno}" if self.tag else f"{self.sid}:{self.gno}"

    @property
    def commit_us(self) -> int:
        """The transaction's commit time on its original source (µs since the epoch, UTC), 0 where
        the event holds none (before 8.0.1); an original of 0 was written on a 5.7 source, where
        this server's own (immediate) time stands for it."""
        return self.original_commit_timestamp or self.immediate_commit_timestamp


def _need(body: bytes, end: int, what: str) -> None:
    if end > len(body):
        raise ValueError(f"GTID event of {len(body)} bytes ends before its {what}")


def gtid_event(body: bytes) -> MysqlGtid:
    """A GTID_LOG_EVENT's body."""
    _need(body, 25, "gno")
    sid = str(uuid.UUID(bytes=body[1:17]))
    gno = struct.unpack_from("<q", body, 17)[0]
    fields: dict[str, int] = {}
    at = 25
    if len(body) > at and body[at] == 2:  # the logical clock (5.7.5+)
        _need(body, at + 17, "logical clock")
        fields["last_committed"], fields["sequence_number"] = struct.unpack_from("<qq", body, at + 1)
        at += 17
        if len(body) >= at + 7:  # commit timestamps (8.0.1+)
            immediate = int.from_bytes(body[at:at + 7], "little")
            at += 7
            original = immediate
            if immediate & (1 << 55):
                immediate &= ~(1 << 55)
                _need(body, at + 7, "original commit timestamp")
                original = int.from_bytes(body[at:at + 7], "little")
                at += 7
            fields["immediate_commit_timestamp"], fields["original_commit_timestamp"] = immediate, original
        if len(body) > at:  # transaction length (8.0.2+)
            fields["transaction_length"], at = lenenc(body, at)
        if len(body) >= at + 4:  # server versions (8.0.14+)
            immediate = struct.unpack_from("<I", body, at)[0]
            at += 4
            original = immediate
            if immediate & (1 << 31):
                immediate &= ~(1 << 31)
                _need(body, at + 4, "original server version")
                original = struct.unpack_from("<I", body, at)[0]
            fields["immediate_server_version"], fields["original_server_version"] = immediate, original
    return MysqlGtid(sid, gno, **fields)


# --- the MySQL serialization library's format (tagged GTIDs) ----------------------------------


def varlen(buf: bytes, at: int) -> tuple[int, int]:
    """An unsigned variable-length integer at ``at`` and the position after it."""
    if at >= len(buf):
        raise ValueError("varlen integer past the end")
    first = buf[at]
    n = 1
    while n < 9 and first & (1 << (n - 1)):
        n += 1
    if at + n > len(buf):
        raise ValueError("varlen integer past the end")
    if n == 1:
        return first >> 1, at + 1
    rest = int.from_bytes(buf[at + 1:at + n], "little")
    if n == 9:
        return rest, at + n
    return (first >> n) | (rest << (8 - n)), at + n


def signed_varlen(buf: bytes, at: int) -> tuple[int, int]:
    """A signed variable-length integer (the lowest bit is the sign)."""
    u, at = varlen(buf, at)
    return (-(u >> 1) - 1 if u & 1 else u >> 1), at


def tagged_gtid_event(body: bytes) -> MysqlGtid:
    """A GTID_TAGGED_LOG_EVENT's body."""
    if not body or body[0] >> 1 != _TAGGED_SERIALIZATION_VERSION:
        raise ValueError(f"tagged GTID event: serialization version byte {body[:1].hex()} binlake does not know")
    size, at = varlen(body, 1)
    last_non_ignorable, at = varlen(body, at)
    end = min(size, len(body))
    raw: dict[int, object] = {}
    while at < end:
        field, at = varlen(body, at)
        if field == 1:
            sid = bytearray()
            for _ in range(16):
                b, at = varlen(body, at)
                sid.append(b)
            raw[1] = bytes(sid)
        elif field == 3:
            length, at = varlen(body, at)
            _need(body, at + length, "tag")
            raw[3] = body[at:at + length].decode("ascii").lower()  # MySQL's tags are lower case; be sure
            at += length
        elif field in (2, 4, 5):
            raw[field], at = signed_varlen(body, at)
        elif field <= 11:
            raw[field], at = varlen(body, at)
        elif field <= last_non_ignorable:
            raise ValueError(f"tagged GTID event: field {field}, which binlake does not know, may not be ignored")
        else:
            break  # a later field a newer server added; its readers may ignore it
    if 1 not in raw or 2 not in raw:
        raise ValueError("tagged GTID event without its uuid or gno")
    immediate_ts, immediate_version = raw.get(6, 0), raw.get(9, _UNDEFINED_SERVER_VERSION)
    return MysqlGtid(str(uuid.UUID(bytes=raw[1])), raw[2], raw.get(3) or None, raw.get(4, 0), raw.get(5, 0),
                     immediate_ts, raw.get(7, immediate_ts), raw.get(8, 0), immediate_version,
                     raw.get(10, immediate_version))


def previous_gtids(body: bytes) -> str:
    """A PREVIOUS_GTIDS_LOG_EVENT's GTID set as MySQL writes it: ``uuid:1-5:7,uuid2:tag:1-3``
    (intervals ``a-b`` inclusive, ``a`` alone for one; a uuid's tags after its untagged intervals)."""
    _need(body, 8, "sid count")
    head = struct.unpack_from("<Q", body, 0)[0]
    tagged = head >> 56 == 1
    count = (head >> 8) & ((1 << 48) - 1) if tagged else head
    at = 8
    sets: dict[str, list[str]] = {}
    for _ in range(count):
        _need(body, at + 16, "uuid")
        sid = str(uuid.UUID(bytes=body[at:at + 16]))
        at += 16
        tag = ""
        if tagged:
            length, at = varlen(body, at)
            _need(body, at + length, "tag")
            tag = body[at:at + length].decode("ascii").lower()
            at += length
        _need(body, at + 8, "interval count")
        n = struct.unpack_from("<Q", body, at)[0]
        at += 8
        _need(body, at + 16 * n, "intervals")
        intervals = []
        for i in range(n):
            start, stop = struct.unpack_from("<QQ", body, at + 16 * i)
            intervals.append(str(start) if stop == start + 1 else f"{start}-{stop - 1}")
        at += 16 * n
        sets.setdefault(sid, []).append(":".join(([tag] if tag else []) + intervals))
    return ",".join(":".join([sid, *parts]) for sid, parts in sets.items())
