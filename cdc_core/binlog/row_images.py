"""Row images decoded straight from a row event's bytes, for the column types whose binlog
format is simple: the same values python-mysql-replication (with cdc_core/binlog/columns.py's
corrections) gives, at a fraction of its cost.

The library decodes every value through a chain of Python calls (a bitmap test, a walk down
a long ``if`` over the column type, a packet read, a struct unpack): about 3 µs a value, most
of the binlog reader's CPU time. :func:`compile_images` turns a table map into one reader
function per column, chosen once, so decoding a row is one call per value over a ``bytes``
buffer.

Invariants (tests/test_binlog_decoder.py: test_fast_images_equal_the_library, and the type
matrices of tests/test_types.py, which go through this path for the types below):
- A value is exactly what the library returns for it: integers (signed and unsigned, every
  width), FLOAT, DOUBLE, DECIMAL, DATE, DATETIME(fsp), TIMESTAMP(fsp), YEAR, ENUM, and
  CHAR/VARCHAR/TEXT/BINARY/VARBINARY/BLOB values decoded with the column's binlake codec (or
  kept as bytes for a binary column). Invalid dates decode as the library decodes them (None,
  or the library's own error).
- A table map with any other column (TIME, SET, BIT, JSON, spatial, MariaDB compressed, the
  pre-5.6 temporal formats, a column without a name), a row event whose column bitmaps leave a
  column out (binlog_row_image other than FULL) or a partial JSON update is decoded by the
  library: :func:`compile_images` returns None, or :meth:`RowImages.applies` says no.
- Reading the rows consumes the event's row data: ``event.rows`` is not read after.
"""

from __future__ import annotations

import codecs
import datetime as dt
import decimal
import struct
from collections.abc import Callable
from dataclasses import dataclass

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent

from cdc_core.types.charsets import decoder

Reader = Callable[[bytes, int], tuple[object, int]]  # (buffer, offset) -> (value, offset after it)

_BINLAKE_CODEC = "binlake_"  # binlog_columns.py's codecs; binlake_z_* (compressed) are not read here
_DECIMAL_DIGITS = 9
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of 0..8 leftover digits


def _fixed(fmt: str) -> Reader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)

    def read(buf: bytes, pos: int) -> tuple[object, int]:
        return unpack(buf, pos)[0], pos + size

    return read


