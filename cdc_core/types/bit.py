"""BIT(n).

- Delta: BIT(1) is a boolean; BIT(n > 1) binary, its ⌈n/8⌉ big-endian bytes (``b'1010101011'``
  in BIT(10) → ``02 ab``). The snapshot reads the value as an unsigned integer; the library
  gives it as a string of '0'/'1'.
- Checksum: BIT(1) 0/1; BIT(n) hex of its bytes.
- Row images: the library's (no reader of binlake's own).

Tested by tests/test_types.py (type matrix), tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec, DeclaredType
from cdc_core.types.literals import number

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue


def _size(col: Column) -> int:
    return ((col.precision or 1) + 7) // 8


def _bits(col: Column, v: int) -> bool | bytes:
    """An integer as the column's canonical value."""
    if (col.precision or 1) == 1:
        return bool(v)
    return v.to_bytes(_size(col), "big")


def _value(col: Column, v: int | str | bytes) -> bool | bytes:
    if isinstance(v, str):  # python-mysql-replication gives BIT as a string of '0'/'1'
        v = int(v, 2) if v else 0
    elif isinstance(v, bytes):
        v = int.from_bytes(v, "big")
    return bool(v) if col.precision == 1 else int(v).to_bytes(_size(col), "big")


class Bit(Codec):
    data_types = frozenset({"bit"})
    binlog_types = frozenset({FIELD_TYPE.BIT})

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.bool_() if col.precision == 1 else pa.binary()

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return f"CAST({q} AS UNSIGNED)"

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.uint64()  # selected as UNSIGNED

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        return pa.array([None if v is None else _value(col, v) for v in arr.to_pylist()], type=self.arrow_type(col))

    def binlog_value(self, col: Column, v: object) -> object:
        return _value(col, v)

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "bit", f"bit({col.bits})", precision=col.bits)

    def key_bound_sql(self, col: Column, q: str) -> str:
        return f"{q} + 0"  # the number: a bound the server returns as bytes compares as a string

    def key_sort_key(self, col: Column, v: object) -> object:
        # A bound as the server returns it (big-endian bytes) and a canonical value (bytes, or a
        # bool for BIT(1)) alike: the unsigned number the server compares.
        return int.from_bytes(v, "big") if isinstance(v, bytes) else int(v)

    def key_from_text(self, col: Column, text: str) -> object:
        return _bits(col, int(text, 0))  # 10, 0b1010 or 0xa

    def mysql_value(self, col: Column, q: str) -> str:
        if col.precision == 1:
            return f"CAST({q} AS UNSIGNED)"
        return f"LPAD(LOWER(HEX(CAST({q} AS UNSIGNED))), {2 * _size(col)}, '0')"

    def delta_value(self, col: Column, r: str) -> str:
        return f"CASE WHEN {r} THEN '1' ELSE '0' END" if col.precision == 1 else f"encode({r}, 'hex')"

    def implicit_default(self, col: Column) -> object:
        return _bits(col, 0)

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return _bits(col, int.from_bytes(d.value, "big") if d.kind == "bytes" else int(number(d)))

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        precision = t.args[0] if t.args else 1
        return Column(name, "bit", f"bit({precision})", nullable, precision)


CODECS = (Bit(),)
