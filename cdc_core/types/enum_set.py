"""ENUM and SET.

- Delta: string. ENUM: the member's text (the error value, index 0, is ''); SET: the members
  in definition order, comma-separated (``'d,a,c'`` → ``a,c,d``); the empty SET is '', not
  NULL (the library gives it as None, none source "empty set": fixed after it).
- Member names: the library decodes the table map's as UTF-8 whatever their character set
  ('' when that fails); cdc_core/binlog/columns.py keeps them as bytes and :meth:`prepare`
  decodes them with the column's collation. The table map is the only exact source: the
  server's own metadata (information_schema, SHOW CREATE TABLE) shows a 4-byte character of
  a member as '?', so a column's storage class counts its members rather than naming them.
- Checksum: ``<utf8 byte length>:<utf8 text>``, as the short character strings.
- Row images: an ENUM is its member's index (1 or 2 bytes), read by binlake; a SET, the library's.
- DDL defaults take the members' spelling (matched case-insensitively, trailing spaces
  ignored); SET members their definition order.

Tested by tests/test_types.py (type and charset matrices), tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from cdc_core.schema.table import Column
from cdc_core.types.charsets import decoder
from cdc_core.types.codec import Codec, DeclaredType, Fix, Reader, ValueFix
from cdc_core.types.literals import text
from cdc_core.types.strings import short_text_delta, short_text_value

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue


def _quoted(members) -> str:
    return ",".join("'" + m.replace("'", "''") + "'" for m in members)


def _decoded(col, names: list[bytes]) -> list[str]:
    """Table-map member names decoded with the column's collation."""
    text = decoder(col.collation_name)
    return [m if isinstance(m, str) else _as_text(text(m)) for m in names]


def _as_text(v: str | bytes) -> str:
    return v if isinstance(v, str) else v.decode("utf-8", "replace")  # members of a binary ENUM/SET


def _spelled(col: Column) -> dict[str, str]:
    """The members by how a DEFAULT may write them."""
    return {m.rstrip(" ").lower(): m for m in col.members}


def _enum_reader(size: int, members: list[str] | None) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[object, int]:
        i = int.from_bytes(buf[pos:pos + size], "little")
        return (members[i] if members else None), pos + size

    return read


def _fix_set(values: dict, none_sources: dict, name: str) -> None:
    """The empty SET comes back as None (none source "empty set"): it is ''."""
    if values[name] is None and none_sources.get(name) == NONE_SOURCE.EMPTY_SET:
        values[name] = ""


class _Members(Codec):
    ddl_members = True

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.string()

    def storage_class(self, col: Column) -> str:
        return f"{col.data_type}({len(col.members)})"

    def binlog_value(self, col: Column, v: object) -> object:
        return decoder(col.collation)(v) if isinstance(v, bytes) else v  # undecoded text

    def mysql_value(self, col: Column, q: str) -> str:
        return short_text_value(col, q)

    def delta_value(self, col: Column, r: str) -> str:
        return short_text_delta(r)

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        lengths = [len(m) for m in t.members] or [0]
        char_length = max(lengths) if t.data_type == "enum" else sum(lengths) + len(lengths) - 1
        return Column(name, t.data_type, f"{t.data_type}({_quoted(t.members)})", nullable, char_length=char_length,
                      collation=t.collation)


class Enum(_Members):
    data_types = frozenset({"enum"})
    binlog_types = frozenset({FIELD_TYPE.ENUM})

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "enum", f"enum({_quoted((col.enum_values or [''])[1:])})", collation=collation)

    def prepare(self, col) -> ValueFix | None:
        if col.enum_values:
            col.enum_values = ["", *_decoded(col, col.enum_values[1:])]
        return None

    def row_reader(self, col) -> Reader | None:
        return _enum_reader(col.size, col.enum_values)

    def implicit_default(self, col: Column) -> object:
        return col.members[0] if col.members else ""

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return _spelled(col)[text(d).rstrip(" ").lower()]  # the server refuses a number as an ENUM/SET default


class Set(_Members):
    data_types = frozenset({"set"})
    binlog_types = frozenset({FIELD_TYPE.SET})

    def binlog_value(self, col: Column, v: object) -> object:
        if not isinstance(v, str):  # member names without order: definition order
            return ",".join(m for m in col.members if m in v)
        return v

    def table_map_column(self, col, collation: str | None) -> Column:
        return Column(col.name, "set", f"set({_quoted(col.set_values or [])})", collation=collation)

    def prepare(self, col) -> ValueFix | None:
        if not col.set_values:
            return None
        col.set_values = order = _decoded(col, col.set_values)
        return lambda members: ",".join(m for m in order if m in members)

    def library_fix(self, col) -> Fix | None:
        return _fix_set

    def implicit_default(self, col: Column) -> object:
        return ""

    def default_value(self, col: Column, d: DefaultValue) -> object:
        members = _spelled(col)
        chosen = {members[p.rstrip(" ").lower()] for p in text(d).split(",") if p}
        return ",".join(m for m in col.members if m in chosen)


CODECS = (Enum(), Set())