def _int24(signed: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[object, int]:
        return int.from_bytes(buf[pos:pos + 3], "little", signed=signed), pos + 3

    return read


def _length_prefixed(size: int, text: Callable[[bytes], object]) -> Reader:
    """A string of ``size`` length bytes (little-endian) then the value, through ``text``."""
    if size == 1:
        def read(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + 1 + buf[pos]
            return text(buf[pos + 1:end]), end
    else:
        def read(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + size + int.from_bytes(buf[pos:pos + size], "little")
            return text(buf[pos + size:end]), end

    return read


def _temporal(head: int, fsp: int, make: Callable[[bytes], object]) -> Reader:
    """A DATETIME2 or TIMESTAMP2: ``head`` bytes that ``make`` turns into a time (None as the library
    gives it), then the fraction's bytes, as the library's __read_fsp reads them."""
    size, scale = (fsp + 1) // 2, 10 ** (6 - fsp)

    def read(buf: bytes, pos: int) -> tuple[object, int]:
        end = pos + head + size
        t = make(buf[pos:pos + head])
        if t is not None and size:
            us = int.from_bytes(buf[pos + head:end], "big", signed=True)
            if fsp % 2:
                us = int(us / 10)
            if us > 0:
                t = t.replace(microsecond=us * scale)
        return t, end

    return read


def _datetime2(raw: bytes) -> dt.datetime | None:
    v = int.from_bytes(raw, "big")
    ym = v >> 22 & 0x1FFFF
    try:
        return dt.datetime(ym // 13, ym % 13, v >> 17 & 31, v >> 12 & 31, v >> 6 & 63, v & 63)
    except ValueError:  # a zero or invalid date: the library returns None
        return None


def _timestamp2(raw: bytes) -> dt.datetime:
    return dt.datetime.utcfromtimestamp(int.from_bytes(raw, "big", signed=True))  # as the library: naive UTC


def _date(buf: bytes, pos: int) -> tuple[object, int]:
    v = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
    year, month, day = v >> 9 & 0x7FFF, v >> 5 & 15, v & 31
    if not (year and month and day):  # 0000-00-00 and other zero parts: None, as the library
        return None, pos + 3
    return dt.date(year, month, day), pos + 3


def _year(buf: bytes, pos: int) -> tuple[object, int]:
    return buf[pos] + 1900, pos + 1


def _decimal(precision: int, scale: int) -> Reader:
    """MySQL's packed DECIMAL, built into the same text the library builds (its __read_new_decimal)."""
    integral = precision - scale
    whole_int, whole_frac = integral // _DECIMAL_DIGITS, scale // _DECIMAL_DIGITS
    lead, tail_digits = _DECIMAL_BYTES[integral % _DECIMAL_DIGITS], scale % _DECIMAL_DIGITS
    tail = _DECIMAL_BYTES[tail_digits]
    size = lead + 4 * (whole_int + whole_frac) + tail
    Decimal = decimal.Decimal

    def read(buf: bytes, pos: int) -> tuple[object, int]:
        raw = bytearray(buf[pos:pos + size])
        if raw[0] & 0x80:
            text, mask = "", 0
        else:
            text, mask = "-", -1
        raw[0] ^= 0x80
        at = lead
        if lead:
            text += str(int.from_bytes(raw[:lead], "big", signed=True) ^ mask)
        for _ in range(whole_int):
            text += f"{int.from_bytes(raw[at:at + 4], 'big', signed=True) ^ mask:09d}"
            at += 4
        text += "."
        for _ in range(whole_frac):
            text += f"{int.from_bytes(raw[at:at + 4], 'big', signed=True) ^ mask:09d}"
            at += 4
        if tail:
            text += f"{int.from_bytes(raw[at:at + tail], 'big', signed=True) ^ mask:0{tail_digits}d}"
        return Decimal(text), pos + size

    return read


def _enum(size: int, members: list[str] | None) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[object, int]:
        i = int.from_bytes(buf[pos:pos + size], "little")
        return (members[i] if members else None), pos + size

    return read


def _text(col) -> Callable[[bytes], object] | None:
    """How the library (with binlake's codecs) turns a string column's bytes into its value, or None
    when this module does not decode that column."""
    name = col.character_set_name
    if name is None:
        return None
    if name.startswith(_BINLAKE_CODEC):
        charset = name[len(_BINLAKE_CODEC):]
        # binlog_columns._codec's own text function; binary values pass binlake's codecs only when compressed
        return None if charset.startswith("z_") or charset == "binary" else decoder(charset)
    try:
        codecs.lookup(RowsEvent.charset_to_encoding(name))
    except LookupError:  # the library keeps the bytes (a binary column)
        return _binary
    return None


def _binary(raw: bytes) -> bytes | str:
    """A binary column's bytes as the library gives them: '' when empty (Python decodes an empty
    buffer without looking its codec up, so the library's decode succeeds there)."""
    return raw or ""


def _reader(col) -> Reader | None:
    """The reader of one table-map column, or None when the library must decode it."""
    t = col.type
    if col.binlake_decode is not None or t != col.binlake_type or getattr(col, "compressed", False):
        return None  # a value binlake corrects after the library (binlog_columns.py)
    unsigned = col.unsigned
    if t == FIELD_TYPE.TINY:
        return _fixed("<B" if unsigned else "<b")
    if t == FIELD_TYPE.SHORT:
        return _fixed("<H" if unsigned else "<h")
    if t == FIELD_TYPE.INT24:
        return _int24(not unsigned)
    if t == FIELD_TYPE.LONG:
        return _fixed("<I" if unsigned else "<i")
    if t == FIELD_TYPE.LONGLONG:
        return _fixed("<Q" if unsigned else "<q")
    if t == FIELD_TYPE.FLOAT:
        return _fixed("<f")
    if t == FIELD_TYPE.DOUBLE:
        return _fixed("<d")
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal(col.precision, col.decimals)
    if t == FIELD_TYPE.DATETIME2:
        return _temporal(5, col.fsp, _datetime2)
    if t == FIELD_TYPE.TIMESTAMP2:
        return _temporal(4, col.fsp, _timestamp2)
    if t == FIELD_TYPE.DATE:
        return _date
    if t == FIELD_TYPE.YEAR:
        return _year
    if t == FIELD_TYPE.ENUM:
        return _enum(col.size, col.enum_values)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        text = _text(col)
        if text is None:
            return None
        return _length_prefixed(col.length_size if t == FIELD_TYPE.BLOB else 2 if col.max_length > 255 else 1, text)
    return None


_SHAPE = ("name", "type", "unsigned", "max_length", "length_size", "size", "fsp", "precision", "decimals",
          "character_set_name", "enum_values", "set_values")


def column_key(col) -> tuple:
    """What decides a table-map column's decoding (its name, type and type parameters), hashable."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in (getattr(col, a, None) for a in _SHAPE))


@dataclass(frozen=True)
class RowImages:
    """A table map's row-image decoder: the kept columns' values of each image, in table-map order."""

    readers: tuple[Reader, ...]
    keep: tuple[int, ...] | None  # indexes of the kept columns; None: all of them
    full: bytes  # a column bitmap naming every column

    def applies(self, event) -> bool:
        """Whether ``event``'s images hold every column (binlog_row_image=FULL), as the readers expect."""
        if event.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT or event.columns_present_bitmap != self.full:
            return False
        return not isinstance(event, UpdateRowsEvent) or event.columns_present_bitmap2 == self.full

    def rows(self, event) -> list:
        """The event's rows as value tuples (updates: (before, after) pairs); consumes its row data."""
        if not event.complete:
            return []
        packet = event.packet
        buf = bytes(packet.read(event.event_size - packet.read_bytes))
        pos, n, out = 0, len(buf), []
        image = self._image
        if isinstance(event, UpdateRowsEvent):
            while pos < n:
                before, pos = image(buf, pos)
                after, pos = image(buf, pos)
                out.append((before, after))
        else:
            while pos < n:
                row, pos = image(buf, pos)
                out.append(row)
        return out

    def _image(self, buf: bytes, pos: int) -> tuple[tuple, int]:
        readers = self.readers
        width = len(self.full)  # the null bitmap has a bit per column, as the column bitmap
        nulls = int.from_bytes(buf[pos:pos + width], "little")
        pos += width
        values = []
        append = values.append
        if nulls:
            for read in readers:
                if nulls & 1:
                    append(None)
                else:
                    v, pos = read(buf, pos)
                    append(v)
                nulls >>= 1
        else:
            for read in readers:
                v, pos = read(buf, pos)
                append(v)
        keep = self.keep
        return (tuple(values) if keep is None else tuple([values[i] for i in keep])), pos


def compile_images(columns: list, keep: tuple[int, ...] | None) -> RowImages | None:
    """The decoder of a table map's ``columns`` (prepared by binlog_columns.prepare) keeping the
    columns at ``keep`` (None: all), or None when a column needs the library (see the module doc)."""
    readers = []
    for col in columns:
        r = _reader(col) if col.name else None
        if r is None:
            return None
        readers.append(r)
    n = len(columns)
    return RowImages(tuple(readers), keep, ((1 << n) - 1).to_bytes((n + 7) // 8, "little"))
