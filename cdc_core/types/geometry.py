"""Spatial types: GEOMETRY, POINT, LINESTRING, POLYGON, MULTIPOINT, MULTILINESTRING,
MULTIPOLYGON, GEOMETRYCOLLECTION (MySQL 8's data type: GEOMCOLLECTION).

- Delta: struct<wkb: binary, srid: long> (Debezium's io.debezium.data.geometry.Geometry): the
  value's well-known binary and its SRID. The server stores, and the binlog carries, 4 bytes
  of SRID (little-endian) then the WKB; the snapshot reads that with ``CAST(… AS BINARY)``.
  The empty value MariaDB gives a NOT NULL spatial column added to existing rows is
  {wkb: '', srid: 0}.
- Checksum: ``<srid>:<md5 of the WKB>``.
- No DEFAULT value is known (the server has none to give).

Tested by tests/test_types.py (type matrix), tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py.
"""

from __future__ import annotations

import struct

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec

GEOMETRY = pa.struct([pa.field("wkb", pa.binary()), pa.field("srid", pa.int64())])


def _geometry(v: bytes | None) -> dict | None:
    """A stored spatial value (4-byte little-endian SRID, then WKB) as {wkb, srid}."""
    if v is None:
        return None
    if not v:  # the empty value MariaDB gives a NOT NULL spatial column added to existing rows
        return {"wkb": b"", "srid": 0}
    return {"wkb": v[4:], "srid": struct.unpack_from("<I", v)[0]}


class Geometry(Codec):
    data_types = frozenset({"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                            "multipolygon", "geometrycollection", "geomcollection"})
    binlog_types = frozenset({FIELD_TYPE.GEOMETRY})
    ddl_aliases = {"geomcollection": "geometrycollection"}

    def arrow_type(self, col: Column) -> pa.DataType:
        return GEOMETRY

    def storage_class(self, col: Column) -> str:
        return "geometry"

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return f"CAST({q} AS BINARY)"  # the stored SRID and WKB, as the binlog carries them

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.binary()

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        return pa.array([_geometry(v) for v in arr.to_pylist()], type=GEOMETRY)

    def binlog_value(self, col: Column, v: object) -> object:
        return _geometry(v)

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "geometry", "geometry")

    def mysql_value(self, col: Column, q: str) -> str:
        b = f"CAST({q} AS BINARY)"
        # The empty value (a NOT NULL spatial column added to existing rows) is {wkb: '', srid: 0}.
        srid = f"IF(LENGTH({b}) = 0, '0', CONV(HEX(REVERSE(LEFT({b}, 4))), 16, 10))"
        return f"CONCAT({srid}, ':', MD5(SUBSTRING({b}, 5)))"

    def delta_value(self, col: Column, r: str) -> str:
        return f"concat(CAST(get_field({r}, 'srid') AS VARCHAR), ':', md5(get_field({r}, 'wkb')))"


CODECS = (Geometry(),)
