"""DECIMAL(p,s) (DEC, NUMERIC, FIXED), signed, UNSIGNED and ZEROFILL.

- Delta: decimal(p,s) up to 38 digits; beyond, Delta has no decimal: the exact plain text
  with ``s`` fraction digits, no exponent, no ZEROFILL zeros. The snapshot reads the value
  as text (the bulk reader's decimals are not exact).
- Checksum: the text with exactly ``s`` fraction digits (``CAST(CAST(c AS DECIMAL(p,s)) AS
  CHAR)``, again without ZEROFILL); text in Delta already when p > 38.
- Key order: a p > 38 key (text) compares as ``Decimal``.
- Row images: MySQL's packed decimal (groups of 9 digits in 4 bytes, the sign in the first
  bit), read into the same Decimal the library builds from its text.
- A DEFAULT rounds half away from zero to ``s`` digits.

Tested by tests/test_types.py (type matrix), tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py, tests/test_handoff.py.
"""

from __future__ import annotations

import decimal
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.schema.table import Column
from cdc_core.types.codec import Codec, DeclaredType, Reader
from cdc_core.types.literals import number

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

MAX_DELTA_DECIMAL_PRECISION = 38
_DECIMAL_DIGITS = 9
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of 0..8 leftover digits


def big(col: Column) -> bool:
    """More digits than a Delta decimal holds: kept as text."""
    return (col.precision or 10) > MAX_DELTA_DECIMAL_PRECISION


def _plain(v) -> str:
    """A decimal as plain text without exponent or ZEROFILL's leading zeros."""
    return format(Decimal(v), "f")


@cache
def packed(precision: int, scale: int) -> Reader:
    """MySQL's packed DECIMAL, read into the same value the library builds from its text (its
    __read_new_decimal: the groups' digits, zero-padded, around a point); also the binary of a
    DECIMAL inside MySQL's binary JSON (cdc_core/types/mysql_json.py).

    The whole value is read as one unsigned integer (sign bit flipped; every bit inverted for a
    negative value, as the library's ``^ mask`` does group by group), its groups taken apart
    by shifts into the digits' integer, and the Decimal built from ``<digits>e-<scale>``: the
    same sign, digits and exponent as the library's text (its leading zeros drop alike). The
    reader is generated once per (precision, scale): the groups' shifts and multipliers are
    constants of one expression (no loop over the groups)."""
    integral = precision - scale
    groups = integral // _DECIMAL_DIGITS + scale // _DECIMAL_DIGITS
    lead, tail_digits = _DECIMAL_BYTES[integral % _DECIMAL_DIGITS], scale % _DECIMAL_DIGITS
    tail = _DECIMAL_BYTES[tail_digits]
    size = lead + 4 * groups + tail
    top, full = 1 << (8 * size - 1), (1 << (8 * size)) - 1
    digits = f"(u >> {8 * (size - lead)})" if lead else "0"
    for g in range(groups):  # each group of 9 digits after the leading one, most significant first
        digits = f"({digits} * {10 ** _DECIMAL_DIGITS} + (u >> {8 * tail + 32 * (groups - 1 - g)} & 0xFFFFFFFF))"
    if tail:
        digits = f"({digits} * {10 ** tail_digits} + (u & {(1 << (8 * tail)) - 1}))"
    source = (f"def read(buf, pos):\n"
              f"    end = pos + {size}\n"
              f"    u = int.from_bytes(buf[pos:end], 'big') ^ {top}\n"
              f"    if u & {top}:  # the sign bit was clear (now set): a negative value, stored inverted\n"
              f"        u ^= {full}\n"
              f"        return Decimal(f'-{{{digits}}}e-{scale}'), end\n"
              f"    return Decimal(f'{{{digits}}}e-{scale}'), end\n")
    scope = {"Decimal": decimal.Decimal}
    exec(source, scope)  # noqa: S102 - generated from the two integers only
    return scope["read"]


class Decimals(Codec):
    data_types = frozenset({"decimal"})
    binlog_types = frozenset({FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL})
    ddl_aliases = {"dec": "decimal", "numeric": "decimal", "fixed": "decimal"}

    def arrow_type(self, col: Column) -> pa.DataType:
        if big(col):
            return pa.string()  # Delta decimals stop at 38 digits: keep the exact text
        return pa.decimal128(col.precision or 10, col.scale or 0)

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        return f"CAST({q} AS CHAR)"

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        if big(col) and "zerofill" in col.column_type:
            return pa.array([None if v is None else _plain(v) for v in arr.to_pylist()], type=self.arrow_type(col))
        return super().snapshot_array(col, arr)

    def binlog_value(self, col: Column, v: object) -> object:
        return _plain(v) if big(col) else Decimal(v)

    def binlog_value_unchanged(self, col: Column) -> bool:
        return not big(col)  # the decoder's Decimal, copied: an equal Decimal

    def table_map_column(self, col, collation: str | None) -> Column:
        p, s = getattr(col, "precision", 10), getattr(col, "decimals", 0)
        return Column(col.name, "decimal", f"decimal({p},{s})" + (" unsigned" if col.unsigned else ""),
                      precision=p, scale=s)

    def row_reader(self, col) -> Reader | None:
        return packed(col.precision, col.decimals) if col.type == FIELD_TYPE.NEWDECIMAL else None

    def mysql_value(self, col: Column, q: str) -> str:
        return f"CAST(CAST({q} AS DECIMAL({col.precision or 10},{col.scale or 0})) AS CHAR)"

    def delta_value(self, col: Column, r: str) -> str:
        return r if big(col) else f"CAST({r} AS VARCHAR)"  # p > 38: exact text already

    def key_sort_key(self, col: Column, v: object) -> object:
        return Decimal(v) if isinstance(v, str) else v  # DECIMAL(p > 38) is kept as text

    def key_from_text(self, col: Column, text: str) -> object:
        return Decimal(text)

    def implicit_default(self, col: Column) -> object:
        return self._rounded(col, Decimal(0))

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return self._rounded(col, Decimal(str(number(d))))

    @staticmethod
    def _rounded(col: Column, v: Decimal) -> object:
        q = v.quantize(Decimal(1).scaleb(-(col.scale or 0)), rounding=ROUND_HALF_UP)
        return format(q, "f") if big(col) else q

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        precision, scale = (t.args[0] if t.args else 10), (t.args[1] if len(t.args) > 1 else 0)
        return Column(name, "decimal", f"decimal({precision},{scale}){t.suffix}", nullable, precision, scale)


CODECS = (Decimals(),)
