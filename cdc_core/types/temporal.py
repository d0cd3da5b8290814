"""Dates and times: DATE, DATETIME(fsp), TIMESTAMP(fsp), TIME(fsp), YEAR (and YEAR(2)).

- Delta: DATE → date; DATETIME → timestamp_ntz (wall clock, µs); TIMESTAMP → timestamp, the
  UTC instant, whatever the session's or server's time zone; TIME → long, signed
  microseconds (TIME spans ±838:59:59); YEAR → short (``0000`` is 0, YEAR(2) keeps the
  four-digit year the server stores).
- Zero and impossible dates (a zero year, month or day, a day past the month's end) and the
  zero TIMESTAMP are NULL on every path: the snapshot checks DATE and DATETIME on the server
  (unless it reads them as stored, ``raw_dates``, and re-reads a chunk holding one:
  cdc_core/chunks/reader.py), reads TIMESTAMP and TIME as integers of microseconds.
- MariaDB 5.3's fractional temporal format (``/* mariadb-5.3 */`` in COLUMN_TYPE, fsp > 0)
  is not mapped, and not excludable: the binlog does not give its values' size.
- Checksum: DATE days since 1970-01-01, DATETIME microseconds since 1970-01-01 (wall clock),
  TIMESTAMP epoch microseconds, TIME signed microseconds, YEAR the year; date arithmetic on
  the server gives NULL for exactly the zero and impossible dates. Numbers, not text: a
  third of the server's time of DATE_FORMAT with validity checks, and DataFusion's to_char
  costs more than its casts. Both sides count proleptic Gregorian days.
- The library's mistakes corrected here: YEAR 0000 comes back as 1900; the zero TIMESTAMP as
  the epoch; a negative TIME(fsp) with a fraction is complemented in two parts (fixed with
  its none sources after the library); the old TIME format's ±HHMMSS is read unsigned
  (read as a signed 3-byte integer instead, then made a time).
- Row images: DATE, DATETIME2, TIMESTAMP2 and YEAR have binlake's own readers (the zero and
  invalid dates the library makes None are None); TIME, the pre-5.6 formats, the library's.
- DDL defaults: dates and times in MySQL's relaxed formats; YEAR 1–69 → 2000–2069, 70–99 →
  1970–1999 (the string '0' → 2000); a non-zero TIMESTAMP literal is in the ALTER session's
  time zone, which the statement does not give: not known.

Tested by tests/test_types.py (type matrix, MariaDB 5.3 formats), tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py, tests/test_handoff.py,
tests/test_chunk_reader.py.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec, DeclaredType, DefaultNotKnown, Fix, Reader, UnsupportedType, ValueFix
from cdc_core.types.literals import integral, number, text

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAYS = 719528  # TO_DAYS('1970-01-01')
_US = dt.timedelta(microseconds=1)
_DATE = re.compile(r"(\d{2,4})\D(\d{1,2})\D(\d{1,2})(?:(?:[T\s]+|\D)(\d{1,2})\D(\d{1,2})\D(\d{1,2})(?:\.(\d*))?)?")
_TIME = re.compile(r"(-)?(?:(\d+)\s+)?(\d+):(\d{1,2})(?::(\d{1,2}))?(?:\.(\d*))?")


# --- shared parts ------------------------------------------------------------------------------

def _valid_date(q: str) -> str:
    """SQL that is NULL for a zero or impossible date ('0000-00-00', '2020-00-15'), as the
    binlog decoder gives them (and the bulk reader panics on them)."""
    valid = f"YEAR({q}) > 0 AND MONTH({q}) > 0 AND DAYOFMONTH({q}) BETWEEN 1 AND DAYOFMONTH(LAST_DAY({q}))"
    return f"IF({valid}, {q}, NULL)"


def _microseconds(q: str) -> str:
    return f"CAST(TIME_TO_SEC({q}) * 1000000 AS SIGNED)"


def _epoch_microseconds(q: str) -> str:
    # Independent of the session and server time zones. Epoch 0 is the zero TIMESTAMP
    # ('0000-00-00 00:00:00'; real values start at 1 s): NULL.
    return f"CAST(NULLIF(UNIX_TIMESTAMP({q}), 0) * 1000000 AS SIGNED)"


def _fsp_column(col, name: str) -> Column:
    fsp = getattr(col, "fsp", 0) or 0
    return Column(col.name, name, name + (f"({fsp})" if fsp else ""), datetime_precision=fsp)


def _fsp_declared(name: str, t: DeclaredType, nullable: bool) -> Column:
    return Column(name, t.data_type, f"{t.data_type}({t.args[0]})" if t.args else t.data_type, nullable,
                  datetime_precision=t.args[0] if t.args else 0)


def _literal(d: DefaultValue) -> dt.datetime | None:
    """A DATE/DATETIME literal (None for the zero date)."""
    s = text(d).strip()
    if d.kind == "number" or re.fullmatch(r"\d+(\.\d*)?", s):
        digits, _, frac = s.partition(".")
        if len(digits) in (6, 12):  # YYMMDD[hhmmss]
            year = int(digits[:2])
            digits = str(year + (2000 if year < 70 else 1900)) + digits[2:]
        if len(digits) not in (8, 14):
            raise ValueError(f"{s!r} is not a date")
        parts = [digits[:4], digits[4:6], digits[6:8], digits[8:10] or "0", digits[10:12] or "0",
                 digits[12:14] or "0", frac]
    else:
        m = _DATE.fullmatch(s)
        if m is None:
            raise ValueError(f"{s!r} is not a date")
        parts = [p or "0" for p in m.groups()[:6]] + [m.group(7) or ""]
        if len(parts[0]) == 2:
            year = int(parts[0])
            parts[0] = str(year + (2000 if year < 70 else 1900))
    year, month, day, hour, minute, second = (int(p) for p in parts[:6])
    if year == month == day == 0:
        return None
    micros = int((parts[6] + "000000")[:6])
    return dt.datetime(year, month, day, hour, minute, second, micros)


def _fraction(fsp: int, head: int, make: Callable[[bytes], object]) -> Reader:
    """A DATETIME2 or TIMESTAMP2 row-image reader: ``head`` bytes that ``make`` turns into a time
    (None as the library gives it), then the fraction's bytes, as the library's __read_fsp reads them."""
    size, scale = (fsp + 1) // 2, 10 ** (6 - fsp)
    if not size:
        def whole(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + head
            return make(buf[pos:end]), end

        return whole

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


class _Temporal(Codec):
    _arrow: pa.DataType

    def arrow_type(self, col: Column) -> pa.DataType:
        if "mariadb-5.3" in col.column_type and (col.datetime_precision or 0) > 0:
            # MariaDB 5.3's fractional temporal format: logged without the metadata that gives its
            # size, so the binlog decoder cannot find where the next column starts.
            raise UnsupportedType(col.name, f"has type {col.column_type}, MariaDB 5.3's storage format of "
                                  "fractional temporal values, which the binlog decoder cannot read", excludable=False)
        return self._arrow

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.int64()  # selected as an integer, unless said otherwise


class _Calendar(_Temporal):
    """DATE and DATETIME: zero and impossible dates checked by the server (unless read as stored)."""

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return None if raw_dates else _valid_date(q)

    def binlog_value(self, col: Column, v: object) -> object:
        return None if isinstance(v, str) else v  # a zero or impossible date, which text clients return unparsed

    def binlog_value_unchanged(self, col: Column) -> bool:
        return True

    def implicit_default(self, col: Column) -> object:
        return None  # the zero date


# --- DATE ---------------------------------------------------------------------------------------

def _date(buf: bytes, pos: int) -> tuple[object, int]:
    v = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
    year, month, day = v >> 9 & 0x7FFF, v >> 5 & 15, v & 31
    if not (year and month and day):  # 0000-00-00 and other zero parts: None, as the library
        return None, pos + 3
    return dt.date(year, month, day), pos + 3


class Date(_Calendar):
    data_types = frozenset({"date"})
    binlog_types = frozenset({FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE})
    _arrow = pa.date32()

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.date32()

    def raw_floor(self, col: Column) -> object | None:
        return dt.date(1, 1, 1)

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "date", "date")

    def row_reader(self, col) -> Reader | None:
        return _date if col.type == FIELD_TYPE.DATE else None

    def mysql_value(self, col: Column, q: str) -> str:
        return f"TO_DAYS({q} + INTERVAL 0 DAY) - {_EPOCH_DAYS}"

    def delta_value(self, col: Column, r: str) -> str:
        return f"CAST(CAST({r} AS INT) AS VARCHAR)"  # days since 1970-01-01

    def key_from_text(self, col: Column, text: str) -> object:
        return dt.date.fromisoformat(text)

    def default_value(self, col: Column, d: DefaultValue) -> object:
        v = _literal(d)
        return None if v is None else v.date()


# --- DATETIME -----------------------------------------------------------------------------------

def _datetime2(raw: bytes) -> dt.datetime | None:
    v = int.from_bytes(raw, "big")
    ym = v >> 22 & 0x1FFFF
    try:
        return dt.datetime(ym // 13, ym % 13, v >> 17 & 31, v >> 12 & 31, v >> 6 & 63, v & 63)
    except ValueError:  # a zero or invalid date: the library returns None
        return None


class DateTime(_Calendar):
    data_types = frozenset({"datetime"})
    binlog_types = frozenset({FIELD_TYPE.DATETIME2, FIELD_TYPE.DATETIME})
    _arrow = pa.timestamp("us")  # Delta timestamp_ntz: wall-clock, no zone

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.timestamp("us")

    def raw_floor(self, col: Column) -> object | None:
        return dt.datetime(1, 1, 1)

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        return pc.cast(arr, self.arrow_type(col))

    def table_map_column(self, col, collation: str | None) -> Column:
        return _fsp_column(col, "datetime")

    def row_reader(self, col) -> Reader | None:
        return _fraction(col.fsp, 5, _datetime2) if col.type == FIELD_TYPE.DATETIME2 else None

    def mysql_value(self, col: Column, q: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', {q} + INTERVAL 0 DAY)"

    def delta_value(self, col: Column, r: str) -> str:
        return f"CAST(CAST({r} AS BIGINT) AS VARCHAR)"  # microseconds since 1970-01-01

    def key_from_text(self, col: Column, text: str) -> object:
        return dt.datetime.fromisoformat(text)

    def default_value(self, col: Column, d: DefaultValue) -> object:
        v = _literal(d)
        if v is None:
            return None
        unit = 10 ** (6 - (col.datetime_precision or 0))
        return v.replace(microsecond=v.microsecond // unit * unit)

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        return _fsp_declared(name, t, nullable)


# --- TIMESTAMP ----------------------------------------------------------------------------------

def _timestamp2(raw: bytes) -> dt.datetime:
    return dt.datetime.utcfromtimestamp(int.from_bytes(raw, "big", signed=True))  # as the library: naive UTC


class Timestamp(_Temporal):
    data_types = frozenset({"timestamp"})
    binlog_types = frozenset({FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIMESTAMP})
    _arrow = pa.timestamp("us", tz="UTC")

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return _epoch_microseconds(q)

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        return pc.cast(pc.cast(arr, pa.int64()), self.arrow_type(col))

    def binlog_value(self, col: Column, v: object) -> object:
        if isinstance(v, str):
            return None  # a zero or impossible date, which text clients return unparsed
        if isinstance(v, dt.datetime):  # decoded with utcfromtimestamp: naive UTC
            v = v.replace(tzinfo=dt.UTC) if v.tzinfo is None else v
        else:
            v = dt.datetime.fromtimestamp(v, dt.UTC)
        return None if v == _EPOCH_UTC else v  # epoch 0 is the zero TIMESTAMP

    def table_map_column(self, col, collation: str | None) -> Column:
        return _fsp_column(col, "timestamp")

    def row_reader(self, col) -> Reader | None:
        return _fraction(col.fsp, 4, _timestamp2) if col.type == FIELD_TYPE.TIMESTAMP2 else None

    def mysql_value(self, col: Column, q: str) -> str:
        return _epoch_microseconds(q)

    def delta_value(self, col: Column, r: str) -> str:
        return f"CAST(CAST({r} AS BIGINT) AS VARCHAR)"  # epoch microseconds (UTC)

    def key_sort_key(self, col: Column, v: object) -> object:
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return v.astimezone(dt.UTC).replace(tzinfo=None)  # boundaries are naive UTC
        return v

    def key_from_text(self, col: Column, text: str) -> object:
        return dt.datetime.fromisoformat(text)

    def implicit_default(self, col: Column) -> object:
        return None  # the zero date

    def default_value(self, col: Column, d: DefaultValue) -> object:
        if _literal(d) is None:
            return None
        raise DefaultNotKnown(f"column {col.name}: a TIMESTAMP literal is read in the ALTER session's time zone, "
                              "which the statement does not give")

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        return _fsp_declared(name, t, nullable)


# --- TIME ---------------------------------------------------------------------------------------

def _old_time(hhmmss: int) -> dt.timedelta:
    sign, v = (-1, -hhmmss) if hhmmss < 0 else (1, hhmmss)
    return sign * dt.timedelta(hours=v // 10000, minutes=v // 100 % 100, seconds=v % 100)


def _fix_time(values: dict, none_sources: dict, name: str) -> None:
    """A negative TIME with a fraction is stored as the two's complement of the whole packed
    value, but the decoder complements seconds and fraction apart, giving -(s + 1 - f) for -(s + f)."""
    v = values[name]
    if v is not None and v < dt.timedelta(0):
        us = -(v // _US)
        frac = us % 1_000_000
        if frac:
            values[name] = -_US * (us + 1_000_000 - 2 * frac)


class Time(_Temporal):
    data_types = frozenset({"time"})
    binlog_types = frozenset({FIELD_TYPE.TIME2, FIELD_TYPE.TIME})
    _arrow = pa.int64()  # microseconds, signed (TIME spans ±838:59:59)

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return _microseconds(q)

    def binlog_value(self, col: Column, v: object) -> object:
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds

    def key_sort_key(self, col: Column, v: object) -> object:
        return self.binlog_value(col, v) if isinstance(v, dt.timedelta) else v  # a bound: the server's timedelta

    def key_from_text(self, col: Column, text: str) -> object:
        m = re.fullmatch(r"\s*(-?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?\s*", text)
        if m is None:
            raise ValueError(text)
        sign, h, mi, s, frac = m.groups()
        v = dt.timedelta(hours=int(h), minutes=int(mi), seconds=int(s), microseconds=int((frac or "0").ljust(6, "0")))
        return -v if sign else v

    def table_map_column(self, col, collation: str | None) -> Column:
        return _fsp_column(col, "time")

    def prepare(self, col) -> ValueFix | None:
        if col.type == FIELD_TYPE.TIME:  # the old format: read its ±HHMMSS as a signed 3-byte integer
            col.type, col.unsigned = FIELD_TYPE.INT24, False
            return _old_time
        return None

    def library_fix(self, col) -> Fix | None:
        return _fix_time if col.type == FIELD_TYPE.TIME2 else None

    def mysql_value(self, col: Column, q: str) -> str:
        return _microseconds(q)

    def delta_value(self, col: Column, r: str) -> str:
        return f"CAST({r} AS VARCHAR)"

    def implicit_default(self, col: Column) -> object:
        return 0

    def default_value(self, col: Column, d: DefaultValue) -> object:
        """A TIME literal as signed microseconds."""
        s = text(d).strip()
        m = _TIME.fullmatch(s)
        if m:
            sign, days, hours, minutes, seconds, frac = m.groups()
            total = (int(days or 0) * 24 + int(hours)) * 3600 + int(minutes) * 60 + int(seconds or 0)
        else:
            n = re.fullmatch(r"(-)?(\d+)(?:\.(\d*))?", s)
            if n is None:
                raise ValueError(f"{s!r} is not a time")
            sign, digits, frac = n.groups()
            digits = digits.rjust(6, "0")
            total = int(digits[:-4]) * 3600 + int(digits[-4:-2]) * 60 + int(digits[-2:])
        unit = 10 ** (6 - (col.datetime_precision or 0))
        micros = int(((frac or "") + "000000")[:6]) // unit * unit
        value = total * 1_000_000 + micros
        return -value if sign else value

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        return _fsp_declared(name, t, nullable)


# --- YEAR ---------------------------------------------------------------------------------------

def _year2(col: Column) -> bool:
    """YEAR(2): shown as two digits (1969 and 2069 both as 69), stored as the full year."""
    return col.column_type.startswith("year(2)")


def _year(buf: bytes, pos: int) -> tuple[object, int]:
    return buf[pos] + 1900, pos + 1


class Year(_Temporal):
    data_types = frozenset({"year"})
    binlog_types = frozenset({FIELD_TYPE.YEAR})
    _arrow = pa.int16()

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return f"YEAR({q})" if _year2(col) else None

    def text_select_expr(self, col: Column, q: str) -> str | None:
        return f"YEAR({q})" if _year2(col) else None

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        arr = pc.if_else(pc.equal(arr, 1900), 0, arr)  # YEAR(2)'s zero year, read with YEAR()
        return super().snapshot_array(col, arr)

    def binlog_value(self, col: Column, v: object) -> object:
        return 0 if v == 1900 else v  # the binlog stores YEAR 0000 as 0 and the decoder adds 1900

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "year", "year(4)")

    def row_reader(self, col) -> Reader | None:
        return _year

    def mysql_value(self, col: Column, q: str) -> str:
        # YEAR(2) shows two digits: YEAR() gives the stored year (1900 for its zero year).
        return f"IF(YEAR({q}) = 1900, 0, YEAR({q}))" if _year2(col) else f"CAST({q} AS UNSIGNED)"

    def delta_value(self, col: Column, r: str) -> str:
        return f"CAST({r} AS VARCHAR)"

    def implicit_default(self, col: Column) -> object:
        return 0

    def default_value(self, col: Column, d: DefaultValue) -> object:
        if d.kind == "string" and d.value.strip() in ("0", "00"):
            return 2000  # the string '0' is the year 2000, the number 0 is 0000
        n = integral(number(d))
        if 1 <= n <= 69:
            return 2000 + n
        if 70 <= n <= 99:
            return 1900 + n
        return n

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        return Column(name, "year", "year(4)", nullable)


CODECS = (Date(), DateTime(), Timestamp(), Time(), Year())
