"""The value rows that exist when a column is added take in it (ALTER TABLE … ADD COLUMN),
as the server stores it, in binlake's canonical form (what :func:`cdc_core.types.mapping.binlog_value`
gives for the same value read from the binlog).

Rules (measured on MariaDB 10.11 in strict mode; tests/test_ddl_corpus.py compares every
corpus DEFAULT with what the server gave the existing rows):
- No DEFAULT: NULL, or for a NOT NULL column the type's implicit default (0, '', the first
  ENUM member, zero bytes of a BINARY(n), the zero date, which binlake stores as NULL).
- A literal is converted to the column's type as the server converts it: a string for a
  number column is trimmed and rounded (``' 31 '`` → 31, ``'3.7'`` → 4 in an INT), exact
  numbers round half away from zero, a hex or bit literal is its bytes (a number in a
  numeric column: ``0x41`` → 65, a string in a text column: 'A'), TRUE/FALSE are 1/0,
  CHAR drops trailing spaces, BINARY(n) pads with zero bytes, ENUM/SET values take the
  members' spelling and SET members their definition order, YEAR 1–69 → 2000–2069 and
  70–99 → 1970–1999, dates and times are read in MySQL's relaxed formats.
- Not knowable from the statement, raised as :class:`DefaultNotKnown` with the reason: a
  DEFAULT expression (CURRENT_TIMESTAMP, UUID(), (a + 1)…: the server evaluates it when the
  column is added, per row for some), an AUTO_INCREMENT or generated column (the server
  numbers or computes existing rows), a non-zero TIMESTAMP literal (it is in the ALTER
  session's time zone), and types binlake has no value form for (spatial, VECTOR).
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal

from cdc_core.schema.column_def import ColumnDef, DefaultValue
from cdc_core.schema.table import Column

_INTS = {"tinyint", "smallint", "mediumint", "int", "bigint"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json", "inet4", "inet6", "uuid"}
_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_ZERO_VALUES = {"inet4": "0.0.0.0", "inet6": "::", "uuid": "00000000-0000-0000-0000-000000000000"}
_DATE = re.compile(r"(\d{2,4})\D(\d{1,2})\D(\d{1,2})(?:(?:[T\s]+|\D)(\d{1,2})\D(\d{1,2})\D(\d{1,2})(?:\.(\d*))?)?")
_TIME = re.compile(r"(-)?(?:(\d+)\s+)?(\d+):(\d{1,2})(?::(\d{1,2}))?(?:\.(\d*))?")


class DefaultNotKnown(ValueError):
    """The value existing rows take in an added column cannot be known from the statement."""


def existing_rows_value(cd: ColumnDef):
    """The canonical value every existing row takes when ``cd`` is added (see the module rules)."""
    col = cd.column
    if cd.generated:
        raise DefaultNotKnown(f"column {col.name} is generated: the server computes its value in existing rows")
    if cd.auto_increment:
        raise DefaultNotKnown(f"column {col.name} is AUTO_INCREMENT: the server numbers existing rows")
    d = cd.default
    if d is None:
        return None if col.nullable else implicit_default(col)
    if d.kind == "null":
        return None
    if d.kind == "expression":
        raise DefaultNotKnown(f"column {col.name} has DEFAULT {d.value}, which the server evaluates when the column "
                              "is added")
    try:
        return _convert(col, d)
    except DefaultNotKnown:
        raise
    except (ValueError, ArithmeticError) as e:
        raise DefaultNotKnown(f"column {col.name}: cannot convert DEFAULT {d.value!r} to {col.column_type} ({e})") \
            from None


def implicit_default(col: Column):
    """The value of a NOT NULL column without DEFAULT in existing rows."""
    t = col.data_type
    if t in _INTS or t == "year":
        return Decimal(0) if t == "bigint" and col.unsigned else 0
    if t == "decimal":
        return _decimal(col, Decimal(0))
    if t in ("float", "double"):
        return 0.0
    if t == "bit":
        return _bits(col, 0)
    if t == "enum":
        return col.members[0] if col.members else ""
    if t in _ZERO_VALUES:
        return _ZERO_VALUES[t]
    if t in _TEXT or t == "set":
        return ""
    if t in _BYTES:
        return b"\x00" * (col.char_length or 0) if t == "binary" else b""
    if t == "time":
        return 0
    if t in ("date", "datetime", "timestamp"):
        return None  # the zero date
    raise DefaultNotKnown(f"column {col.name}: binlake has no value for a {col.column_type} default")


def _convert(col: Column, d: DefaultValue):
    t = col.data_type
    if t in _INTS:
        v = _integral(_number(d))
        return Decimal(v) if t == "bigint" and col.unsigned else v
    if t == "decimal":
        return _decimal(col, Decimal(str(_number(d))))
    if t in ("float", "double"):
        v = float(_number(d))
        return round(v, col.scale) if col.scale is not None else v
    if t == "year":
        return _year(d)
    if t == "bit":
        return _bits(col, int.from_bytes(d.value, "big") if d.kind == "bytes" else int(_number(d)))
    if t == "enum":
        return _enum(col, d)
    if t == "set":
        return _set(col, d)
    if t in _TEXT:
        text = _text(d)
        return text.rstrip(" ") if t == "char" else text
    if t in _BYTES:
        data = d.value if d.kind == "bytes" else _text(d).encode("utf-8")
        return data.ljust(col.char_length or 0, b"\x00") if t == "binary" else data
    if t == "date":
        v = _datetime(d)
        return None if v is None else v.date()
    if t == "datetime":
        v = _datetime(d)
        return None if v is None else _truncate(v, col.datetime_precision or 0)
    if t == "timestamp":
        if _datetime(d) is None:
            return None
        raise DefaultNotKnown(f"column {col.name}: a TIMESTAMP literal is read in the ALTER session's time zone, "
                              "which the statement does not give")
    if t == "time":
        return _time(col, d)
    raise DefaultNotKnown(f"column {col.name}: binlake has no value for a {col.column_type} default")


def _number(d: DefaultValue) -> Decimal | float:
    """A literal as a number: exact (Decimal) or approximate (float, written with an exponent)."""
    if d.kind == "bool":
        return Decimal(int(d.value))
    if d.kind == "bytes":
        return Decimal(int.from_bytes(d.value, "big"))
    text = str(d.value).strip(" \t\r\n")
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{d.value!r} is not a number")
    return float(text) if "e" in text.lower() else Decimal(text)


def _integral(v: Decimal | float) -> int:
    if isinstance(v, float):
        return int(round(v))  # the server rounds a double half to even (rint)
    return int(v.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _decimal(col: Column, v: Decimal):
    q = v.quantize(Decimal(1).scaleb(-(col.scale or 0)), rounding=ROUND_HALF_UP)
    return format(q, "f") if (col.precision or 10) > 38 else q


def _bits(col: Column, v: int):
    if (col.precision or 1) == 1:
        return bool(v)
    return v.to_bytes(((col.precision or 1) + 7) // 8, "big")


def _text(d: DefaultValue) -> str:
    if d.kind == "string":
        return d.value
    if d.kind == "bytes":
        return d.value.decode("utf-8", "surrogateescape")
    if d.kind == "bool":
        return "1" if d.value else "0"
    v = _number(d)
    if isinstance(v, float):
        return format(v, "g") if v != int(v) else str(int(v))
    return format(v, "f").lstrip("+")


def _year(d: DefaultValue) -> int:
    if d.kind == "string" and d.value.strip() in ("0", "00"):
        return 2000  # the string '0' is the year 2000, the number 0 is 0000
    n = _integral(_number(d))
    if 1 <= n <= 69:
        return 2000 + n
    if 70 <= n <= 99:
        return 1900 + n
    return n


def _members(col: Column) -> dict[str, str]:
    return {m.rstrip(" ").lower(): m for m in col.members}


def _enum(col: Column, d: DefaultValue) -> str:
    return _members(col)[_text(d).rstrip(" ").lower()]  # the server refuses a number as an ENUM/SET default


def _set(col: Column, d: DefaultValue) -> str:
    members = _members(col)
    chosen = {members[p.rstrip(" ").lower()] for p in _text(d).split(",") if p}
    return ",".join(m for m in col.members if m in chosen)


def _datetime(d: DefaultValue) -> dt.datetime | None:
    """A DATE/DATETIME literal (None for the zero date)."""
    text = _text(d).strip()
    if d.kind == "number" or re.fullmatch(r"\d+(\.\d*)?", text):
        digits, _, frac = text.partition(".")
        if len(digits) in (6, 12):  # YYMMDD[hhmmss]
            year = int(digits[:2])
            digits = str(year + (2000 if year < 70 else 1900)) + digits[2:]
        if len(digits) not in (8, 14):
            raise ValueError(f"{text!r} is not a date")
        parts = [digits[:4], digits[4:6], digits[6:8], digits[8:10] or "0", digits[10:12] or "0",
                 digits[12:14] or "0", frac]
    else:
        m = _DATE.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not a date")
        parts = [p or "0" for p in m.groups()[:6]] + [m.group(7) or ""]
        if len(parts[0]) == 2:
            year = int(parts[0])
            parts[0] = str(year + (2000 if year < 70 else 1900))
    year, month, day, hour, minute, second = (int(p) for p in parts[:6])
    if year == month == day == 0:
        return None
    micros = int((parts[6] + "000000")[:6])
    return dt.datetime(year, month, day, hour, minute, second, micros)


def _truncate(v: dt.datetime, precision: int) -> dt.datetime:
    unit = 10 ** (6 - precision)
    return v.replace(microsecond=v.microsecond // unit * unit)


def _time(col: Column, d: DefaultValue) -> int:
    """A TIME literal as signed microseconds."""
    text = _text(d).strip()
    m = _TIME.fullmatch(text)
    if m:
        sign, days, hours, minutes, seconds, frac = m.groups()
        total = (int(days or 0) * 24 + int(hours)) * 3600 + int(minutes) * 60 + int(seconds or 0)
    else:
        n = re.fullmatch(r"(-)?(\d+)(?:\.(\d*))?", text)
        if n is None:
            raise ValueError(f"{text!r} is not a time")
        sign, digits, frac = n.groups()
        digits = digits.rjust(6, "0")
        total = int(digits[:-4]) * 3600 + int(digits[-4:-2]) * 60 + int(digits[-2:])
    unit = 10 ** (6 - (col.datetime_precision or 0))
    micros = int(((frac or "") + "000000")[:6]) // unit * unit
    value = total * 1_000_000 + micros
    return -value if sign else value

