"""Type matrix: every supported MySQL type, read through the snapshot path (Spark
chunk reader → Delta), through the binlog (python-mysql-replication with
cdc_core/binlog/columns.py → binlog_value → rows_to_arrow) and through the stream into
Delta, gives in every cell the value MATRIX states as a literal, the one
docs/type-mapping.md documents; Delta also equals MySQL's. Also: character sets, INET6
text, and source.exclude_columns."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import random
import struct
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.binlog.range_reads import read_changes
from cdc_core.config import ConfigError, parse_config
from cdc_core.offset.position import master_position
from cdc_core.schema.table import Column, TableSchema, describe_table
from cdc_core.source.connection import connect, connection_settings
from cdc_core.source.validate import check
from cdc_core.types.charset_tables import SINGLE_BYTE
from cdc_core.types.charsets import _CODECS, decoder
from cdc_core.types.mapping import binlog_value, rows_to_arrow, unmappable
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.stream import StreamEngine
from tests.helpers import assert_equal, snapshot

UTC = dt.UTC


class Sql(str):
    """A value written into the INSERT as SQL text (bit literals, spatial values), not as a parameter."""


class Auto:
    """A cell the INSERT leaves out and the server fills: SERIAL's counter, a generated column."""


AUTO = Auto()
GEOMETRY = "struct<wkb:binary,srid:long>"
IDS = range(1, 8)
LONG_TEXT = "Ünïcødé ✓ 😀 " * 2000
ALL_BYTES = bytes(range(256)) * 4
JSON_DOC = '{"a": [1, 2.5, null, true], "b": "é😀", "c": {"d": -1e-7}}'
DEC65_MAX = "9" * 35 + "." + "9" * 30
VC = "Ünïcødé — “quotes” ' \\ 😀🎉"
# DATETIME and TIMESTAMP values inserted; MariaDB truncates a fraction to the column's precision.
DT_MAX, DT_MIN, DT_MID, DT_ZERO = ("9999-12-31 23:59:59.999999", "1000-01-01 00:00:00", "2024-02-29 13:45:30.123456",
                                   "0000-00-00 00:00:00")
TS_LAST = "2038-01-19 08:44:07.999999"  # at +05:30: 2038-01-19 03:14:07.999999 UTC, the last TIMESTAMP instant
TS_FIRST = "1970-01-01 05:30:01"  # at +05:30: 1970-01-01 00:00:01 UTC, the first (epoch second 1)
TS_MID = "2024-03-10 12:00:00.123456"  # at +05:30: 2024-03-10 06:30:00.123456 UTC
TS_SERVER = "2024-03-10 12:00:00.654321"  # at -08:00 (row 7): 2024-03-10 20:00:00.654321 UTC


def _wkb_point(x: float, y: float) -> bytes:
    """Well-known binary, little-endian (as MariaDB stores it): byte order 1, type, then the coordinates."""
    return struct.pack("<BIdd", 1, 1, x, y)


