"""Type matrix: every supported MySQL type, read through the snapshot path (Spark
chunk reader → Delta) and through the binlog (python-mysql-replication with
cdc_core/binlog_columns.py → binlog_value → rows_to_arrow), gives the same Delta value
both ways; that value is the one docs/type-mapping.md documents (EXPECTED: literal
values) and equals MySQL's. Also: character sets, INET6 text, and
source.exclude_columns."""

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

from cdc_core.binlog import read_changes
from cdc_core.charset_tables import SINGLE_BYTE
from cdc_core.charsets import _CODECS, decoder
from cdc_core.config import ConfigError, parse_config
from cdc_core.positions import master_position
from cdc_core.source import connect, connection_settings
from cdc_core.table_schema import Column, TableSchema, describe_table
from cdc_core.types import binlog_value, rows_to_arrow, unmappable
from cdc_core.validate import check
from pipelines.control_store import ControlStore
from pipelines.delta_sink import table_uri
from pipelines.stream import StreamEngine
from tests.helpers import assert_equal, snapshot

UTC = dt.UTC


class Sql(str):
    """A value written into the INSERT as SQL text (bit literals, spatial values), not as a parameter."""


GEOMETRY = "struct<wkb:binary,srid:long>"


# name → (MySQL column type, Delta type)
COLUMNS = {
    "id": ("INT PRIMARY KEY", "integer"),
    "ti": ("TINYINT", "byte"),
    "ti_u": ("TINYINT UNSIGNED", "short"),
    "si": ("SMALLINT", "short"),
    "si_u": ("SMALLINT UNSIGNED", "integer"),
    "mi": ("MEDIUMINT", "integer"),
    "mi_u": ("MEDIUMINT UNSIGNED", "integer"),
    "i": ("INT", "integer"),
    "i_u": ("INT UNSIGNED", "long"),
    "bi": ("BIGINT", "long"),
    "bi_u": ("BIGINT UNSIGNED", "decimal(20,0)"),
    "flag": ("TINYINT(1)", "byte"),
    "dec65": ("DECIMAL(65,30)", "string"),
    "dec38": ("DECIMAL(38,10)", "decimal(38,10)"),
    "dec30": ("DECIMAL(30,10)", "decimal(30,10)"),
    "dec10": ("DECIMAL(10,0)", "decimal(10,0)"),
    "dec5": ("DECIMAL(5,2)", "decimal(5,2)"),
    "f": ("FLOAT", "float"),
    "dbl": ("DOUBLE", "double"),
    "d": ("DATE", "date"),
    **{f"dt{p}": (f"DATETIME({p})", "timestamp_ntz") for p in range(7)},
    **{f"ts{p}": (f"TIMESTAMP({p}) NULL DEFAULT NULL", "timestamp") for p in range(7)},
    "tm0": ("TIME", "long"),
    "tm1": ("TIME(1)", "long"),
    "tm3": ("TIME(3)", "long"),
    "tm6": ("TIME(6)", "long"),
    "yr": ("YEAR", "short"),
    "ch": ("CHAR(10)", "string"),
    "vc": ("VARCHAR(255)", "string"),
    "tx": ("TEXT", "string"),
    "bn": ("BINARY(4)", "binary"),
    "vb": ("VARBINARY(16)", "binary"),
    "bl": ("BLOB", "binary"),
    "bit1": ("BIT(1)", "boolean"),
    "bit10": ("BIT(10)", "binary"),
    "bit64": ("BIT(64)", "binary"),
    "en": ("ENUM('small','médium','large 😀')", "string"),
    "st": ("SET('a','b','c','d')", "string"),
    "js": ("JSON", "string"),  # MariaDB: an alias of LONGTEXT with a JSON_VALID check
    # spatial: {wkb, srid}
    "g": ("GEOMETRY", GEOMETRY),
    "pt": ("POINT", GEOMETRY),
    "ls": ("LINESTRING", GEOMETRY),
    "pg": ("POLYGON", GEOMETRY),
    "mpt": ("MULTIPOINT", GEOMETRY),
    "mls": ("MULTILINESTRING", GEOMETRY),
    "mpg": ("MULTIPOLYGON", GEOMETRY),
    "gc": ("GEOMETRYCOLLECTION", GEOMETRY),
    # MariaDB's text-form types
    "i4": ("INET4", "string"),
    "i6": ("INET6", "string"),
    "uu": ("UUID", "string"),
    # ZEROFILL (implies UNSIGNED)
    "zf": ("INT(6) ZEROFILL", "long"),
    "zbig": ("BIGINT ZEROFILL", "decimal(20,0)"),
    "zd": ("DECIMAL(8,2) ZEROFILL", "decimal(8,2)"),
    "zdb": ("DECIMAL(50,2) ZEROFILL", "string"),
    "zfl": ("FLOAT ZEROFILL", "float"),
    # aliases
    "bo": ("BOOLEAN", "byte"),
    "bl2": ("BOOL", "byte"),
    "re": ("REAL", "double"),
    "dp": ("DOUBLE PRECISION", "double"),
    "f4": ("FLOAT4", "float"),
    "f8": ("FLOAT8", "double"),
    "i1": ("INT1", "byte"),
    "int2": ("INT2", "short"),
    "int3": ("INT3", "integer"),
    "int4": ("INT4", "integer"),
    "i8": ("INT8", "long"),
    "mid": ("MIDDLEINT", "integer"),
    "intg": ("INTEGER UNSIGNED", "long"),
    "nm": ("NUMERIC(7,3)", "decimal(7,3)"),
    "dc": ("DEC(5,1)", "decimal(5,1)"),
    "fx": ("FIXED(6,2)", "decimal(6,2)"),
    "nch": ("NATIONAL CHAR(5)", "string"),
    "nvc": ("NVARCHAR(10)", "string"),
    "lvc": ("LONG VARCHAR", "string"),
    "lvb": ("LONG VARBINARY", "binary"),
    "chb": ("CHAR(4) BYTE", "binary"),
    "ser": ("SERIAL", "decimal(20,0)"),  # BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE
    # lengths, attributes, generated and invisible columns
    "v0": ("VARCHAR(0)", "string"),
    "c0": ("CHAR(0)", "string"),
    "yr2": ("YEAR(2)", "short"),
    "inv": ("INT INVISIBLE", "integer"),
    "gv": ("INT AS (id * 2) VIRTUAL", "integer"),
    "gs": ("VARCHAR(300) AS (CONCAT('<', vc, '>')) PERSISTENT", "string"),
    "l1": ("VARCHAR(20) CHARACTER SET latin1", "string"),
    "enl1": ("ENUM('é','ü','x') CHARACTER SET latin1", "string"),
    "stl1": ("SET('é','ü','x') CHARACTER SET latin1", "string"),
    "ste": ("SET('a😀','b')", "string"),
    "ct": ("TEXT COMPRESSED", "string"),
    "cvc": ("VARCHAR(100) CHARACTER SET latin1 COMPRESSED", "string"),
    "cb": ("BLOB COMPRESSED", "binary"),
}
NOT_NULL = {"ser", "gv"}  # have a value in the all-NULL row (SERIAL counts, gv is computed)

