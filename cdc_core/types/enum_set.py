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
- Key order: the server's index orders an ENUM by its member's index and a SET by its bits
  (the number ``col + 0`` gives), not by text, and compares the column with a number as
  numbers; so a chunk bound of such a key is that number (:class:`Ordinal`) and a value's
  sort key is its number, found from its text by the members (cdc_core/chunks/planning.py,
  cdc_core/types/key_order.py). information_schema shows a member's characters outside the
  Basic Multilingual Plane as '?': such a '?' matches any one of them (two members it leaves
  identical cannot be told apart, and the column is refused as a chunk key).

Tested by tests/test_types.py (type and charset matrices), tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py; the key order by
tests/test_chunk_key_types.py against the server's.
"""

from __future__ import annotations

import re
from functools import lru_cache
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


class Ordinal(int):
    """An ENUM member's index or a SET's bits: a chunk bound of an ENUM or SET key, which the
    server compares with the column as a number (see the module docstring)."""

    def __repr__(self) -> str:
        return f"Ordinal({int(self)})"


# A '?' information_schema shows for a member: the '?' itself or a character it cannot show.
_SHOWN_AS_QUESTION_MARK = "(?:\\?|[\U00010000-\U0010FFFF])"


@lru_cache(maxsize=256)
def _member_numbers(col: Column) -> tuple[dict[str, int], tuple[tuple[re.Pattern, int], ...]]:
    """The members' positions (1-based) by text, and by pattern for those shown with a '?'."""
    exact = {m: i for i, m in enumerate(col.members, 1)}
    shown = tuple((re.compile("".join(_SHOWN_AS_QUESTION_MARK if ch == "?" else re.escape(ch) for ch in m)), i)
                  for m, i in exact.items() if "?" in m)
    return exact, shown


def member_number(col: Column, name: str) -> int:
    """The position (1-based) of member ``name`` of ``col``; raises ValueError for a name that
    is not one of its members (or that two of them, as information_schema shows them, match)."""
    exact, shown = _member_numbers(col)
    found = exact.get(name)
    if found is not None:
        return found
    matches = [i for pattern, i in shown if pattern.fullmatch(name)]
    if len(matches) != 1:
        raise ValueError(f"{name!r} is not a member of {col.name}" if not matches else
                         f"{name!r} matches several members of {col.name} as information_schema shows them")
    return matches[0]


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
    ordinal_keys = True

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

    def key_from_text(self, col: Column, text: str) -> object:
        try:
            return Ordinal(self.key_sort_key(col, text))
        except ValueError:
            if text.isdigit():  # the number itself (an ENUM's index, a SET's bits), as the server takes it
                return Ordinal(int(text))
            raise

    def chunk_key_problem(self, col: Column) -> str | None:
        shown = col.members
        if len(set(shown)) < len(shown):
            return (f"information_schema shows members of {col.name} alike ('?' for characters outside the "
                    "Basic Multilingual Plane), so binlake cannot tell their order")
        return None

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

    def key_sort_key(self, col: Column, v: object) -> object:
        if isinstance(v, int):
            return int(v)
        return member_number(col, v) if v or "" in col.members else 0  # '': the error value, index 0

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

    def key_sort_key(self, col: Column, v: object) -> object:
        if isinstance(v, int):
            return int(v)
        return sum(1 << (member_number(col, m) - 1) for m in v.split(",")) if v else 0  # '': the empty set

    def default_value(self, col: Column, d: DefaultValue) -> object:
        members = _spelled(col)
        chosen = {members[p.rstrip(" ").lower()] for p in text(d).split(",") if p}
        return ",".join(m for m in col.members if m in chosen)


CODECS = (Enum(), Set())
