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

The conversion of a literal to a type is that type's codec's (``Codec.implicit_default``,
``Codec.default_value``: cdc_core/types/<family>.py, literals read by cdc_core/types/literals.py);
this module decides whether the statement gives the value at all.
"""

from __future__ import annotations

from cdc_core.schema.column_def import ColumnDef
from cdc_core.schema.table import Column
from cdc_core.types.codec import DefaultNotKnown
from cdc_core.types.registry import codec_for

__all__ = ["DefaultNotKnown", "existing_rows_value", "implicit_default"]


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
        return codec_for(col).default_value(col, d)
    except DefaultNotKnown:
        raise
    except (ValueError, ArithmeticError) as e:
        raise DefaultNotKnown(f"column {col.name}: cannot convert DEFAULT {d.value!r} to {col.column_type} ({e})") \
            from None


def implicit_default(col: Column):
    """The value of a NOT NULL column without DEFAULT in existing rows."""
    return codec_for(col).implicit_default(col)