LONG_TEXT = "Ünïcødé ✓ 😀 " * 2000
ALL_BYTES = bytes(range(256)) * 4
JSON_DOC = '{"a": [1, 2.5, null, true], "b": "é😀", "c": {"d": -1e-7}}'
DEC65_MAX = "9" * 35 + "." + "9" * 30


def _dts(value: str) -> dict:
    return {f"dt{p}": value for p in range(7)}


def _tss(value: str) -> dict:
    return {f"ts{p}": value for p in range(7)}


# Inserted in this order, each row in its own transaction, by a session with time_zone '+05:30'.
ROWS = [
    {  # maxima
        "id": 1, "ti": 127, "ti_u": 255, "si": 32767, "si_u": 65535, "mi": 8388607, "mi_u": 16777215,
        "i": 2147483647, "i_u": 4294967295, "bi": 9223372036854775807, "bi_u": 18446744073709551615, "flag": 1,
        "dec65": DEC65_MAX, "dec38": "9" * 28 + "." + "9" * 10, "dec30": "9" * 20 + "." + "9" * 10,
        "dec10": 9999999999, "dec5": "999.99", "f": "3.40282e38", "dbl": 1.7976931348623157e308,
        "d": "9999-12-31", **_dts("9999-12-31 23:59:59.999999"),
        **_tss("2038-01-19 08:44:07.999999"),  # +05:30: the last TIMESTAMP instant, 03:14:07.999999 UTC
        "tm0": "838:59:59", "tm1": "838:59:59.9", "tm3": "838:59:59.999", "tm6": "838:59:59.999999", "yr": 2155,
        "ch": "héllo 😀", "vc": "Ünïcødé — “quotes” ' \\ 😀🎉", "tx": LONG_TEXT,
        "bn": b"ab", "vb": b"\x00\xff\x00a", "bl": ALL_BYTES,
        "bit1": Sql("b'1'"), "bit10": Sql("b'1010101011'"), "bit64": Sql("b'" + "1" * 64 + "'"),
        "en": "large 😀", "st": "d,a,c", "js": JSON_DOC,
        "g": Sql("ST_GeomFromText('POINT(1 2)', 4326)"), "pt": Sql("ST_PointFromText('POINT(-1.5 2.25)')"),
        "ls": Sql("ST_GeomFromText('LINESTRING(0 0,1 1,2 2)', 3857)"),
        "pg": Sql("ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0),(5 5,7 5,7 7,5 7,5 5))')"),
        "mpt": Sql("ST_GeomFromText('MULTIPOINT(0 0,20 20,60 60)', 4294967295)"),
        "mls": Sql("ST_GeomFromText('MULTILINESTRING((10 10,20 20),(15 15,30 15))')"),
        "mpg": Sql("ST_GeomFromText('MULTIPOLYGON(((0 0,10 0,10 10,0 10,0 0)),((5 5,7 5,7 7,5 7,5 5)))')"),
        "gc": Sql("ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))')"),
        "i4": "255.255.255.255", "i6": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "uu": "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "zf": 999999, "zbig": 18446744073709551615, "zd": "999999.99", "zdb": "9" * 48 + ".99", "zfl": 1.5,
        "bo": True, "bl2": False, "re": 1.5, "dp": -2.5, "f4": 0.5, "f8": 1e300, "i1": 127,
        "int2": -32768, "int3": -8388608, "int4": -2147483648,
        "i8": 9223372036854775807, "mid": 8388607, "intg": 4294967295, "nm": "9999.999", "dc": "-9999.9",
        "fx": "9999.99", "nch": "ñandú", "nvc": "Привет мир", "lvc": LONG_TEXT, "lvb": ALL_BYTES, "chb": b"ab",
        "v0": "", "c0": "", "yr2": 2069, "inv": 7,
        "l1": Sql("CONVERT(X'636166e92080819d' USING latin1)"),  # café € and two bytes Python's cp1252 lacks
        "enl1": "ü", "stl1": "x,é", "ste": "b,a😀",
        "ct": LONG_TEXT, "cvc": "crème brûlée " * 7, "cb": ALL_BYTES,
    },
    {  # minima, empty strings and bytes
        "id": 2, "ti": -128, "ti_u": 0, "si": -32768, "si_u": 0, "mi": -8388608, "mi_u": 0,
        "i": -2147483648, "i_u": 0, "bi": -9223372036854775808, "bi_u": 0, "flag": 0,
        "dec65": "-" + DEC65_MAX, "dec38": "-" + "9" * 28 + "." + "9" * 10,
        "dec30": "-12345678901234567890.0123456789", "dec10": -9999999999, "dec5": "-999.99",
        "f": "-1.5e-38", "dbl": -2.2250738585072014e-308,
        "d": "1000-01-01", **_dts("1000-01-01 00:00:00"),
        **_tss("1970-01-01 05:30:01"),  # +05:30: the first TIMESTAMP instant, epoch second 1
        "tm0": "-838:59:59", "tm1": "-00:00:01.3", "tm3": "-00:00:01.25", "tm6": "-12:34:56.789012", "yr": 1901,
        "ch": "", "vc": "", "tx": "", "bn": b"", "vb": b"a\x00\x00", "bl": b"",
        "bit1": Sql("b'0'"), "bit10": Sql("b'0'"), "bit64": Sql("b'0'"),
        "en": "small", "st": "a", "js": "[]",
        "g": Sql("ST_GeomFromText('POINT(0 0)')"), "gc": Sql("ST_GeomFromText('GEOMETRYCOLLECTION EMPTY')"),
        "i4": "0.0.0.0", "i6": "::", "uu": "00000000-0000-0000-0000-000000000000",
        "zf": 0, "zbig": 0, "zd": 0, "zdb": 0, "zfl": 0, "nch": "", "nvc": "", "lvc": "", "lvb": b"", "chb": b"",
        "v0": "", "c0": "", "yr2": 1969, "inv": -1, "l1": "", "enl1": "é", "stl1": "", "ste": "",
        "ct": "", "cvc": "", "cb": b"",
    },
    {  # ordinary values
        "id": 3, "ti": -1, "ti_u": 1, "si": -2, "si_u": 2, "mi": -3, "mi_u": 3, "i": 0, "i_u": 4,
        "bi": -5, "bi_u": 9223372036854775808, "flag": 2,
        "dec65": "-0." + "0" * 29 + "1", "dec38": "0", "dec30": "0.5", "dec10": 0, "dec5": "0.01",
        "f": "3.14159", "dbl": 0.1,
        "d": "2024-02-29", **_dts("2024-02-29 13:45:30.123456"),
        **_tss("2024-03-10 12:00:00.123456"),  # +05:30 → 06:30:00.123456 UTC
        "tm0": "-00:00:01", "tm1": "-00:00:00.5", "tm3": "25:00:00.001", "tm6": "100:00:00.5", "yr": 2024,
        "ch": "ab  ", "vc": "tab\there\nnewline", "tx": "naïve façade", "bn": b"\xff", "vb": b"\x00", "bl": b"\x00",
        "bit1": Sql("b'1'"), "bit10": Sql("b'1000000000'"), "bit64": Sql("b'1'"),
        "en": "médium", "st": "b,c,a,d", "js": '"just a string"',
        "g": Sql("ST_GeomFromText('LINESTRING(1 1,2 2)', 27700)"),
        "i4": "10.0.0.1", "i6": "::ffff:192.168.0.1", "uu": "123e4567-e89b-12d3-a456-426655440000",
        "zf": 42, "zbig": 7, "zd": "1.5", "zdb": "123.45", "zfl": 2.25, "yr2": 70,
        "l1": "naïve façade", "cvc": "x", "ct": "tiny",
    },
    {  # zero temporal values, empty SET
        "id": 4, "d": "0000-00-00", **_dts("0000-00-00 00:00:00"), **_tss("0000-00-00 00:00:00"),
        "yr": 0, "st": "",
    },
    {  # dates with a zero part
        "id": 5, "d": "2020-00-15", "dt0": "2020-05-00 10:00:00", "dt6": "0000-01-01 00:00:00.5",
    },
    {"id": 6},  # NULL in every column
]
# Inserted last, by a session on the server's default time zone, set to '-08:00' for the test.
SERVER_ZONE_ROW = {"id": 7, **_tss("2024-03-10 12:00:00.654321")}  # → 20:00:00.654321 UTC


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _wkb_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