def _wkb_line(*xy: float) -> bytes:
    return struct.pack(f"<BII{len(xy)}d", 1, 2, len(xy) // 2, *xy)


def _wkb_polygon(*rings: tuple[float, ...]) -> bytes:
    return struct.pack("<BII", 1, 3, len(rings)) + b"".join(
        struct.pack(f"<I{len(r)}d", len(r) // 2, *r) for r in rings)


def _wkb_collection(kind: int, *parts: bytes) -> bytes:
    """MULTIPOINT (4), MULTILINESTRING (5), MULTIPOLYGON (6), GEOMETRYCOLLECTION (7): each part a whole WKB."""
    return struct.pack("<BII", 1, kind, len(parts)) + b"".join(parts)


SQUARE = (0, 0, 10, 0, 10, 10, 0, 10, 0, 0)
HOLE = (5, 5, 7, 5, 7, 7, 5, 7, 5, 5)

# The type matrix, the suite's oracle: one entry per column of the ``types`` table,
#     name: (MySQL column type, Delta type, {row id: (value inserted, expected Delta value)}).
# The value inserted is a query parameter, or SQL text (Sql); AUTO: the INSERT leaves the column out and the
# server fills it. A row a column's map does not name inserts nothing there: NULL, and None in Delta.
# The expected value is what docs/type-mapping.md documents for MySQL's value, written out as deltalake reads it
# back: int, Decimal with the column's scale, the float32 nearest the value for FLOAT, a naive datetime for
# DATETIME, the UTC instant (aware) for TIMESTAMP, signed microseconds for TIME, bytes, str.
# Rows, each inserted in its own transaction: 1 maxima, 2 minima and empty values, 3 ordinary values, 4 zero
# temporal values and the empty SET, 5 dates with a zero part, 6 NULL in every column — all six by a session at
# time_zone '+05:30' — and 7, TIMESTAMPs only, by a session on the server's default zone, set to '-08:00'.
MATRIX = {
    "id": ("INT PRIMARY KEY", "integer", {i: (i, i) for i in IDS}),
    "ti": ("TINYINT", "byte", {1: (127, 127), 2: (-128, -128), 3: (-1, -1)}),
    "ti_u": ("TINYINT UNSIGNED", "short", {1: (255, 255), 2: (0, 0), 3: (1, 1)}),
    "si": ("SMALLINT", "short", {1: (32767, 32767), 2: (-32768, -32768), 3: (-2, -2)}),
    "si_u": ("SMALLINT UNSIGNED", "integer", {1: (65535, 65535), 2: (0, 0), 3: (2, 2)}),
    "mi": ("MEDIUMINT", "integer", {1: (8388607, 8388607), 2: (-8388608, -8388608), 3: (-3, -3)}),
    "mi_u": ("MEDIUMINT UNSIGNED", "integer", {1: (16777215, 16777215), 2: (0, 0), 3: (3, 3)}),
    "i": ("INT", "integer", {1: (2147483647, 2147483647), 2: (-2147483648, -2147483648), 3: (0, 0)}),
    "i_u": ("INT UNSIGNED", "long", {1: (4294967295, 4294967295), 2: (0, 0), 3: (4, 4)}),
    "bi": ("BIGINT", "long", {1: (9223372036854775807, 9223372036854775807),
                              2: (-9223372036854775808, -9223372036854775808), 3: (-5, -5)}),
    "bi_u": ("BIGINT UNSIGNED", "decimal(20,0)", {1: (18446744073709551615, Decimal("18446744073709551615")),
                                                  2: (0, Decimal("0")),
                                                  3: (9223372036854775808, Decimal("9223372036854775808"))}),
    "flag": ("TINYINT(1)", "byte", {1: (1, 1), 2: (0, 0), 3: (2, 2)}),  # a byte, not a boolean
    "dec65": ("DECIMAL(65,30)", "string", {1: (DEC65_MAX, DEC65_MAX), 2: ("-" + DEC65_MAX, "-" + DEC65_MAX),
                                           3: ("-0." + "0" * 29 + "1", "-0.000000000000000000000000000001")}),
    "dec38": ("DECIMAL(38,10)", "decimal(38,10)", {
        1: ("9" * 28 + "." + "9" * 10, Decimal("9999999999999999999999999999.9999999999")),
        2: ("-" + "9" * 28 + "." + "9" * 10, Decimal("-9999999999999999999999999999.9999999999")),
        3: ("0", Decimal("0.0000000000"))}),
    "dec30": ("DECIMAL(30,10)", "decimal(30,10)", {
        1: ("9" * 20 + "." + "9" * 10, Decimal("99999999999999999999.9999999999")),
        2: ("-12345678901234567890.0123456789", Decimal("-12345678901234567890.0123456789")),
        3: ("0.5", Decimal("0.5000000000"))}),
    "dec10": ("DECIMAL(10,0)", "decimal(10,0)", {1: (9999999999, Decimal("9999999999")),
                                                 2: (-9999999999, Decimal("-9999999999")), 3: (0, Decimal("0"))}),
    "dec5": ("DECIMAL(5,2)", "decimal(5,2)", {1: ("999.99", Decimal("999.99")), 2: ("-999.99", Decimal("-999.99")),
                                              3: ("0.01", Decimal("0.01"))}),
    # FLOAT: the float32 nearest the value inserted, as a Python float
    "f": ("FLOAT", "float", {1: ("3.40282e38", 3.402820018375656e+38), 2: ("-1.5e-38", -1.500000042698307e-38),
                             3: ("3.14159", 3.141590118408203)}),
    "dbl": ("DOUBLE", "double", {1: (1.7976931348623157e308, 1.7976931348623157e308),
                                 2: (-2.2250738585072014e-308, -2.2250738585072014e-308), 3: (0.1, 0.1)}),
    # zero and impossible dates are NULL
    "d": ("DATE", "date", {1: ("9999-12-31", dt.date(9999, 12, 31)), 2: ("1000-01-01", dt.date(1000, 1, 1)),
                           3: ("2024-02-29", dt.date(2024, 2, 29)), 4: ("0000-00-00", None), 5: ("2020-00-15", None)}),
    "dt0": ("DATETIME(0)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30)), 4: (DT_ZERO, None), 5: ("2020-05-00 10:00:00", None)}),
    "dt1": ("DATETIME(1)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59, 900000)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30, 100000)), 4: (DT_ZERO, None)}),
    "dt2": ("DATETIME(2)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59, 990000)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30, 120000)), 4: (DT_ZERO, None)}),
    "dt3": ("DATETIME(3)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59, 999000)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30, 123000)), 4: (DT_ZERO, None)}),
    "dt4": ("DATETIME(4)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59, 999900)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30, 123400)), 4: (DT_ZERO, None)}),
    "dt5": ("DATETIME(5)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59, 999990)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30, 123450)), 4: (DT_ZERO, None)}),
    "dt6": ("DATETIME(6)", "timestamp_ntz", {
        1: (DT_MAX, dt.datetime(9999, 12, 31, 23, 59, 59, 999999)), 2: (DT_MIN, dt.datetime(1000, 1, 1)),
        3: (DT_MID, dt.datetime(2024, 2, 29, 13, 45, 30, 123456)), 4: (DT_ZERO, None),
        5: ("0000-01-01 00:00:00.5", None)}),
    # TIMESTAMP: the UTC instant, whichever zone the writing session had
    "ts0": ("TIMESTAMP(0) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, tzinfo=UTC))}),
    "ts1": ("TIMESTAMP(1) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, 900000, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, 100000, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, 600000, tzinfo=UTC))}),
    "ts2": ("TIMESTAMP(2) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, 990000, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, 120000, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, 650000, tzinfo=UTC))}),
    "ts3": ("TIMESTAMP(3) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, 999000, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, 123000, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, 654000, tzinfo=UTC))}),
    "ts4": ("TIMESTAMP(4) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, 999900, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, 123400, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, 654300, tzinfo=UTC))}),
    "ts5": ("TIMESTAMP(5) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, 999990, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, 123450, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, 654320, tzinfo=UTC))}),
    "ts6": ("TIMESTAMP(6) NULL DEFAULT NULL", "timestamp", {
        1: (TS_LAST, dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)),
        2: (TS_FIRST, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
        3: (TS_MID, dt.datetime(2024, 3, 10, 6, 30, 0, 123456, tzinfo=UTC)), 4: (DT_ZERO, None),
        7: (TS_SERVER, dt.datetime(2024, 3, 10, 20, 0, 0, 654321, tzinfo=UTC))}),
    # TIME: signed microseconds
    "tm0": ("TIME", "long", {1: ("838:59:59", 3_020_399_000_000), 2: ("-838:59:59", -3_020_399_000_000),
                             3: ("-00:00:01", -1_000_000)}),
    "tm1": ("TIME(1)", "long", {1: ("838:59:59.9", 3_020_399_900_000), 2: ("-00:00:01.3", -1_300_000),
                                3: ("-00:00:00.5", -500_000)}),
    "tm3": ("TIME(3)", "long", {1: ("838:59:59.999", 3_020_399_999_000), 2: ("-00:00:01.25", -1_250_000),
                                3: ("25:00:00.001", 90_000_001_000)}),
    "tm6": ("TIME(6)", "long", {1: ("838:59:59.999999", 3_020_399_999_999), 2: ("-12:34:56.789012", -45_296_789_012),
                                3: ("100:00:00.5", 360_000_500_000)}),
    "yr": ("YEAR", "short", {1: (2155, 2155), 2: (1901, 1901), 3: (2024, 2024), 4: (0, 0)}),  # 0000 is a value
    # CHAR drops trailing spaces, VARCHAR and TEXT keep them
    "ch": ("CHAR(10)", "string", {1: ("héllo 😀", "héllo 😀"), 2: ("", ""), 3: ("ab  ", "ab")}),
    "vc": ("VARCHAR(255)", "string", {1: (VC, "Ünïcødé — “quotes” ' \\ 😀🎉"), 2: ("", ""),
                                      3: ("tab\there\nnewline", "tab\there\nnewline")}),
    "tx": ("TEXT", "string", {1: (LONG_TEXT, LONG_TEXT), 2: ("", ""), 3: ("naïve façade", "naïve façade")}),
    "bn": ("BINARY(4)", "binary", {1: (b"ab", b"ab\x00\x00"), 2: (b"", b"\x00\x00\x00\x00"),
                                   3: (b"\xff", b"\xff\x00\x00\x00")}),
    "vb": ("VARBINARY(16)", "binary", {1: (b"\x00\xff\x00a", b"\x00\xff\x00a"), 2: (b"a\x00\x00", b"a\x00\x00"),
                                       3: (b"\x00", b"\x00")}),
    "bl": ("BLOB", "binary", {1: (ALL_BYTES, ALL_BYTES), 2: (b"", b""), 3: (b"\x00", b"\x00")}),
    "bit1": ("BIT(1)", "boolean", {1: (Sql("b'1'"), True), 2: (Sql("b'0'"), False), 3: (Sql("b'1'"), True)}),
    "bit10": ("BIT(10)", "binary", {1: (Sql("b'1010101011'"), b"\x02\xab"), 2: (Sql("b'0'"), b"\x00\x00"),
                                    3: (Sql("b'1000000000'"), b"\x02\x00")}),
    "bit64": ("BIT(64)", "binary", {1: (Sql("b'" + "1" * 64 + "'"), b"\xff\xff\xff\xff\xff\xff\xff\xff"),
                                    2: (Sql("b'0'"), b"\x00\x00\x00\x00\x00\x00\x00\x00"),
                                    3: (Sql("b'1'"), b"\x00\x00\x00\x00\x00\x00\x00\x01")}),
    "en": ("ENUM('small','médium','large 😀')", "string", {1: ("large 😀", "large 😀"), 2: ("small", "small"),
                                                           3: ("médium", "médium")}),
    # SET: members in definition order
    "st": ("SET('a','b','c','d')", "string", {1: ("d,a,c", "a,c,d"), 2: ("a", "a"), 3: ("b,c,a,d", "a,b,c,d"),
                                              4: ("", "")}),
    "js": ("JSON", "string", {1: (JSON_DOC, '{"a": [1, 2.5, null, true], "b": "é😀", "c": {"d": -1e-7}}'),
                              2: ("[]", "[]"), 3: ('"just a string"', '"just a string"')}),  # MariaDB: LONGTEXT
    # spatial: {wkb, srid}; every cell is also checked against the server's ST_AsBinary/ST_SRID (_check_spatial)
    "g": ("GEOMETRY", GEOMETRY, {
        1: (Sql("ST_GeomFromText('POINT(1 2)', 4326)"), {"wkb": _wkb_point(1, 2), "srid": 4326}),
        2: (Sql("ST_GeomFromText('POINT(0 0)')"), {"wkb": _wkb_point(0, 0), "srid": 0}),
        3: (Sql("ST_GeomFromText('LINESTRING(1 1,2 2)', 27700)"), {"wkb": _wkb_line(1, 1, 2, 2), "srid": 27700})}),
    "pt": ("POINT", GEOMETRY, {
        1: (Sql("ST_PointFromText('POINT(-1.5 2.25)')"), {"wkb": _wkb_point(-1.5, 2.25), "srid": 0})}),
    "ls": ("LINESTRING", GEOMETRY, {
        1: (Sql("ST_GeomFromText('LINESTRING(0 0,1 1,2 2)', 3857)"), {"wkb": _wkb_line(0, 0, 1, 1, 2, 2),
                                                                       "srid": 3857})}),
    "pg": ("POLYGON", GEOMETRY, {
        1: (Sql("ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0),(5 5,7 5,7 7,5 7,5 5))')"),
            {"wkb": _wkb_polygon(SQUARE, HOLE), "srid": 0})}),
    "mpt": ("MULTIPOINT", GEOMETRY, {
        1: (Sql("ST_GeomFromText('MULTIPOINT(0 0,20 20,60 60)', 4294967295)"),
            {"wkb": _wkb_collection(4, _wkb_point(0, 0), _wkb_point(20, 20), _wkb_point(60, 60)),
             "srid": 4294967295})}),
    "mls": ("MULTILINESTRING", GEOMETRY, {
        1: (Sql("ST_GeomFromText('MULTILINESTRING((10 10,20 20),(15 15,30 15))')"),
            {"wkb": _wkb_collection(5, _wkb_line(10, 10, 20, 20), _wkb_line(15, 15, 30, 15)), "srid": 0})}),
    "mpg": ("MULTIPOLYGON", GEOMETRY, {
        1: (Sql("ST_GeomFromText('MULTIPOLYGON(((0 0,10 0,10 10,0 10,0 0)),((5 5,7 5,7 7,5 7,5 5)))')"),
            {"wkb": _wkb_collection(6, _wkb_polygon(SQUARE), _wkb_polygon(HOLE)), "srid": 0})}),
    "gc": ("GEOMETRYCOLLECTION", GEOMETRY, {
        1: (Sql("ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))')"),
            {"wkb": _wkb_collection(7, _wkb_point(1, 1), _wkb_line(0, 0, 1, 1)), "srid": 0}),
        2: (Sql("ST_GeomFromText('GEOMETRYCOLLECTION EMPTY')"), {"wkb": _wkb_collection(7), "srid": 0})}),
    # MariaDB's text-form types: the server's text (the binlog cuts an all-zero value's every byte)
    "i4": ("INET4", "string", {1: ("255.255.255.255", "255.255.255.255"), 2: ("0.0.0.0", "0.0.0.0"),
                               3: ("10.0.0.1", "10.0.0.1")}),
    "i6": ("INET6", "string", {
        1: ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), 2: ("::", "::"),
        3: ("::ffff:192.168.0.1", "::ffff:192.168.0.1")}),  # IPv4-mapped
    "uu": ("UUID", "string", {
        1: ("ffffffff-ffff-ffff-ffff-ffffffffffff", "ffffffff-ffff-ffff-ffff-ffffffffffff"),
        2: ("00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"),
        # a version-1 UUID: MariaDB stores it byte-swapped
        3: ("123e4567-e89b-12d3-a456-426655440000", "123e4567-e89b-12d3-a456-426655440000")}),
    # ZEROFILL (implies UNSIGNED): the number, without the padding
    "zf": ("INT(6) ZEROFILL", "long", {1: (999999, 999999), 2: (0, 0), 3: (42, 42)}),
    "zbig": ("BIGINT ZEROFILL", "decimal(20,0)", {1: (18446744073709551615, Decimal("18446744073709551615")),
                                                  2: (0, Decimal("0")), 3: (7, Decimal("7"))}),
    "zd": ("DECIMAL(8,2) ZEROFILL", "decimal(8,2)", {1: ("999999.99", Decimal("999999.99")), 2: (0, Decimal("0.00")),
                                                     3: ("1.5", Decimal("1.50"))}),
    "zdb": ("DECIMAL(50,2) ZEROFILL", "string", {1: ("9" * 48 + ".99", "9" * 48 + ".99"),
                                                 2: (0, "0.00"), 3: ("123.45", "123.45")}),
    "zfl": ("FLOAT ZEROFILL", "float", {1: (1.5, 1.5), 2: (0, 0.0), 3: (2.25, 2.25)}),
    # aliases
    "bo": ("BOOLEAN", "byte", {1: (True, 1)}),
    "bl2": ("BOOL", "byte", {1: (False, 0)}),
    "re": ("REAL", "double", {1: (1.5, 1.5)}),
    "dp": ("DOUBLE PRECISION", "double", {1: (-2.5, -2.5)}),
    "f4": ("FLOAT4", "float", {1: (0.5, 0.5)}),
    "f8": ("FLOAT8", "double", {1: (1e300, 1e300)}),
    "i1": ("INT1", "byte", {1: (127, 127)}),
    "int2": ("INT2", "short", {1: (-32768, -32768)}),
    "int3": ("INT3", "integer", {1: (-8388608, -8388608)}),
    "int4": ("INT4", "integer", {1: (-2147483648, -2147483648)}),
    "i8": ("INT8", "long", {1: (9223372036854775807, 9223372036854775807)}),
    "mid": ("MIDDLEINT", "integer", {1: (8388607, 8388607)}),
    "intg": ("INTEGER UNSIGNED", "long", {1: (4294967295, 4294967295)}),
    "nm": ("NUMERIC(7,3)", "decimal(7,3)", {1: ("9999.999", Decimal("9999.999"))}),
    "dc": ("DEC(5,1)", "decimal(5,1)", {1: ("-9999.9", Decimal("-9999.9"))}),
    "fx": ("FIXED(6,2)", "decimal(6,2)", {1: ("9999.99", Decimal("9999.99"))}),
    "nch": ("NATIONAL CHAR(5)", "string", {1: ("ñandú", "ñandú"), 2: ("", "")}),
    "nvc": ("NVARCHAR(10)", "string", {1: ("Привет мир", "Привет мир"), 2: ("", "")}),
    "lvc": ("LONG VARCHAR", "string", {1: (LONG_TEXT, LONG_TEXT), 2: ("", "")}),
    "lvb": ("LONG VARBINARY", "binary", {1: (ALL_BYTES, ALL_BYTES), 2: (b"", b"")}),
    "chb": ("CHAR(4) BYTE", "binary", {1: (b"ab", b"ab\x00\x00"), 2: (b"", b"\x00\x00\x00\x00")}),
    # BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE: counts the rows inserted
    "ser": ("SERIAL", "decimal(20,0)", {i: (AUTO, Decimal(i)) for i in IDS}),
    # lengths, attributes, generated and invisible columns
    "v0": ("VARCHAR(0)", "string", {1: ("", ""), 2: ("", "")}),
    "c0": ("CHAR(0)", "string", {1: ("", ""), 2: ("", "")}),
    # YEAR(2) shows 69 for both 1969 and 2069: the stored year is kept
    "yr2": ("YEAR(2)", "short", {1: (2069, 2069), 2: (1969, 1969), 3: (70, 1970)}),
    "inv": ("INT INVISIBLE", "integer", {1: (7, 7), 2: (-1, -1)}),
    "gv": ("INT AS (id * 2) VIRTUAL", "integer", {i: (AUTO, 2 * i) for i in IDS}),
    "gs": ("VARCHAR(300) AS (CONCAT('<', vc, '>')) PERSISTENT", "string", {
        1: (AUTO, "<Ünïcødé — “quotes” ' \\ 😀🎉>"), 2: (AUTO, "<>"), 3: (AUTO, "<tab\there\nnewline>")}),
    # character sets, ENUM/SET members, compressed columns
    "l1": ("VARCHAR(20) CHARACTER SET latin1", "string", {
        # café € and two bytes Python's cp1252 lacks: MariaDB's latin1 has C1 controls for 0x81, 0x8d, 0x8f, 0x90, 0x9d
        1: (Sql("CONVERT(X'636166e92080819d' USING latin1)"), "café €\x81\x9d"), 2: ("", ""),
        3: ("naïve façade", "naïve façade")}),
    "enl1": ("ENUM('é','ü','x') CHARACTER SET latin1", "string", {1: ("ü", "ü"), 2: ("é", "é")}),
    "stl1": ("SET('é','ü','x') CHARACTER SET latin1", "string", {1: ("x,é", "é,x"), 2: ("", "")}),
    # 'a😀': a member the server's own metadata shows as 'a?'
    "ste": ("SET('a😀','b')", "string", {1: ("b,a😀", "a😀,b"), 2: ("", "")}),
    # 'tiny': too short to compress, stored with a 0 header
    "ct": ("TEXT COMPRESSED", "string", {1: (LONG_TEXT, LONG_TEXT), 2: ("", ""), 3: ("tiny", "tiny")}),
    "cvc": ("VARCHAR(100) CHARACTER SET latin1 COMPRESSED", "string", {
        1: ("crème brûlée " * 7, "crème brûlée " * 7), 2: ("", ""), 3: ("x", "x")}),
    "cb": ("BLOB COMPRESSED", "binary", {1: (ALL_BYTES, ALL_BYTES), 2: (b"", b"")}),
}
# name → (MySQL column type, Delta type)
COLUMNS = {c: (sql_type, delta_type) for c, (sql_type, delta_type, _) in MATRIX.items()}
# (row id, column) → expected Delta value, for every cell of the matrix
EXPECTED = {(i, c): cells[i][1] if i in cells else None for c, (_, _, cells) in MATRIX.items() for i in IDS}
# The INSERTs: rows 1-6 from a '+05:30' session, SERVER_ZONE_ROW from a session on the server's zone ('-08:00').
ROWS, (SERVER_ZONE_ROW,) = [[{c: cells[i][0] for c, (_, _, cells) in MATRIX.items()
                              if i in cells and cells[i][0] is not AUTO} for i in ids] for ids in (IDS[:-1], IDS[-1:])]


def _us(h: int, m: int, s: int, us: int = 0, sign: int = 1) -> int:
    return sign * ((h * 3600 + m * 60 + s) * 1_000_000 + us)


def _insert(conn, table: str, row: dict) -> None:
    names = ", ".join(f"`{c}`" for c in row)
    marks = ", ".join(v if isinstance(v, Sql) else "%s" for v in row.values())
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{table}` ({names}) VALUES ({marks})",
                    [v for v in row.values() if not isinstance(v, Sql)])


def _write_rows(mariadb, conn, database: str):
    """Insert ROWS from a '+05:30' session and SERVER_ZONE_ROW from a session on the server's
    default zone, set to '-08:00' (restored by the caller); returns the binlog positions around them."""
    with conn.cursor() as cur:
        start = master_position(cur)
        cur.execute("SET GLOBAL time_zone = '-08:00'")
    for zone, rows in (("+05:30", ROWS), (None, [SERVER_ZONE_ROW])):
        init = "SET sql_mode = 'STRICT_TRANS_TABLES'" + (f", time_zone = '{zone}'" if zone else "")
        with mariadb.connect(database, init_command=init) as writer:
            with writer.cursor() as cur:
                cur.execute("SELECT @@session.time_zone")
                assert cur.fetchone()[0] == (zone or "-08:00")
            for row in rows:
                _insert(writer, "types", row)
    with conn.cursor() as cur:
        return start, master_position(cur)


def _create_types_table(conn) -> str:
    """The table holding every type of the matrix; returns the server's global time zone."""
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE types (" + ", ".join(f"`{c}` {t}" for c, (t, _) in COLUMNS.items()) + ")")
        cur.execute("SELECT @@global.time_zone")
        return cur.fetchone()[0]


@contextlib.contextmanager
def type_matrix(mariadb, conn, database: str):
    """The ``types`` table created and its rows written (:func:`_write_rows`); yields the binlog
    positions around them, the server's global time zone at '-08:00' until the block ends."""
    server_zone = _create_types_table(conn)
    try:
        yield _write_rows(mariadb, conn, database)
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL time_zone = %s", (server_zone,))


def load_type_matrix(mariadb, conn, database: str) -> None:
    """The ``types`` table with its rows (:func:`type_matrix`), the server's time zone restored."""
    with type_matrix(mariadb, conn, database):
        pass


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_type_matrix_snapshot_equals_binlog(db, mariadb, spark, make_config, runner):
    """Every cell of the matrix, read by the snapshot into Delta (in threads of this process,
    and as Spark tasks) and decoded from the binlog, is its literal."""
    name, conn = db
    with type_matrix(mariadb, conn, name) as (start, end):
        _check_both_paths(name, spark, make_config, start, end, runner)  # with the server zone still at -08:00


def _delta_type(t) -> str:
    if t.type == "struct":
        return "struct<" + ",".join(f"{f.name}:{_delta_type(f.type)}" for f in t.fields) + ">"
    return t.type


def _check_spatial(cfg, name: str, by_id: dict) -> None:
    """Every spatial cell in Delta is the server's own ST_AsBinary and ST_SRID of the value."""
    spatial = [c for c, (_, t) in COLUMNS.items() if t == GEOMETRY]
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, " + ", ".join(f"ST_AsBinary(`{c}`), ST_SRID(`{c}`)" for c in spatial)
                    + f" FROM `{name}`.types")
        server = {r[0]: r[1:] for r in cur.fetchall()}
    wrong = [f"{c} (id={i}): delta={by_id[i][c]!r} server={server[i][2 * k:2 * k + 2]!r}"
             for i in server for k, c in enumerate(spatial)
             if by_id[i][c] != (None if server[i][2 * k] is None
                                else {"wkb": server[i][2 * k], "srid": server[i][2 * k + 1]})]
    assert not wrong, "\n".join(wrong)


def _snapshot_and_binlog(cfg, spark, name: str, table: str, start, end):
    """``name.table`` read by the snapshot (Spark) into Delta, and its inserts in (start, end]
    decoded from the binlog: (snapshot summary, Delta rows, binlog rows), sorted by id, same ids."""
    summary = snapshot(cfg, spark)
    snap = DeltaTable(table_uri(cfg.sink.path, f"{name}.{table}")).to_pyarrow_table().sort_by("id")
    settings = connection_settings(cfg)
    with connect(settings) as control, control.cursor() as cur:
        schema = describe_table(cur, name, table)
    changes = list(read_changes(settings, cfg.source.server_id + 9, start, end, {(name, table)}))
    assert {ch.op for ch in changes} == {"c"}
    rows = [{c.name: binlog_value(c, ch.after[c.name]) for c in schema.columns} for ch in changes]
    binlog = rows_to_arrow(schema, rows).sort_by("id")
    assert snap.column("id").to_pylist() == binlog.column("id").to_pylist()
    return summary, snap, binlog


def _disagreements(a: pa.Table, b: pa.Table, columns, names=("snapshot", "binlog")) -> list[str]:
    """Cells of two tables sorted alike that differ in value or Python type."""
    return [f"{col} (id={i}): {names[0]}={x!r} {names[1]}={y!r}" for col in columns
            for i, x, y in zip(a.column("id").to_pylist(), a.column(col).to_pylist(), b.column(col).to_pylist(),
                               strict=True)
            if x != y or type(x) is not type(y)]


def _same(value, want) -> bool:
    """``value`` is ``want``: equal, of the same Python type, a Decimal with the same digits (its scale too),
    an aware datetime at the same UTC offset."""
    if type(value) is not type(want) or value != want:
        return False
    if isinstance(want, Decimal):
        return str(value) == str(want)
    return not isinstance(want, dt.datetime) or value.utcoffset() == want.utcoffset()


def _unexpected(table: pa.Table, expected: dict, path: str = "delta") -> list[str]:
    """Cells of ``table`` (read through ``path``) that are not ``expected`` ((id, column) → value)."""
    by_id = {r["id"]: r for r in table.to_pylist()}
    return [f"{col} (id={i}): {path}={by_id[i][col]!r} expected={want!r}" for (i, col), want in expected.items()
            if not _same(by_id[i][col], want)]


def _off_the_matrix(paths: dict[str, pa.Table]) -> list[str]:
    """The cells of the ``types`` table read through each path (name → rows) that are not the matrix's EXPECTED;
    the table must hold exactly the matrix's rows."""
    wrong = [f"{path}: ids {t.column('id').to_pylist()}" for path, t in paths.items()
             if sorted(t.column("id").to_pylist()) != list(IDS)]
    return wrong or [line for path, t in paths.items() for line in _unexpected(t, EXPECTED, path)]


def _check_both_paths(name, spark, make_config, start, end, runner="auto"):
    cfg = make_config(name, chunk_size=2, source={"snapshot": {"chunk_size": 2, "runner": runner}})
    summary, snap, binlog = _snapshot_and_binlog(cfg, spark, name, "types", start, end)
    assert summary.tables[0].chunks >= 3 and summary.tables[0].rows_written == len(IDS)
    delta = DeltaTable(table_uri(cfg.sink.path, f"{name}.types"))
    delta_types = {f.name: _delta_type(f.type) for f in delta.schema().fields}
    assert delta_types == {**{c: t for c, (_, t) in COLUMNS.items()}, "_cdc_op": "string", "_cdc_seq": "long"}

    # Every cell, through each path, is the matrix's expected value.
    wrong = _off_the_matrix({"snapshot": snap, "binlog": binlog})
    assert not wrong, "values differ from the type matrix:\n" + "\n".join(wrong)
    _check_spatial(cfg, name, {r["id"]: r for r in snap.to_pylist()})

    # And Delta equals MySQL, read by a third client (pymysql, UTC session).
    assert_equal(cfg, [f"{name}.types"])


def test_type_matrix_through_the_stream(db, mariadb, spark, make_config):
    """The stream (reader process → MERGE) writes every cell of the type matrix as its literal, as the snapshot does."""
    name, conn = db
    server_zone = _create_types_table(conn)
    streamed = make_config(name, chunk_size=2)
    snapshot(streamed, spark)  # of the empty table: the stream writes every row
    try:
        _write_rows(mariadb, conn, name)
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL time_zone = %s", (server_zone,))
    StreamEngine(streamed, until_now=True).run()
    via_stream = DeltaTable(table_uri(streamed.sink.path, f"{name}.types")).to_pyarrow_table()

    # The snapshot path, into another lake, gives the same cells: the matrix's.
    snapped = make_config(name, chunk_size=2, sink={"path": streamed.sink.path + "-snapshot"})
    snapshot(snapped, spark)
    via_snapshot = DeltaTable(table_uri(snapped.sink.path, f"{name}.types")).to_pyarrow_table()
    wrong = _off_the_matrix({"stream": via_stream, "snapshot": via_snapshot})
    assert not wrong, "values differ from the type matrix:\n" + "\n".join(wrong)

    # Updates and deletes MERGE on rows holding every type.
    with conn.cursor() as cur:
        cur.execute("UPDATE types SET f = NULL, vc = CONCAT(LEFT(COALESCE(vc, ''), 200), '✓')")
        cur.execute("DELETE FROM types WHERE id = 2")
    StreamEngine(streamed, until_now=True).run()
    assert_equal(streamed, [f"{name}.types"])


# --- character sets --------------------------------------------------------------------------

# A text in each multi-byte character set's repertoire (the server refuses characters a set lacks),
# outside the few codes docs/type-mapping.md lists as decoded differently from the server.
TEXTS = {
    "utf8mb4": "Ünïcødé ✓ 中文 😀🎉", "utf16": "Ünïcødé ✓ 中文 😀🎉", "utf16le": "Ünïcødé ✓ 中文 😀🎉",
    "utf32": "Ünïcødé ✓ 中文 😀🎉", "utf8mb3": "Ünïcødé ✓ 中文", "ucs2": "Ünïcødé ✓ 中文 €",
    "sjis": "日本語のテキスト ｶﾀｶﾅ", "cp932": "日本語のテキスト ｶﾀｶﾅ ①Ⅱ㈱", "ujis": "日本語のテキスト ｶﾀｶﾅ",
    "eucjpms": "日本語のテキスト ｶﾀｶﾅ", "euckr": "한국어 텍스트", "gbk": "中文文本 简体 繁體",
    "gb2312": "中文文本 简体", "big5": "中文文本 繁體", "gb18030": "中文 😀",
}
LATIN1_HIGH = ("€\x81‚ƒ„…†‡ˆ‰Š‹Œ\x8dŽ\x8f\x90‘’“”•–—˜™š›œ\x9džŸ"  # cp1252, with C1 controls where it has none
               + "".join(chr(b) for b in range(0xA0, 0x100)))


def test_charsets_snapshot_equals_binlog(db, spark, make_config):
    """A column in every character set the server has: each single-byte set's 256 bytes (as
    stored, undefined ones included) and a text in each multi-byte set's script give the same
    Delta value through the snapshot (the server converts) and the binlog (binlake decodes)."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS "
                    "WHERE CHARACTER_SET_NAME <> 'binary' ORDER BY 1")
        sets = dict(cur.fetchall())
        cur.execute("CREATE TABLE cs (id INT PRIMARY KEY, " + ", ".join(f"`{c}` TEXT CHARACTER SET {c}" for c in sets)
                    + ")")
        start = master_position(cur)
    every_byte = {c: Sql(f"CONVERT(X'{bytes(range(128 if c == 'ascii' else 256)).hex()}' USING {c})")
                  for c, n in sets.items() if n == 1}
    _insert(conn, "cs", {"id": 1, **every_byte, **{c: TEXTS[c] for c, n in sets.items() if n > 1}})
    _insert(conn, "cs", {"id": 2})
    _insert(conn, "cs", {"id": 3, **{c: "" for c in sets}})
    with conn.cursor() as cur:
        end = master_position(cur)

    cfg = make_config(name)
    _, snap, binlog = _snapshot_and_binlog(cfg, spark, name, "cs", start, end)
    differences = _disagreements(snap, binlog, sets)
    assert not differences, "snapshot and binlog paths disagree:\n" + "\n".join(differences)
    expected = {
        (1, "latin1"): "".join(chr(b) for b in range(128)) + LATIN1_HIGH,
        (1, "ascii"): "".join(chr(b) for b in range(128)),
        **{(1, c): TEXTS[c] for c, n in sets.items() if n > 1},
        **{(2, c): None for c in sets},
        **{(3, c): "" for c in sets},
    }
    wrong = _unexpected(snap, expected)
    assert not wrong, "\n".join(wrong)
    assert snap.column("cp1251").to_pylist()[0][0xC0:] == "".join(chr(0x410 + i) for i in range(64))  # А…я
    assert_equal(cfg, [f"{name}.cs"])


def test_text_decoding_never_raises():
    """Bytes that are not valid in a column's character set become '?' per byte, never an error."""
    garbage = bytes([0xFF, 0xFE, 0x80, 0x81, 0xE2, 0x82, 0x00, 0xF0, 0x9F])
    for charset in [*SINGLE_BYTE, *_CODECS]:
        assert isinstance(decoder(f"{charset}_general_ci")(garbage), str), charset
    assert decoder("utf8mb4_bin")(b"a\xffb\xe2\x82") == "a?b??"
    assert decoder("ascii_general_ci")(b"a\x80") == "a?"
    assert decoder("binary")(b"\xff") == b"\xff"


def test_inet_and_uuid_text_is_the_servers(db, make_config):
    """INET4, INET6 and UUID values decoded from the binlog read as the server prints them:
    every pattern of zero words in an IPv6 address (the '::' rule), IPv4-mapped and
    -compatible forms, and UUIDs of every version MariaDB stores swapped or not."""
    name, conn = db
    rng = random.Random(8)
    words = [[(0 if mask >> i & 1 else rng.choice([1, 0xFFFF, rng.randrange(1, 0x10000)])) for i in range(8)]
             for mask in range(256)]
    words += [[0, 0, 0, 0, 0, w5, rng.randrange(0x10000), rng.randrange(0x10000)] for w5 in (0, 0xFFFF, 1)
              for _ in range(20)]
    ips = [ipaddress.IPv6Address(a).packed for a in INET6_TEXT] + [struct.pack(">8H", *w) for w in words]
    uuids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(200)]
    uuids += [uuid.uuid1(), uuid.UUID("123e4567-e89b-12d3-a456-426655440000"), uuid.UUID(int=0)]
    uuids = [u for u in uuids if (u.int >> 76) & 0xF < 8 or u.int >> 63 & 1]  # MariaDB refuses version >= 8, variant 0
    n = max(len(ips), len(uuids))
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE ip (id INT PRIMARY KEY, i6 INET6, i4 INET4, u UUID)")
        start = master_position(cur)
        cur.executemany("INSERT INTO ip VALUES (%s, CAST(%s AS INET6), CAST(%s AS INET4), CAST(%s AS UUID))",
                        [(i, ips[i % len(ips)], ips[i % len(ips)][-4:], uuids[i % len(uuids)].bytes)
                         for i in range(n)])
        end = master_position(cur)
        cur.execute("SELECT id, i6, i4, u FROM ip ORDER BY id")
        server = {r[0]: r[1:] for r in cur.fetchall()}
        schema = describe_table(cur, name, "ip")
    cfg = make_config(name)
    cols = schema.columns[1:]
    decoded = {ch.after["id"]: tuple(binlog_value(c, ch.after[c.name]) for c in cols)
               for ch in read_changes(connection_settings(cfg), cfg.source.server_id + 9, start, end, {(name, "ip")})}
    assert len(decoded) == n
    wrong = [(i, decoded[i], server[i]) for i in server if decoded[i] != server[i]]
    assert not wrong, wrong[:10]
    assert [server[i][0] for i in range(len(INET6_TEXT))] == list(INET6_TEXT.values())


# IPv6 addresses and their text as MariaDB prints it (sql_type_inet.cc), not as Python's ipaddress does.
INET6_TEXT = {
    "2001:db8:0:1:1:1:1:1": "2001:db8::1:1:1:1:1",  # a single zero word is '::' too
    "1:0:0:1:0:0:0:1": "1:0:0:1::1",  # the longest run
    "1:0:0:1:0:0:1:1": "1::1:0:0:1:1",  # the first of equal runs
    "::ffff:1.2.3.4": "::ffff:1.2.3.4",  # IPv4-mapped
    "::1.2.3.4": "::1.2.3.4",  # IPv4-compatible
    "::1": "::1",
    "::": "::",
    "1::": "1::",
    "fe80::ABCD:0001": "fe80::abcd:1",
}


# --- MariaDB 5.3's temporal format ------------------------------------------------------------


def _create_in_53_format(conn, ddl: str) -> None:
    """CREATE TABLE with MariaDB 5.3's temporal format, as tables made before MariaDB 10.1.2 have."""
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
        try:
            cur.execute(ddl)
        finally:
            cur.execute("SET GLOBAL mysql56_temporal_format = ON")


def test_mariadb_53_temporal_format(db, spark, make_config):
    """Whole-second DATETIME, TIME and TIMESTAMP in MariaDB 5.3's format (old binlog types,
    TIME as a signed ±HHMMSS the decoder reads unsigned) give the same values both ways."""
    name, conn = db
    _create_in_53_format(conn, "CREATE TABLE old (id INT PRIMARY KEY, d DATETIME, t TIME, ts TIMESTAMP NULL)")
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                    "AND COLUMN_TYPE LIKE '%%mariadb-5.3%%'", (name,))
        assert cur.fetchone()[0] == 3
        start = master_position(cur)
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("INSERT INTO old VALUES (1, '2024-02-29 13:45:30', '-838:59:59', '2038-01-19 03:14:07'), "
                    "(2, '1000-01-01 00:00:00', '838:59:59', '1970-01-01 00:00:01'), (3, NULL, '-00:00:01', NULL), "
                    "(4, '0000-00-00 00:00:00', '00:00:00', NULL)")
        end = master_position(cur)
    cfg = make_config(name)
    _, snap, binlog = _snapshot_and_binlog(cfg, spark, name, "old", start, end)
    differences = _disagreements(snap, binlog, ["d", "t", "ts"])
    assert not differences, "\n".join(differences)
    wrong = _unexpected(snap, {
        (1, "d"): dt.datetime(2024, 2, 29, 13, 45, 30), (1, "t"): _us(838, 59, 59, sign=-1),
        (1, "ts"): dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC), (2, "t"): _us(838, 59, 59),
        (2, "ts"): dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), (3, "t"): _us(0, 0, 1, sign=-1),
        (4, "d"): None, (4, "t"): 0,
    })
    assert not wrong, "\n".join(wrong)
    assert_equal(cfg, [f"{name}.old"])


# --- source.exclude_columns and unmappable columns -------------------------------------------


def test_validate_names_what_leaves_a_column_out(db, make_config):
    """validate: an excluded key column, and a column whose rows the binlog decoder cannot
    read (MariaDB 5.3's fractional DATETIME), each one line saying what to change; a type
    binlake does not know names source.exclude_columns with the column's regex."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE people (id INT PRIMARY KEY, ssn CHAR(11))")
    _create_in_53_format(conn, "CREATE TABLE legacy (id INT PRIMARY KEY, at DATETIME(3))")
    cfg = make_config(name, source={"exclude_columns": [rf"{name}\.people\.(id|ssn)"]})
    problems = check(cfg)
    assert len(problems) == 2, problems
    key, legacy = sorted(problems, key=lambda p: "legacy" in p)
    assert f"{name}.people.id" in key and "key column" in key and "cannot be excluded" in key
    assert f"{name}.legacy" in legacy and "'at'" in legacy and "mariadb-5.3" in legacy
    assert f"ALTER TABLE `{name}`.`legacy` FORCE" in legacy and rf"'{name}\.legacy' to source.exclude_tables" in legacy

    # Excluding only ssn, and the legacy table, the configuration is valid.
    ok = make_config(name, source={"exclude_columns": [rf"{name}\.people\.ssn"],
                                   "exclude_tables": [rf"{name}\.legacy"]})
    assert check(ok) == []

    # A data type binlake does not map (MariaDB 11.7's VECTOR, here by hand): its regex, ready to paste.
    future = TableSchema("shop", "items", (Column("id", "int", "int(11)"), Column("emb", "vector", "vector(3)")),
                         ("id",))
    (line,) = unmappable(future)
    assert line == ("shop.items: column 'emb' has type vector(3), which binlake does not map; "
                    r"add 'shop\.items\.emb' to source.exclude_columns to leave it out")


def test_exclude_columns_through_snapshot_and_stream(db, spark, make_config):
    """Excluded columns (a regex, as Debezium's column.exclude.list) are not read by the
    snapshot, not written by the stream, not in Delta and not in the schema history; the rest
    of each row is; a column added later under an excluded name stays out, a captured column
    renamed to an excluded name is kept as a dropped one, and a table created while streaming
    is captured without its excluded columns."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE people (id INT PRIMARY KEY, nick VARCHAR(20), ssn CHAR(11), note TEXT, "
                    "pt POINT)")
        cur.executemany("INSERT INTO people VALUES (%s, %s, %s, %s, ST_GeomFromText('POINT(1 1)'))",
                        [(i, f"n{i}", f"{i:03}-00-0000", f"note {i}") for i in range(1, 51)])
    cfg = make_config(name, chunk_size=10, source={"exclude_columns": [rf"{name}\.people2?\.(ssn|secret_.*)"]})
    snapshot(cfg, spark)
    uri = table_uri(cfg.sink.path, f"{name}.people")
    assert DeltaTable(uri).schema().to_arrow().names == ["id", "nick", "note", "pt", "_cdc_op", "_cdc_seq"]
    assert_equal(cfg, [f"{name}.people"])
    StreamEngine(cfg, until_now=True).run()  # the stream's baseline schema, before the DDL below

    with conn.cursor() as cur:
        cur.execute("INSERT INTO people VALUES (51, 'new', '999-99-9999', 'n', NULL)")
        cur.execute("UPDATE people SET ssn = '000-00-0000', nick = CONCAT(nick, '!') WHERE id <= 10")
        cur.execute("DELETE FROM people WHERE id = 20")
        cur.execute("ALTER TABLE people ADD COLUMN secret_pin INT, ADD COLUMN age INT")
        cur.execute("UPDATE people SET secret_pin = 1234, age = id WHERE id <= 30")
        cur.execute("ALTER TABLE people RENAME COLUMN note TO secret_note")
        cur.execute("UPDATE people SET secret_note = 'hidden', nick = 'x' WHERE id = 5")
        cur.execute("CREATE TABLE people2 (id INT PRIMARY KEY, ssn CHAR(11), x INT)")  # captured from its creation
        cur.execute("INSERT INTO people2 VALUES (1, '123-45-6789', 7)")
    StreamEngine(cfg, until_now=True).run()
    assert DeltaTable(table_uri(cfg.sink.path, f"{name}.people2")).schema().to_arrow().names == [
        "id", "x", "_cdc_op", "_cdc_seq"]
    assert_equal(cfg, [f"{name}.people2"])

    delta = DeltaTable(uri)
    # note is kept as a dropped column would be under lenient (NULL in rows written later)
    assert delta.schema().to_arrow().names == ["id", "nick", "note", "pt", "_cdc_op", "_cdc_seq", "age"]
    rows = {r["id"]: r for r in delta.to_pyarrow_table().to_pylist()}
    assert rows[51]["nick"] == "new" and rows[10]["nick"] == "n10!" and 20 not in rows and rows[30]["age"] == 30
    assert rows[5]["note"] is None and rows[6]["note"] == "note 6"
    assert_equal(cfg, [f"{name}.people"])  # MySQL's captured columns: id, nick, pt, age
    history = ControlStore.of(cfg).schema_history()
    recorded = [[c.name for c in r.schema.columns] for r in history if r.schema is not None]
    assert recorded and not [cols for cols in recorded if {"ssn", "secret_pin", "secret_note"} & set(cols)]


def test_uuid_and_inet6_primary_keys(db, spark, make_config):
    """Tables keyed by UUID (version 1 values, which MariaDB stores byte-swapped, and version 4)
    and by INET6 are split into chunks on the server's order, snapshotted, and streamed by key."""
    name, conn = db
    rng = random.Random(3)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE u (id UUID PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE i (id INET6 PRIMARY KEY, v INT)")
        cur.executemany("INSERT INTO u VALUES (%s, %s)",
                        [(str(uuid.uuid1() if k % 2 else uuid.UUID(int=rng.getrandbits(128), version=4)), k)
                         for k in range(300)])
        cur.executemany("INSERT INTO i VALUES (%s, %s)",
                        [(f"2001:db8::{k:x}" if k % 3 else f"::ffff:10.0.{k // 256}.{k % 256}", k) for k in range(300)])
    cfg = make_config(name, chunk_size=37)
    summary = snapshot(cfg, spark)
    assert all(t.chunks > 5 for t in summary.tables)
    assert_equal(cfg, [f"{name}.u", f"{name}.i"])
    with conn.cursor() as cur:
        cur.execute("UPDATE u SET v = v + 1000 WHERE v % 3 = 0")
        cur.execute("DELETE FROM i WHERE v % 5 = 0")
        cur.execute("UPDATE i SET v = -v")
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, [f"{name}.u", f"{name}.i"])


def test_exclude_columns_config():
    """source.exclude_columns is a list of regexes over "db.table.column", matched in full;
    one that does not compile is an error naming the key."""
    raw = {"pipeline": {"name": "p"}, "source": {"user": "u", "tables": [r"shop\..*"]}}
    cfg = parse_config({**raw, "source": {**raw["source"], "exclude_columns": [r"shop\.c\.(ssn|card_.*)"]}})
    assert cfg.source.excludes_column("shop.c.ssn") and cfg.source.excludes_column("shop.c.card_no")
    assert not cfg.source.excludes_column("shop.c.ssn2") and not cfg.source.excludes_column("xshop.c.ssn")
    assert parse_config(raw).source.exclude_columns == []
    with pytest.raises(ConfigError, match=r"source\.exclude_columns.*invalid regex"):
        parse_config({**raw, "source": {**raw["source"], "exclude_columns": ["shop.c.(ssn"]}})
