"""MySQL's binary JSON (the JSON column's storage and binlog form) read into Python values and
written as the JSON text MySQL gives for it (``CAST(j AS CHAR)``, what a client SELECTs, what
``JSON_EXTRACT`` returns): the form the snapshot reads, so the binlog path gives the same text.

The binary format (MySQL's sql-common/json_binary.h): a type byte, then the value. Objects and
arrays come in a small form (2-byte counts, sizes and offsets) and a large one (4-byte); an
object's keys are stored sorted by length, then bytes; int16/uint16 (and int32/uint32 in the large
form) and literals are inlined in their entry; strings are a variable-length size (7 bits a byte)
and UTF-8; opaque values are a MySQL field type, a variable-length size and the field's bytes.

Invariants (tests/test_mysql_json.py, tests/test_mysql_corpus.py):
- Values: objects are dicts (keys ``str``), arrays lists, strings ``str``, integers ``int``,
  doubles ``float``, true/false ``bool``, the JSON literal null ``None`` (a JSON null, never SQL
  NULL: that one is the row image's null bit), opaque values :class:`Opaque`.
- :func:`text` writes what MySQL's ``Json_wrapper::to_string`` writes: ``", "`` between elements,
  ``": "`` after a key, keys in MySQL's order (length, then bytes), strings escaped as MySQL
  escapes them (``\\" \\\\ \\b \\f \\n \\r \\t``, other control characters ``\\u00xx``; nothing
  else), doubles as ``my_gcvt`` writes them with ``.0`` added when neither a point nor an
  exponent shows, DECIMALs with their scale, DATE/TIME/DATETIME/TIMESTAMP quoted with six
  fractional digits (a DATE without time), other opaque values as ``"base64:typeNN:..."``.
- An empty binary value is the JSON null (MySQL reads an empty JSON field so).
- Malformed bytes raise ``ValueError``; nothing is guessed.
"""

from __future__ import annotations

import base64
import math
import struct
from decimal import Decimal
from typing import NamedTuple

from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.types.decimals import packed

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = (
    0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xA, 0xB, 0xC, 0xF)
_NULL, _TRUE, _FALSE = 0x0, 0x1, 0x2
_FIXED = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q", DOUBLE: "<d"}
_GCVT_WIDTH = 34  # MY_GCVT_MAX_FIELD_WIDTH: DBL_DIG + 4 + max(5, MAX_DECPT_FOR_F_FORMAT), DBL_DIG = 15
_MAX_DECPT_FOR_F = 15


class Opaque(NamedTuple):
    """A value of a MySQL field type JSON stores as is (DECIMAL, the temporal types, others)."""

    field_type: int
    data: bytes


# --- binary → values -------------------------------------------------------------------------


def parse(data: bytes) -> object:
    """A binary JSON document (type byte first) as a Python value; b'' is the JSON null."""
    if not data:
        return None
    return _value(data[0], memoryview(data)[1:])


def _value(kind: int, buf: memoryview) -> object:
    if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(buf, kind in (LARGE_OBJECT, LARGE_ARRAY), kind in (SMALL_OBJECT, LARGE_OBJECT))
    if kind == LITERAL:
        return _literal(buf[0])
    if kind in _FIXED:
        return struct.unpack_from(_FIXED[kind], buf)[0]
    if kind == STRING:
        size, at = _varlen(buf, 0)
        return _utf8(buf, at, size)
    if kind == OPAQUE:
        size, at = _varlen(buf, 1)
        _check(buf, at + size)
        return Opaque(buf[0], bytes(buf[at:at + size]))
    raise ValueError(f"binary JSON: unknown value type {kind}")


def _literal(code: int) -> object:
    if code not in (_NULL, _TRUE, _FALSE):
        raise ValueError(f"binary JSON: unknown literal {code}")
    return None if code == _NULL else code == _TRUE


def _container(buf: memoryview, large: bool, is_object: bool) -> object:
    width = 4 if large else 2
    unpack = struct.Struct("<I" if large else "<H").unpack_from
    count, size = unpack(buf, 0)[0], unpack(buf, width)[0]
    _check(buf, size)
    buf = buf[:size]
    keys_at = 2 * width
    values_at = keys_at + (count * (width + 2) if is_object else 0)
    _check(buf, values_at + count * (1 + width))
    values = []
    for i in range(count):
        entry = values_at + i * (1 + width)
        kind = buf[entry]
        if kind == LITERAL or kind in (INT16, UINT16) or (large and kind in (INT32, UINT32)):
            values.append(_value(kind, buf[entry + 1:entry + 1 + width]))
        else:
            offset = unpack(buf, entry + 1)[0]
            _check(buf, offset + 1)
            values.append(_value(kind, buf[offset:]))
    if not is_object:
        return values
    keys = []
    for i in range(count):
        entry = keys_at + i * (width + 2)
        offset, length = unpack(buf, entry)[0], struct.unpack_from("<H", buf, entry + width)[0]
        keys.append(_utf8(buf, offset, length))
    return dict(zip(keys, values, strict=True))


