"""MySQL's binary JSON written as MySQL writes JSON text (cdc_core/types/mysql_json.py), beyond the recorded
documents of tests/test_mysql_corpus.py (whose texts equal mysqlbinlog's): the value types a recorded binlog
here does not hold, built in MySQL's binary format (sql-common/json_binary.h) by the small encoder below.

Expected texts come from the MySQL 8.0 manual's examples (json-creation-functions.html: ``JSON_ARRAY(1, "abc",
NULL, TRUE, CURTIME())`` is ``[1, "abc", null, true, "11:30:24.000000"]``, ``JSON_OBJECT('id', 87, 'name',
'carrot')`` is ``{"id": 87, "name": "carrot"}``, ``JSON_QUOTE('"null"')`` is ``"\\"null\\""``) and from MySQL's
own printing code (sql/json_dom.cc ``wrapper_to_string``: ``.0`` after a double that shows neither a point nor an
exponent, temporal values with six fractional digits, ``base64:typeNN:`` for other opaque values; strings/dtoa.cc
``my_gcvt``: the 'e' form outside [1e-15, 1e15) and for longer results).
"""

from __future__ import annotations

import struct

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.types import mysql_json
from cdc_core.types.mysql_json import binary_text, double_text, parse, text

# --- a minimal encoder of MySQL's binary JSON (the small forms) ------------------------------------------------


def _scalar(v) -> tuple[int, bytes, bool]:
    """(type, bytes, inlined in a small container's entry) of a scalar."""
    if v is None or isinstance(v, bool):
        return mysql_json.LITERAL, bytes([{None: 0, True: 1, False: 2}[v]]) + b"\x00", True
    if isinstance(v, int):
        return mysql_json.INT16, struct.pack("<h", v), True
    if isinstance(v, float):
        return mysql_json.DOUBLE, struct.pack("<d", v), False
    if isinstance(v, str):
        raw = v.encode()
        assert len(raw) < 128
        return mysql_json.STRING, bytes([len(raw)]) + raw, False
    if isinstance(v, tuple):  # (field type, data): an opaque value
        return mysql_json.OPAQUE, bytes([v[0], len(v[1])]) + v[1], False
    kind = mysql_json.SMALL_OBJECT if isinstance(v, dict) else mysql_json.SMALL_ARRAY
    return kind, _container(v), False


def _container(v) -> bytes:
    items = sorted(v.items(), key=lambda kv: mysql_json.key_order(kv[0])) if isinstance(v, dict) else list(
        enumerate(v))
    keys = [k.encode() for k, _ in items] if isinstance(v, dict) else []
    header = 4 + 4 * len(keys) + 3 * len(items)
    at = header + sum(map(len, keys))
    key_entries, value_entries, tail = b"", b"", b"".join(keys)
    offset = header
    for k in keys:
        key_entries += struct.pack("<HH", offset, len(k))
        offset += len(k)
    for _, value in items:
        kind, data, inline = _scalar(value)
        if inline:
            value_entries += bytes([kind]) + data[:2]
        else:
            value_entries += bytes([kind]) + struct.pack("<H", at)
            tail += data
            at += len(data)
    return struct.pack("<HH", len(items), header + len(tail)) + key_entries + value_entries + tail


def binary(v) -> bytes:
    kind, data, _ = _scalar(v)
    return bytes([kind]) + (data[:1] if kind == mysql_json.LITERAL else data)


def _packed_time(hour: int, minute: int, second: int, micro: int = 0) -> bytes:
    return struct.pack("<q", (((hour << 12) | (minute << 6) | second) << 24) + micro)


def _packed_datetime(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, micro: int = 0) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    return struct.pack("<q", (((ymd << 17) | (h << 12) | (mi << 6) | s) << 24) + micro)


# --- the manual's examples ---------------------------------------------------------------------------------------


def test_the_manuals_json_array_and_object():
    assert binary_text(binary([1, "abc", None, True, (FIELD_TYPE.TIME, _packed_time(11, 30, 24))])) == \
        '[1, "abc", null, true, "11:30:24.000000"]'
    assert binary_text(binary({"name": "carrot", "id": 87})) == '{"id": 87, "name": "carrot"}'