def _us(h: int, m: int, s: int, us: int = 0, sign: int = 1) -> int:
    return sign * ((h * 3600 + m * 60 + s) * 1_000_000 + us)


# The documented Delta value of selected cells: (id, column) → value as read back with deltalake.
EXPECTED = {
    (1, "bi"): 9223372036854775807,
    (1, "bi_u"): Decimal("18446744073709551615"),
    (1, "i_u"): 4294967295,
    (1, "mi_u"): 16777215,
    (1, "flag"): 1,
    (1, "dec65"): DEC65_MAX,
    (1, "dec38"): Decimal("9" * 28 + "." + "9" * 10),
    (1, "f"): _f32(3.40282e38),
    (1, "dbl"): 1.7976931348623157e308,
    (1, "d"): dt.date(9999, 12, 31),
    (1, "dt0"): dt.datetime(9999, 12, 31, 23, 59, 59),
    (1, "dt3"): dt.datetime(9999, 12, 31, 23, 59, 59, 999000),
    (1, "dt6"): dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    (1, "ts0"): dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC),
    (1, "ts6"): dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
    (1, "tm0"): _us(838, 59, 59),
    (1, "tm3"): _us(838, 59, 59, 999000),
    (1, "tm6"): _us(838, 59, 59, 999999),
    (1, "yr"): 2155,
    (1, "ch"): "héllo 😀",
    (1, "tx"): LONG_TEXT,
    (1, "bn"): b"ab\x00\x00",
    (1, "vb"): b"\x00\xff\x00a",
    (1, "bl"): ALL_BYTES,
    (1, "bit1"): True,
    (1, "bit10"): b"\x02\xab",
    (1, "bit64"): b"\xff" * 8,
    (1, "en"): "large 😀",
    (1, "st"): "a,c,d",
    (1, "js"): JSON_DOC,
    (2, "bi"): -9223372036854775808,
    (2, "bi_u"): Decimal(0),
    (2, "dec65"): "-" + DEC65_MAX,
    (2, "dec30"): Decimal("-12345678901234567890.0123456789"),
    (2, "ts0"): dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
    (2, "tm0"): _us(838, 59, 59, sign=-1),
    (2, "tm1"): _us(0, 0, 1, 300000, sign=-1),
    (2, "tm3"): _us(0, 0, 1, 250000, sign=-1),
    (2, "tm6"): _us(12, 34, 56, 789012, sign=-1),
    (2, "yr"): 1901,
    (2, "ch"): "",
    (2, "vc"): "",
    (2, "bn"): b"\x00" * 4,
    (2, "vb"): b"a\x00\x00",
    (2, "bl"): b"",
    (2, "bit1"): False,
    (2, "bit10"): b"\x00\x00",
    (2, "bit64"): b"\x00" * 8,
    (3, "bi_u"): Decimal("9223372036854775808"),
    (3, "flag"): 2,  # TINYINT(1) is a byte, not a boolean
    (3, "dec65"): "-0." + "0" * 29 + "1",
    (3, "dec30"): Decimal("0.5000000000"),
    (3, "f"): _f32(3.14159),
    (3, "dt0"): dt.datetime(2024, 2, 29, 13, 45, 30),
    (3, "dt1"): dt.datetime(2024, 2, 29, 13, 45, 30, 100000),
    (3, "dt5"): dt.datetime(2024, 2, 29, 13, 45, 30, 123450),
    (3, "ts0"): dt.datetime(2024, 3, 10, 6, 30, tzinfo=UTC),
    (3, "ts3"): dt.datetime(2024, 3, 10, 6, 30, 0, 123000, tzinfo=UTC),
    (3, "ts6"): dt.datetime(2024, 3, 10, 6, 30, 0, 123456, tzinfo=UTC),
    (3, "tm0"): _us(0, 0, 1, sign=-1),
    (3, "tm1"): _us(0, 0, 0, 500000, sign=-1),
    (3, "tm3"): _us(25, 0, 0, 1000),
    (3, "tm6"): _us(100, 0, 0, 500000),
    (3, "ch"): "ab",  # CHAR drops trailing spaces
    (3, "bn"): b"\xff\x00\x00\x00",
    (3, "bit10"): b"\x02\x00",
    (3, "bit64"): b"\x00" * 7 + b"\x01",
    (3, "st"): "a,b,c,d",
    (4, "yr"): 0,  # YEAR 0000 is a value, not a zero date
    (4, "st"): "",  # the empty SET is not NULL
    **{(4, c): None for c in ["d", *_dts(""), *_tss("")]},  # zero dates are NULL
    **{(5, c): None for c in ["d", "dt0", "dt6"]},
    **{(6, c): None for c in COLUMNS if c not in ("id", *NOT_NULL)},
    (6, "ser"): Decimal(6),  # SERIAL counts the rows inserted
    (6, "gv"): 12,  # a virtual column computed from id
    # spatial: WKB (little-endian, as MariaDB stores it) and SRID; every cell is also checked
    # against the server's ST_AsBinary/ST_SRID in _check_spatial
    (1, "g"): {"wkb": _wkb_point(1, 2), "srid": 4326},
    (1, "pt"): {"wkb": _wkb_point(-1.5, 2.25), "srid": 0},
    (1, "ls"): {"wkb": struct.pack("<BII6d", 1, 2, 3, 0, 0, 1, 1, 2, 2), "srid": 3857},
    (1, "mpt"): {"wkb": struct.pack("<BII", 1, 4, 3) + _wkb_point(0, 0) + _wkb_point(20, 20) + _wkb_point(60, 60),
                 "srid": 4294967295},
    (2, "g"): {"wkb": _wkb_point(0, 0), "srid": 0},
    (2, "gc"): {"wkb": struct.pack("<BII", 1, 7, 0), "srid": 0},
    (3, "g"): {"wkb": struct.pack("<BII4d", 1, 2, 2, 1, 1, 2, 2), "srid": 27700},
    # INET4, INET6, UUID: the server's text
    (1, "i4"): "255.255.255.255",
    (1, "i6"): "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    (1, "uu"): "ffffffff-ffff-ffff-ffff-ffffffffffff",
    (2, "i4"): "0.0.0.0",  # all-zero values: the binlog cuts every byte
    (2, "i6"): "::",
    (2, "uu"): "00000000-0000-0000-0000-000000000000",
    (3, "i4"): "10.0.0.1",
    (3, "i6"): "::ffff:192.168.0.1",  # IPv4-mapped
    (3, "uu"): "123e4567-e89b-12d3-a456-426655440000",  # a version-1 UUID: stored byte-swapped by MariaDB
    # ZEROFILL: the number, without the padding
    (1, "zf"): 999999,
    (1, "zbig"): Decimal("18446744073709551615"),
    (1, "zd"): Decimal("999999.99"),
    (1, "zdb"): "9" * 48 + ".99",
    (2, "zd"): Decimal("0.00"),
    (2, "zdb"): "0.00",
    (3, "zf"): 42,
    (3, "zbig"): Decimal(7),
    (3, "zd"): Decimal("1.50"),
    (3, "zdb"): "123.45",
    (3, "zfl"): 2.25,
    # aliases
    (1, "bo"): 1,
    (1, "bl2"): 0,
    (1, "re"): 1.5,
    (1, "dp"): -2.5,
    (1, "f4"): 0.5,
    (1, "f8"): 1e300,
    (1, "i1"): 127,
    (1, "int2"): -32768,
    (1, "int3"): -8388608,
    (1, "int4"): -2147483648,
    (1, "i8"): 9223372036854775807,
    (1, "mid"): 8388607,
    (1, "intg"): 4294967295,
    (1, "nm"): Decimal("9999.999"),
    (1, "dc"): Decimal("-9999.9"),
    (1, "fx"): Decimal("9999.99"),
    (1, "nch"): "ñandú",
    (1, "nvc"): "Привет мир",
    (1, "lvc"): LONG_TEXT,
    (1, "lvb"): ALL_BYTES,
    (1, "chb"): b"ab\x00\x00",
    (1, "ser"): Decimal(1),
    (2, "chb"): b"\x00" * 4,
    # lengths, attributes, generated and invisible columns
    (1, "v0"): "",
    (1, "c0"): "",
    (1, "yr2"): 2069,  # YEAR(2) shows 69 for both 1969 and 2069: the stored year is kept
    (2, "yr2"): 1969,
    (3, "yr2"): 1970,
    (1, "inv"): 7,
    (2, "inv"): -1,
    (1, "gv"): 2,
    (3, "gv"): 6,
    (1, "gs"): "<Ünïcødé — “quotes” ' \\ 😀🎉>",
    (2, "gs"): "<>",
    # character sets, ENUM/SET members, compressed columns
    (1, "l1"): "café €\x81\x9d",  # MariaDB's latin1 is cp1252 with 0x81, 0x8d, 0x8f, 0x90, 0x9d as C1 controls
    (3, "l1"): "naïve façade",
    (1, "enl1"): "ü",
    (2, "enl1"): "é",
    (1, "stl1"): "é,x",
    (2, "stl1"): "",
    (1, "ste"): "a😀,b",  # a member the server's own metadata shows as 'a?'
    (1, "ct"): LONG_TEXT,
    (3, "ct"): "tiny",  # too short to compress: stored with a 0 header
    (1, "cvc"): "crème brûlée " * 7,
    (1, "cb"): ALL_BYTES,
    (2, "ct"): "",
    (2, "cb"): b"",
    (7, "ts0"): dt.datetime(2024, 3, 10, 20, 0, tzinfo=UTC),
    (7, "ts2"): dt.datetime(2024, 3, 10, 20, 0, 0, 650000, tzinfo=UTC),
    (7, "ts6"): dt.datetime(2024, 3, 10, 20, 0, 0, 654321, tzinfo=UTC),
}


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


