"""Integers: TINYINT, SMALLINT, MEDIUMINT, INT, BIGINT, signed and UNSIGNED (ZEROFILL implies
UNSIGNED; its padding is display only).

- Delta: the smallest integer holding every value (TINYINT UNSIGNED → short...); BIGINT
  UNSIGNED → decimal(20,0), which the snapshot reads as text and the binlog path makes a
  ``Decimal``.
- Checksum: the decimal digits (``CAST(c AS SIGNED/UNSIGNED)`` drops ZEROFILL's padding).
- Row images: little-endian, 1, 2, 3, 4 or 8 bytes.
- DDL: COLUMN_TYPE carries the display width (the default one when none is given);
  NUMERIC_PRECISION is the digits of the largest value.

Tested by tests/test_types.py (type matrix), tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec, DeclaredType, Reader, fixed
from cdc_core.types.literals import integral, number

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

_ARROW = {  # data_type: (signed arrow type, unsigned arrow type)
    "tinyint": (pa.int8(), pa.int16()),
    "smallint": (pa.int16(), pa.int32()),
    "mediumint": (pa.int32(), pa.int32()),
    "int": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(), pa.decimal128(20, 0)),
}
_BINLOG = {FIELD_TYPE.TINY: "tinyint", FIELD_TYPE.SHORT: "smallint", FIELD_TYPE.INT24: "mediumint",
           FIELD_TYPE.LONG: "int", FIELD_TYPE.LONGLONG: "bigint"}
_FORMATS = {FIELD_TYPE.TINY: "<b", FIELD_TYPE.SHORT: "<h", FIELD_TYPE.LONG: "<i", FIELD_TYPE.LONGLONG: "<q"}
_WIDTHS = {"tinyint": (4, 3, 3), "smallint": (6, 5, 5), "mediumint": (9, 8, 7), "int": (11, 10, 10),
           "bigint": (20, 20, 19)}  # display width signed/unsigned, NUMERIC_PRECISION


def _int24(signed: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[object, int]:
        return int.from_bytes(buf[pos:pos + 3], "little", signed=signed), pos + 3

    return read


def _wide(col: Column) -> bool:
    """BIGINT UNSIGNED: beyond a long, kept as decimal(20,0)."""
    return col.data_type == "bigint" and col.unsigned


class Integers(Codec):
    data_types = frozenset(_ARROW)
    binlog_types = frozenset(_BINLOG)
    ddl_aliases = {"int1": "tinyint", "int2": "smallint", "int3": "mediumint", "middleint": "mediumint",
                   "int4": "int", "integer": "int", "int8": "bigint"}

    def arrow_type(self, col: Column) -> pa.DataType:
        return _ARROW[col.data_type][col.unsigned]

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return f"CAST({q} AS CHAR)" if _wide(col) else None

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.string() if _wide(col) else pa.int64()  # BIGINT UNSIGNED: selected as CHAR

    def binlog_value(self, col: Column, v: object) -> object:
        return Decimal(v) if _wide(col) else v

    def binlog_value_unchanged(self, col: Column) -> bool:
        return not _wide(col)

    def table_map_column(self, col, collation: str | None) -> Column:
        name = _BINLOG[col.binlake_type]
        return Column(col.name, name, name + (" unsigned" if col.unsigned else ""))

    def row_reader(self, col) -> Reader | None:
        if col.type == FIELD_TYPE.INT24:
            return _int24(not col.unsigned)
        fmt = _FORMATS[col.type]
        return fixed(fmt.upper() if col.unsigned else fmt)

    def mysql_value(self, col: Column, q: str) -> str:
        return f"CAST({q} AS {'UNSIGNED' if col.unsigned else 'SIGNED'})"

    def delta_value(self, col: Column, r: str) -> str:
        return f"CAST({r} AS VARCHAR)"  # BIGINT UNSIGNED's decimal(20,0) too: no point

    def key_from_text(self, col: Column, text: str) -> object:
        return int(text)

    def implicit_default(self, col: Column) -> object:
        return Decimal(0) if _wide(col) else 0

    def default_value(self, col: Column, d: DefaultValue) -> object:
        v = integral(number(d))
        return Decimal(v) if _wide(col) else v

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        base = t.data_type
        width, uwidth, precision = _WIDTHS[base]
        if t.unsigned and base in ("bigint", "mediumint"):
            precision += 1  # 18446744073709551615 and 16777215 have one digit more than their signed maxima
        shown = t.args[0] if t.args else (uwidth if t.unsigned else width)
        return Column(name, base, f"{base}({shown}){t.suffix}", nullable, precision, 0)


CODECS = (Integers(),)
