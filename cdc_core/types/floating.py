"""FLOAT (FLOAT4, FLOAT(p ≤ 24)) and DOUBLE (DOUBLE PRECISION, REAL, FLOAT8, FLOAT(p > 24)).

- Delta: float (32-bit, the stored bits) and double.
- The text protocol prints FLOAT with 6 digits, so the TLS text reader fetches FLOAT as
  ``CAST(… AS DOUBLE)`` (exact) around the chunk's SELECT, as does the row-by-row comparison
  (``text_select_expr``).
- Key order: a chunk bound is the server's printed value (6 digits for FLOAT); the server
  compares the column, widened to DOUBLE, with it as a DOUBLE, as Python compares the float32
  value widened to float with it (tests/test_chunk_key_types.py).
- Checksum: the exact value as ``m p k`` (``a = m·2^k``, ``m`` an integer below 2^53, ``k`` ≥
  -1074), computed with LOG2, POW and division, all exact in IEEE arithmetic once the
  exponent is corrected (the server's LOG2 is ``log(x)/log(2)``, which is off by one near
  powers of two: FLOOR(LOG2(max double)) is 1024 on MariaDB 10.11). Both sides print floats
  differently (``1e15`` / ``1000000000000000.0``), so no float text is compared. FLOAT is
  widened to DOUBLE first (exact) on both sides.
- Row images: little-endian IEEE 754, 4 or 8 bytes.

Tested by tests/test_types.py (type matrix), tests/test_tls.py, tests/test_reconcile_checksum.py,
tests/test_ddl_corpus.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec, DeclaredType, Reader, fixed
from cdc_core.types.literals import number

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

_PRECISION = {"float": 12, "double": 22}  # NUMERIC_PRECISION without (m,d)


def _mysql_float(x: str) -> str:
    """Exact ``[-]m p k`` text of a double (see the module doc), in server SQL."""
    a = f"ABS({x})"
    e0 = f"LEAST(GREATEST(FLOOR(LOG2({a})), -1075), 1023)"
    e = f"({e0} - (POW(2, {e0}) > {a}) + IF({e0} >= 1023, 0, POW(2, {e0} + 1) <= {a}))"
    k = f"GREATEST({e} - 52, -1074)"
    return (f"IF({a} = 0, '0', CONCAT(IF({x} < 0, '-', ''), CAST({a} / POW(2, {k}) AS UNSIGNED), 'p', "
            f"CAST({k} AS SIGNED)))")


def _delta_float(x: str) -> str:
    """The same text in DataFusion SQL."""
    a = f"abs({x})"
    e0 = f"least(greatest(floor(log2({a})), -1075.0), 1023.0)"
    e = (f"({e0} - CASE WHEN power(2.0, {e0}) > {a} THEN 1 ELSE 0 END "
         f"+ CASE WHEN {e0} < 1023 AND power(2.0, {e0} + 1) <= {a} THEN 1 ELSE 0 END)")
    k = f"greatest({e} - 52, -1074.0)"
    return (f"CASE WHEN {a} = 0 THEN '0' ELSE concat(CASE WHEN {x} < 0 THEN '-' ELSE '' END, "
            f"CAST(CAST({a} / power(2.0, {k}) AS BIGINT) AS VARCHAR), 'p', CAST(CAST({k} AS BIGINT) AS VARCHAR)) END")


class Floating(Codec):
    data_types = frozenset({"float", "double"})
    binlog_types = frozenset({FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE})
    ddl_aliases = {"float4": "float", "float8": "double", "real": "double"}

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.float32() if col.data_type == "float" else pa.float64()

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.float64()

    def text_fetch_expr(self, col: Column, q: str) -> str:
        return f"CAST({q} AS DOUBLE) AS {q}" if col.data_type == "float" else q

    def text_select_expr(self, col: Column, q: str) -> str | None:
        return f"CAST({q} AS DOUBLE)" if col.data_type == "float" else None  # the text protocol prints 6 digits

    def binlog_value_unchanged(self, col: Column) -> bool:
        return True

    def table_map_column(self, col, collation: str | None) -> Column:
        name = "float" if col.binlake_type == FIELD_TYPE.FLOAT else "double"
        return Column(col.name, name, name + (" unsigned" if col.unsigned else ""))

    def row_reader(self, col) -> Reader | None:
        return fixed("<f" if col.type == FIELD_TYPE.FLOAT else "<d")

    def mysql_value(self, col: Column, q: str) -> str:
        return _mysql_float(f"CAST({q} AS DOUBLE)")

    def delta_value(self, col: Column, r: str) -> str:
        return _delta_float(f"CAST({r} AS DOUBLE)")

    def implicit_default(self, col: Column) -> object:
        return 0.0

    def default_value(self, col: Column, d: DefaultValue) -> object:
        v = float(number(d))
        return round(v, col.scale) if col.scale is not None else v

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        base, args = t.data_type, t.args
        if base == "float" and len(args) == 1 and args[0] > 24:
            base = "double"
        if len(args) == 2:
            return Column(name, base, f"{base}({args[0]},{args[1]}){t.suffix}", nullable, args[0], args[1])
        return Column(name, base, f"{base}{t.suffix}", nullable, _PRECISION[base])


CODECS = (Floating(),)