def test_type_matrix_snapshot_equals_binlog(db, mariadb, spark, make_config):
    name, conn = db
    with type_matrix(mariadb, conn, name) as (start, end):
        _check_both_paths(name, spark, make_config, start, end)  # with the server zone still at -08:00


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


def _unexpected(table: pa.Table, expected: dict) -> list[str]:
    """Cells of ``table`` that differ from ``expected`` ((id, column) → value) in value or Python type."""
    by_id = {r["id"]: r for r in table.to_pylist()}
    return [f"{col} (id={i}): delta={by_id[i][col]!r} expected={want!r}" for (i, col), want in expected.items()
            if by_id[i][col] != want or type(by_id[i][col]) is not type(want)]


def _check_both_paths(name, spark, make_config, start, end):
    all_rows = [*ROWS, SERVER_ZONE_ROW]
    cfg = make_config(name, chunk_size=2)
    summary, snap, binlog = _snapshot_and_binlog(cfg, spark, name, "types", start, end)
    assert summary.tables[0].chunks >= 3 and summary.tables[0].rows_written == len(all_rows)
    assert snap.column("id").to_pylist() == [r["id"] for r in all_rows]
    delta = DeltaTable(table_uri(cfg.sink.path, f"{name}.types"))
    delta_types = {f.name: _delta_type(f.type) for f in delta.schema().fields}
    assert delta_types == {**{c: t for c, (_, t) in COLUMNS.items()}, "_cdc_op": "string", "_cdc_seq": "long"}
    differences = _disagreements(snap, binlog, COLUMNS)
    assert not differences, "snapshot and binlog paths disagree:\n" + "\n".join(differences)

    # The documented values, and the true UTC instants of TIMESTAMPs written at +05:30 and -08:00.
    wrong = _unexpected(snap, EXPECTED)
    assert not wrong, "Delta values differ from the documented mapping:\n" + "\n".join(wrong)
    by_id = {r["id"]: r for r in snap.to_pylist()}
    for row_id, instant in ((3, 1710052200), (7, 1710100800)):  # 2024-03-10T06:30:00Z, 2024-03-10T20:00:00Z
        ts = by_id[row_id]["ts0"]
        assert ts.utcoffset() == dt.timedelta(0) and ts.timestamp() == instant, (row_id, ts)
    _check_spatial(cfg, name, by_id)

    # And Delta equals MySQL, read by a third client (pymysql, UTC session).
    assert_equal(cfg, [f"{name}.types"])


def test_type_matrix_through_the_stream(db, mariadb, spark, make_config):
    """The stream (reader process → MERGE) writes every type exactly as the snapshot does."""
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
    via_stream = DeltaTable(table_uri(streamed.sink.path, f"{name}.types")).to_pyarrow_table().sort_by("id")
    wrong = _unexpected(via_stream, EXPECTED)
    assert not wrong, "streamed values differ from the documented mapping:\n" + "\n".join(wrong)

    # The snapshot path, into another lake, gives the same cells.
    snapped = make_config(name, chunk_size=2, sink={"path": streamed.sink.path + "-snapshot"})
    snapshot(snapped, spark)
    via_snapshot = DeltaTable(table_uri(snapped.sink.path, f"{name}.types")).to_pyarrow_table().sort_by("id")
    differences = _disagreements(via_stream, via_snapshot, COLUMNS, ("stream", "snapshot"))
    assert not differences, "\n".join(differences)

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
