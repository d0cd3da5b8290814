"""MariaDB's fixed-size binary types shown as text: INET4, INET6, UUID.

- Delta: string, as the server prints the value: ``192.168.0.1``; INET6 as sql_type_inet.cc
  prints it, which is not always RFC 5952 (``::ffff:192.168.0.1``, ``::1.2.3.4``, a single
  zero group shortened too); UUID lower-case ``8-4-4-4-12`` (the binlog carries the RFC byte
  order even for the UUIDs MariaDB stores byte-swapped).
- The binlog's table map describes them as BINARY(4) / BINARY(16) (their storage class), and
  cuts trailing zero bytes of a value as for any BINARY(n): the value is padded back, then
  printed. A text client reads the server's text.
- Checksum: the server's text.
- A NOT NULL column's implicit default is the zero address / the nil UUID.
- Key order: the server's index orders the stored bytes (``memcmp``), not the text: INET4 and
  INET6 store the address's bytes; a UUID is stored as written except one of versions 1-5
  with the RFC 4122 variant, which MariaDB stores with its groups reversed (node, clock
  sequence, time high, time mid, time low: sql_type_uuid.h, MariaDB 10.11.2 and later), so
  time-based UUIDs sort by time. A column created by a MariaDB before that (which swaps
  every UUID, kept until the table is rebuilt) is not in this order: the planner finds its
  bounds out of order and refuses it as a chunk key (cdc_core/chunks/planning.py).

Tested by tests/test_types.py (type matrix, test_inet_and_uuid_text_is_the_servers),
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py; the key order by
tests/test_chunk_key_types.py against the server's.
"""

from __future__ import annotations

import ipaddress
import struct
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec
from cdc_core.types.literals import text

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

_SIZES = {"inet4": 4, "inet6": 16, "uuid": 16}  # bytes in a row image
_ZERO_VALUES = {"inet4": "0.0.0.0", "inet6": "::", "uuid": "00000000-0000-0000-0000-000000000000"}


def _inet6_text(b: bytes) -> str:
    """An IPv6 address as MariaDB's INET6 prints it (sql_type_inet.cc: lower-case hex without
    leading zeros, the first longest run of zero words, even a single one, as '::', and the
    IPv4-compatible ::a.b.c.d and IPv4-mapped ::ffff:a.b.c.d forms)."""
    words = struct.unpack(">8H", b)
    gap_pos, gap_len, run_pos, run_len = -1, -1, -1, -1
    for i, w in enumerate((*words, 1)):  # a sentinel word ends a run at the end
        if w == 0:
            run_pos, run_len = (run_pos, run_len + 1) if run_pos >= 0 else (i, 1)
        elif run_pos >= 0:
            if run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
            run_pos, run_len = -1, -1
    out, i = [], 0
    while i < 8:
        if i == gap_pos:
            out.append("::" if i == 0 else ":")
            i += gap_len
        elif i == 6 and gap_pos == 0 and (gap_len == 6 or gap_len == 5 and words[5] == 0xFFFF):
            out.append(".".join(str(x) for x in b[12:]))
            break
        else:
            out.append(f"{words[i]:x}" + (":" if i < 7 else ""))
            i += 1
    return "".join(out)


def _printed(t: str, v: bytes) -> str:
    """INET4, INET6 and UUID text, as the server prints them, from their binlog bytes."""
    b = v.ljust(_SIZES[t], b"\x00")  # the binlog cuts trailing zero bytes
    if t == "inet4":
        return ".".join(str(x) for x in b)
    if t == "inet6":
        return _inet6_text(b)
    return str(uuid.UUID(bytes=b))  # the binlog holds the RFC 4122 byte order, not the swapped stored one


def _stored(t: str, text: str) -> bytes:
    """The bytes the server stores (and its index compares) for a value shown as ``text``."""
    if t == "inet4":
        return ipaddress.IPv4Address(text).packed
    if t == "inet6":
        return ipaddress.IPv6Address(text).packed
    b = uuid.UUID(text).bytes
    if 0 < b[6] < 0x60 and b[8] & 0x80:  # version 1-5, RFC 4122 variant: groups reversed
        return b[10:16] + b[8:10] + b[6:8] + b[4:6] + b[0:4]
    return b


class TextForms(Codec):
    data_types = frozenset(_SIZES)

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.string()

    def storage_class(self, col: Column) -> str:
        return f"binary({_SIZES[col.data_type]})"

    def binlog_value(self, col: Column, v: object) -> object:
        # text from a text client; bytes, or '' when all were cut, from the binlog
        return v if isinstance(v, str) and v else _printed(col.data_type, v or b"")

    def mysql_value(self, col: Column, q: str) -> str:
        return f"CAST({q} AS CHAR)"

    def delta_value(self, col: Column, r: str) -> str:
        return r

    def key_sort_key(self, col: Column, v: object) -> object:
        return _stored(col.data_type, v)

    def implicit_default(self, col: Column) -> object:
        return _ZERO_VALUES[col.data_type]

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return text(d)


CODECS = (TextForms(),)