def _varlen(buf: memoryview, at: int) -> tuple[int, int]:
    """A variable-length size (7 bits a byte, low first, at most 5 bytes) and where its data starts."""
    size = 0
    for i in range(5):
        _check(buf, at + i + 1)
        byte = buf[at + i]
        size |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return size, at + i + 1
    raise ValueError("binary JSON: a size longer than 5 bytes")


def _utf8(buf: memoryview, at: int, size: int) -> str:
    _check(buf, at + size)
    return bytes(buf[at:at + size]).decode("utf-8")


def _check(buf: memoryview, end: int) -> None:
    if end > len(buf):
        raise ValueError("binary JSON: a value runs past its document")


# --- values → MySQL's text ---------------------------------------------------------------------


def binary_text(data: bytes | str) -> str:
    """The text MySQL gives for a binary JSON value (a value that is text already is returned as is:
    a partial update's after image, built by cdc_core/binlog/json_diff.py)."""
    return data if isinstance(data, str) else text(parse(bytes(data)))


def text(value: object) -> str:
    """A JSON value written as MySQL writes it (see the module invariants)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def key_order(key: str) -> tuple[int, bytes]:
    """MySQL's order of object keys: by length in bytes, then bytes."""
    raw = key.encode("utf-8")
    return len(raw), raw


def _write(v: object, out: list[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True or v is False:
        out.append("true" if v else "false")
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(double_text(v))
    elif isinstance(v, str):
        out.append(quote(v))
    elif isinstance(v, list):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(", ")
            _write(item, out)
        out.append("]")
    elif isinstance(v, dict):
        out.append("{")
        for i, k in enumerate(sorted(v, key=key_order)):
            if i:
                out.append(", ")
            out.append(quote(k))
            out.append(": ")
            _write(v[k], out)
        out.append("}")
    elif isinstance(v, Opaque):
        out.append(opaque_text(v))
    else:
        raise TypeError(f"not a JSON value: {type(v).__name__}")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(s: str) -> str:
    """A string double-quoted as MySQL's ``double_quote`` writes it."""
    if not any(c in _ESCAPES or c < " " for c in s):
        return f'"{s}"'
    return '"' + "".join(_ESCAPES.get(c) or (f"\\u00{ord(c):02x}" if c < " " else c) for c in s) + '"'


def double_text(x: float) -> str:
    """A double as MySQL writes it in JSON: ``my_gcvt`` (shortest digits that read back to the
    same double; the 'f' form unless the 'e' one is shorter or the number is outside
    [1e-15, 1e15) ...) and ``.0`` when neither a point nor an exponent shows."""
    if x == 0:
        digits, decpt = "0", 1
    else:
        sign, ds, exp = Decimal(repr(abs(x))).as_tuple()
        digits = "".join(map(str, ds)).rstrip("0")
        decpt = len(ds) + exp
    negative = math.copysign(1.0, x) < 0
    n = len(digits)
    width = _GCVT_WIDTH - (1 if x < 0 else 0)
    have_space = (n - decpt + 2 if decpt <= 0 else n + 1 if decpt < n else decpt) <= width
    if have_space and decpt >= -_MAX_DECPT_FOR_F + 1 and (decpt <= _MAX_DECPT_FOR_F or n > decpt):
        if decpt <= 0:
            body = "0." + "0" * -decpt + digits
        elif decpt < n:
            body = digits[:decpt] + "." + digits[decpt:]
        else:
            body = digits + "0" * (decpt - n)
    else:  # 'e' form: d[.ddd]e[-]x
        body = digits[0] + ("." + digits[1:] if n > 1 else "") + f"e{decpt - 1}"
    body = ("-" if negative else "") + body
    return body if "." in body or "e" in body else body + ".0"


def opaque_text(v: Opaque) -> str:
    """An opaque value as MySQL writes it (see the module invariants)."""
    t, data = v.field_type, v.data
    if t in (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL):
        precision, scale = data[0], data[1]
        value, _ = packed(precision, scale)(data, 2)
        return format(value, "f")
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.TIME, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP):
        return f'"{_temporal(t, struct.unpack_from("<q", data)[0])}"'
    if t == FIELD_TYPE.VAR_STRING:
        return quote(data.decode("utf-8"))
    return quote(f"base64:type{t}:{_mysql_base64(data)}")


def _temporal(field_type: int, packed_value: int) -> str:
    """A temporal value from MySQL's packed 8-byte form, as ``my_TIME_to_str(t, 6)`` writes it."""
    negative, v = packed_value < 0, abs(packed_value)
    micro, whole = v % (1 << 24), v >> 24
    if field_type == FIELD_TYPE.TIME:
        hour, minute, second = (whole >> 12) % (1 << 10), (whole >> 6) % (1 << 6), whole % (1 << 6)
        return f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"
    ymd, hms = whole >> 17, whole % (1 << 17)
    year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd % (1 << 5)
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if field_type == FIELD_TYPE.DATE:
        return date
    return f"{date} {hms >> 12:02d}:{(hms >> 6) % (1 << 6):02d}:{hms % (1 << 6):02d}.{micro:06d}"


def _mysql_base64(data: bytes) -> str:
    """Base64 as MySQL's ``base64_encode`` writes it: a newline after every 76 characters."""
    b = base64.b64encode(data).decode("ascii")
    return "\n".join(b[i:i + 76] for i in range(0, len(b), 76))