def test_strings_are_quoted_and_escaped_as_mysql_does():
    assert binary_text(binary("null")) == '"null"'  # JSON_QUOTE('null')
    assert binary_text(binary('"null"')) == '"\\"null\\""'  # JSON_QUOTE('"null"')
    assert text("a\\b\n\t\r\b\f\x01\x1f/é€") == '"a\\\\b\\n\\t\\r\\b\\f\\u0001\\u001f/é€"'


def test_json_null_literals_and_the_empty_value():
    assert binary_text(binary(None)) == "null" and binary_text(binary(True)) == "true"
    assert binary_text(b"") == "null"  # an empty JSON field reads as the JSON null


@pytest.mark.parametrize("value, want", [
    (1.0, "1.0"), (-2.5, "-2.5"), (0.1, "0.1"), (123.456, "123.456"), (1e14, "100000000000000.0"), (1e15, "1e15"),
    (1e100, "1e100"), (1e-7, "0.0000001"), (1e-15, "0.000000000000001"), (1e-16, "1e-16"), (0.0, "0.0"),
    (1.7976931348623157e308, "1.7976931348623157e308"), (5e-324, "5e-324"), (1234567890123456.7, "1234567890123456.8"),
])
def test_doubles_as_my_gcvt_writes_them(value, want):
    assert double_text(value) == want
    assert binary_text(binary(value)) == want


def test_opaque_decimals_and_temporal_values():
    # DECIMAL(5,2) 1.50 and -1.50: precision, scale, then MySQL's binary decimal (3 integer digits: 2 bytes, 2
    # fraction digits: 1 byte, sign bit flipped)
    plus = bytes([5, 2]) + bytes([0x80, 0x01, 50])
    minus = bytes([5, 2]) + bytes([0x7F, 0xFE, 255 - 50])
    assert text([mysql_json.Opaque(FIELD_TYPE.NEWDECIMAL, plus), mysql_json.Opaque(FIELD_TYPE.NEWDECIMAL, minus)]) \
        == "[1.50, -1.50]"
    values = [(FIELD_TYPE.DATE, _packed_datetime(2015, 1, 15)),
              (FIELD_TYPE.DATETIME, _packed_datetime(2015, 1, 15, 23, 24, 25, 120000)),
              (FIELD_TYPE.TIMESTAMP, _packed_datetime(2015, 1, 15, 23, 24, 25)),
              (FIELD_TYPE.TIME, _packed_time(838, 59, 59))]
    assert binary_text(binary(values)) == \
        '["2015-01-15", "2015-01-15 23:24:25.120000", "2015-01-15 23:24:25.000000", "838:59:59.000000"]'
    negative = struct.pack("<q", -struct.unpack("<q", _packed_time(1, 2, 3))[0])
    assert text(mysql_json.Opaque(FIELD_TYPE.TIME, negative)) == '"-01:02:03.000000"'


def test_other_opaque_values_are_base64_with_their_type():
    assert text(mysql_json.Opaque(FIELD_TYPE.BLOB, b"\x00\x01\x02")) == '"base64:type252:AAEC"'
    long = text(mysql_json.Opaque(FIELD_TYPE.BLOB, bytes(60)))  # 80 base64 characters: a newline after 76
    assert long == '"base64:type252:' + "A" * 76 + "\\n" + "AAAA" + '"'


def test_nested_documents_keep_mysqls_key_order():
    doc = {"favorite_color": "red", "day": "monday", "salary": 99, "role": ["a", {"z": 1, "yy": 2.5}]}
    assert binary_text(binary(doc)) == \
        '{"day": "monday", "role": ["a", {"z": 1, "yy": 2.5}], "salary": 99, "favorite_color": "red"}'
    assert parse(binary(doc)) == doc


def test_malformed_documents_raise():
    with pytest.raises(ValueError):
        parse(bytes([mysql_json.SMALL_OBJECT, 2, 0, 200, 0]))  # a size past the document
    with pytest.raises(ValueError):
        parse(bytes([0x0D, 0]))  # no such type
