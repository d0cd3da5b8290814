"""Column decoding python-mysql-replication gets wrong or cannot do, corrected around it
(the binlog half of cdc_core/types/mapping.py's invariant): the library patched here, and
each column's own corrections asked of its codec (cdc_core/types/<family>.py: ``prepare``).

The binlog readers call :func:`prepare` on a row event before reading ``event.rows``,
and :func:`decode_values` on every row image the library decodes (``cdc_core.binlog.decoder.RowDecoder``).

- Strings: the library decodes a CHAR/VARCHAR/TEXT value with the Python codec named
  like the column's character set, which is not the server's set (latin1 as cp1252 raises
  on five bytes, utf16 and utf32 decode little-endian, ucs2 and several others stay
  bytes). The string codecs (cdc_core/types/strings.py) name instead a codec
  ``binlake_<charset>`` registered here, which decodes with cdc_core/types/charsets.py (the
  server's tables, never raising); the charset is the one of the table map's collation.
- ENUM and SET: the library decodes the table map's member names as UTF-8 whatever their
  character set ('' when that fails). :func:`_member_bytes` keeps them as bytes, and their
  codec (cdc_core/types/enum_set.py) decodes them with the column's collation and writes a
  SET value as its members in definition order.
- MariaDB COMPRESSED columns (binlog types 140, 141) are unknown to the library, whose
  table-map parser then loses its place: :class:`_Column` reads their metadata as a BLOB /
  VARCHAR's, and their codec ``binlake_z_<charset>`` inflates the value first (MariaDB's
  field_comp.cc format); a compressed binary value passes the codec as latin-1 text, which
  the string codec turns back into bytes.
- The old TIME format (MariaDB 5.3 / MySQL 5.5 tables, binlog type 11): the library reads
  its signed ±HHMMSS integer as unsigned; the TIME codec (cdc_core/types/temporal.py) makes
  it read a signed 3-byte integer, then turns that into the time.

Tested by tests/test_types.py (the type and charset matrices through both paths).
"""

from __future__ import annotations

import codecs
import zlib

from pymysqlreplication import column as _column_module
from pymysqlreplication import row_event as _row_event_module
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import TableMapEvent

from cdc_core.types.charsets import decoder
from cdc_core.types.registry import table_map_codec
from cdc_core.types.strings import CODEC_PREFIX

BLOB_COMPRESSED, VARCHAR_COMPRESSED = 140, 141  # MariaDB's MYSQL_TYPE_*_COMPRESSED


class _Column(_column_module.Column):
    """The library's column definition, also reading MariaDB's compressed types (their
    metadata is a BLOB's / VARCHAR's); ``compressed`` marks them."""

    compressed = False

    def __init__(self, *args, **kwargs):
        if len(args) == 2 and args[0] in (BLOB_COMPRESSED, VARCHAR_COMPRESSED):
            base = FIELD_TYPE.BLOB if args[0] == BLOB_COMPRESSED else FIELD_TYPE.VARCHAR
            super().__init__(base, args[1])
            self.compressed = True
        else:
            super().__init__(*args, **kwargs)


_row_event_module.Column = _Column  # the table-map parser builds its columns with this name


def _member_bytes(self, length: int) -> list[list[bytes]]:
    """TableMapEvent._read_type_values keeping ENUM/SET member names as bytes."""
    result = []
    end = self.packet.read_bytes + length
    while self.packet.read_bytes < end:
        count = self.packet.read_length_coded_binary()
        result.append([self.packet.read_variable_length_string() for _ in range(count)])
    return result


TableMapEvent._read_type_values = _member_bytes


def _codec(name: str) -> codecs.CodecInfo | None:
    """The codec the library decodes a prepared string column with (see the module doc)."""
    if not name.startswith(CODEC_PREFIX):
        return None
    charset = name[len(CODEC_PREFIX):]
    compressed = charset.startswith("z_")
    text = decoder(charset[2:] if compressed else charset)

    def decode(data, errors: str = "strict") -> tuple[str, int]:
        value = text(inflate(bytes(data)) if compressed else bytes(data))
        return (value if isinstance(value, str) else value.decode("latin-1")), len(data)

    return codecs.CodecInfo(None, decode, name=name)


codecs.register(_codec)


def prepare(event) -> None:
    """Before ``event.rows`` is read: each column's codec sets the library's decoding up (string
    columns decode with binlake's codecs, ENUM/SET member names with their character set, old
    TIME values read signed: see the module doc). Idempotent; the columns belong to the
    event's table map."""
    decoders = []
    for col in event.columns:
        if not getattr(col, "binlake_prepared", False):
            col.binlake_type = col.type  # the table map's type (a codec may re-type the column)
            col.binlake_decode = table_map_codec(col).prepare(col)
            col.binlake_prepared = True
        if col.binlake_decode is not None:
            decoders.append((col.name, col.binlake_decode))
    event.binlake_decoders = decoders


def decode_values(event, values: dict) -> dict:
    """A row image's values corrected after the library by their codecs (SET values as text,
    old-format TIME values as times, compressed binary values as bytes)."""
    for name, decode in event.binlake_decoders:
        v = values.get(name)
        if v is not None:
            values[name] = decode(v)
    return values


def inflate(stored: bytes) -> bytes:
    """A MariaDB COMPRESSED column's value: '' stays ''; a header byte with bit 7 clear
    precedes the value as is; otherwise bits 0-2 give how many big-endian bytes hold the
    original length, bit 3 means raw deflate (no zlib wrapper), and the deflated data follows."""
    if not stored:
        return stored
    header = stored[0]
    if not header & 0x80:
        return stored[1:]
    n = header & 0x07
    length = int.from_bytes(stored[1 : 1 + n], "big")
    data = zlib.decompress(stored[1 + n :], -zlib.MAX_WBITS if header & 0x08 else zlib.MAX_WBITS)
    if len(data) != length:
        raise ValueError(f"compressed column value inflates to {len(data)} bytes, its header says {length}")
    return data
