"""Column decoding python-mysql-replication gets wrong or cannot do, corrected around it,
one function per kind of column (the binlog half of cdc_core/types/mapping.py's invariant).

The binlog readers call :func:`prepare` on a row event before reading ``event.rows``,
and :func:`decode_values` on every row image the library decodes (``cdc_core.binlog.decoder.RowDecoder``).

- Strings: the library decodes a CHAR/VARCHAR/TEXT value with the Python codec named
  like the column's character set, which is not the server's set (latin1 as cp1252 raises
  on five bytes, utf16 and utf32 decode little-endian, ucs2 and several others stay
  bytes). ``prepare`` names instead a codec ``binlake_<charset>`` registered here, which
  decodes with cdc_core/types/charsets.py (the server's tables, never raising); the charset is
  the one of the table map's collation.
- ENUM and SET: the library decodes the table map's member names as UTF-8 whatever their
  character set ('' when that fails). :func:`_member_bytes` keeps them as bytes and
  ``prepare`` decodes them with the column's collation; ``decode_values`` writes a SET
  value as its members in definition order. The table map is the only exact source of
  member names: the server's own metadata (information_schema, SHOW CREATE TABLE) shows a
  4-byte character of a member as '?'.
- MariaDB COMPRESSED columns (binlog types 140, 141) are unknown to the library, whose
  table-map parser then loses its place: :class:`_Column` reads their metadata as a BLOB /
  VARCHAR's, and their codec ``binlake_z_<charset>`` inflates the value first (MariaDB's
  field_comp.cc format); a compressed binary value passes the codec as latin-1 text, which
  ``decode_values`` turns back into bytes.
- The old TIME format (MariaDB 5.3 / MySQL 5.5 tables, binlog type 11): the library reads
  its signed ±HHMMSS integer as unsigned, so negative times come out wrong. ``prepare``
  makes it read a signed 3-byte integer, which ``decode_values`` turns into the time.

Tested by tests/test_types.py (the type and charset matrices through both paths).
"""

from __future__ import annotations

import codecs
import datetime as dt
import zlib

from pymysqlreplication import column as _column_module
from pymysqlreplication import row_event as _row_event_module
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import TableMapEvent

from cdc_core.types.charsets import charset_of, decoder

BLOB_COMPRESSED, VARCHAR_COMPRESSED = 140, 141  # MariaDB's MYSQL_TYPE_*_COMPRESSED
_STRING_TYPES = (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
_CODEC = "binlake_"  # codecs binlake_<charset> and binlake_z_<charset> (compressed)


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
    if not name.startswith(_CODEC):
        return None
    charset = name[len(_CODEC):]
    compressed = charset.startswith("z_")
    text = decoder(charset[2:] if compressed else charset)

    def decode(data, errors: str = "strict") -> tuple[str, int]:
        value = text(inflate(bytes(data)) if compressed else bytes(data))
        return (value if isinstance(value, str) else value.decode("latin-1")), len(data)

    return codecs.CodecInfo(None, decode, name=name)


codecs.register(_codec)


def prepare(event) -> None:
    """Before ``event.rows`` is read: string columns decode with binlake's codecs, ENUM/SET
    member names with their character set, old TIME values read signed (see the module doc).
    Idempotent; the columns belong to the event's table map."""
    decoders = []
    for col in event.columns:
        if not getattr(col, "binlake_prepared", False):
            col.binlake_type = col.type  # the table map's type (old TIME is read as an integer below)
            col.binlake_decode = _prepare_column(col)
            col.binlake_prepared = True
        if col.binlake_decode is not None:
            decoders.append((col.name, col.binlake_decode))
    event.binlake_decoders = decoders


def _prepare_column(col):
    """Set the library's decoding of one column up; returns the correction its values need after, if any."""
    if col.type in _STRING_TYPES:
        charset = charset_of(col.collation_name)
        if charset != "binary" or col.compressed:
            col.character_set_name = f"{_CODEC}{'z_' if col.compressed else ''}{charset}"
        return _latin1_bytes if charset == "binary" and col.compressed else None
    if col.type == FIELD_TYPE.ENUM and col.enum_values:
        col.enum_values = ["", *_members(col, col.enum_values[1:])]
    elif col.type == FIELD_TYPE.SET and col.set_values:
        col.set_values = order = _members(col, col.set_values)
        return lambda members: ",".join(m for m in order if m in members)
    elif col.type == FIELD_TYPE.TIME:
        col.type, col.unsigned = FIELD_TYPE.INT24, False
        return _old_time
    return None


def decode_values(event, values: dict) -> dict:
    """A row image's SET values as text, old-format TIME values as times and compressed binary
    values as bytes (see the module doc)."""
    for name, decode in event.binlake_decoders:
        v = values.get(name)
        if v is not None:
            values[name] = decode(v)
    return values


def _latin1_bytes(v: str) -> bytes:
    return v.encode("latin-1")


def _old_time(hhmmss: int) -> dt.timedelta:
    sign, v = (-1, -hhmmss) if hhmmss < 0 else (1, hhmmss)
    return sign * dt.timedelta(hours=v // 10000, minutes=v // 100 % 100, seconds=v % 100)


def _members(col, names: list[bytes]) -> list[str]:
    text = decoder(col.collation_name)
    return [m if isinstance(m, str) else _as_text(text(m)) for m in names]


def _as_text(v: str | bytes) -> str:
    return v if isinstance(v, str) else v.decode("utf-8", "replace")  # members of a binary ENUM/SET

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
