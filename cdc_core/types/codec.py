"""The one interface of a type family's codec: everything binlake does with a column's values
that depends on its type, in one place per family (cdc_core/types/<family>.py), found for a
column by cdc_core/types/registry.py.

The generic machinery asks a codec for the per-type part and keeps the rest:

- the Arrow/Delta type, the storage class: cdc_core/types/mapping.py, cdc_core/schema/history.py;
- the snapshot's SELECT expression, the bulk reader's column → Arrow: cdc_core/types/mapping.py
  (for cdc_core/chunks/reader.py);
- the text protocol's raw Arrow type and outer SELECT: cdc_core/chunks/bulk_read.py;
- a binlog (or text client) value → its canonical value: cdc_core/types/mapping.py;
- a table map's column → :class:`Column`: cdc_core/binlog/decoder.py;
- the library's corrections, before it reads a row and after: cdc_core/binlog/columns.py,
  cdc_core/binlog/decoder.py;
- the fast row-image reader: cdc_core/binlog/row_images.py;
- the checksum rendering on the server and in DataFusion: cdc_core/types/checksum.py;
- the Python order of key values, a key bound typed on the command line:
  cdc_core/types/key_order.py, cdc_core/chunks/incremental.py;
- the value existing rows take in an added column: cdc_core/schema/column_default.py,
  pipelines/schema/applier.py;
- a DDL type → :class:`Column`: cdc_core/schema/column_def.py.

Widening (which Delta type holds another's values) is a relation between Arrow types, not
MySQL families: it is in cdc_core/types/mapping.py (``widest_type``, ``widens``).

A codec is stateless: one instance serves every column of its data types, and every method
takes the column. Binlog-side methods take python-mysql-replication's table-map column
(``col.type`` the binlog type, after cdc_core/binlog/columns.py's ``prepare`` may have re-typed
it; ``col.binlake_type`` the table map's own). Defaults below are what a type without a
special case gets; the invariants each method serves are stated in the modules that ask
(the list above) and checked by their tests (tests/test_types.py, tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py, tests/test_tls.py...); the
registry's own by tests/test_codecs.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.errors import BadInput
from cdc_core.schema.table import Column

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

Reader = Callable[[bytes, int], tuple[object, int]]  # (buffer, offset) -> (value, offset after it)
Fix = Callable[[dict, dict, str], None]  # (values, none_sources, column name): corrects values in place
ValueFix = Callable[[object], object]  # a non-NULL value the library decoded -> the value binlake keeps


class UnsupportedType(BadInput, ValueError):
    """A column type binlake cannot map exactly. ``excludable``: leaving the column out
    (source.exclude_columns) is enough; otherwise its rows cannot even be decoded from the
    binlog and the table has to be left out (or the column converted)."""

    def __init__(self, column: str, message: str, excludable: bool = True):
        super().__init__(f"column {column!r} {message}")
        self.excludable = excludable


class DefaultNotKnown(ValueError):
    """The value existing rows take in an added column cannot be known from the statement."""


@dataclass(frozen=True)
class DeclaredType:
    """A column type as CREATE/ALTER TABLE declares it, once the DDL parser has resolved its
    aliases, character set and size (cdc_core/schema/column_def.py): what a codec needs to
    describe the column as information_schema would."""

    data_type: str
    args: tuple[int, ...] = ()  # the numbers in parentheses: (10,2), (20)
    members: tuple[str, ...] = ()  # ENUM/SET members as written (trailing spaces dropped)
    unsigned: bool = False
    zerofill: bool = False
    collation: str | None = None  # COLLATE, or <charset>_bin for the BINARY attribute

    @property
    def suffix(self) -> str:
        """COLUMN_TYPE's attributes after the type: `` unsigned zerofill``."""
        return (" unsigned" if self.unsigned else "") + (" zerofill" if self.zerofill else "")


@dataclass(frozen=True)
class Inline:
    """How the code cdc_core/binlog/row_images.py generates per table map may read a reader's value
    in place of calling it (the same value): a fixed-size little-endian ``struct`` format ``fmt``
    (unpacked together with its neighbours'), or a string of ``length_size`` length bytes whose
    bytes ``convert`` turns into the value."""

    fmt: str = ""
    length_size: int = 0
    convert: Callable[[bytes], object] | None = None


def inline_of(read: Reader) -> Inline | None:
    """What :class:`Inline` says of ``read``, None when it must be called."""
    return getattr(read, "inline", None)


def fixed(fmt: str) -> Reader:
    """A row-image reader of one fixed-size little-endian value (``struct`` format ``fmt``)."""
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)

    def read(buf: bytes, pos: int) -> tuple[object, int]:
        return unpack(buf, pos)[0], pos + size

    read.inline = Inline(fmt=fmt)  # type: ignore[attr-defined]
    return read


def plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The bulk reader's column with large string/binary made plain string/binary."""
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        return pc.cast(arr, pa.binary() if pa.types.is_large_binary(arr.type) else pa.string())
    return arr


def cast(arr: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """The bulk reader's column as ``target``: large string/binary made plain, then cast."""
    arr = plain(arr)
    return arr if arr.type == target else pc.cast(arr, target)


def unmapped(col: Column) -> UnsupportedType:
    """The error for a column whose type binlake does not map."""
    return UnsupportedType(col.name, f"has type {col.column_type}, which binlake does not map")


class Codec:
    """One type family's answers; subclasses override what differs from these defaults."""

    data_types: frozenset[str] = frozenset()  # information_schema DATA_TYPE names (also their DDL names)
    binlog_types: frozenset[int] = frozenset()  # table-map column types (pymysqlreplication FIELD_TYPE)
    ddl_aliases: Mapping[str, str] = {}  # other DDL names of the data types: {"integer": "int"}
    ddl_members = False  # the DDL type lists members in parentheses (ENUM, SET), not numbers

    # --- Arrow / Delta ---------------------------------------------------------------------

    def arrow_type(self, col: Column) -> pa.DataType:
        """The Arrow type (and so the Delta type) the column is stored as; raises
        :class:`UnsupportedType` when binlake cannot map it."""
        raise unmapped(col)

    def storage_class(self, col: Column) -> str:
        """How the column's values are stored in a row image: equal for a declared column and
        the table map's column of the same column exactly when they decode alike."""
        return str(self.arrow_type(col))

    # --- the snapshot ----------------------------------------------------------------------

    def select_expr(self, col: Column, q: str, raw_dates: bool) -> str | None:
        """The SQL the snapshot SELECTs for the column (quoted as ``q``), or None for the column
        as it is; ``raw_dates``: DATE and DATETIME as stored (see ``mapping.select_expr``)."""
        return None

    def text_select_expr(self, col: Column, q: str) -> str | None:
        """The SQL a text client reads the column with (None: the column as it is)."""
        return None

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """The bulk reader's column for :meth:`select_expr` as the canonical Arrow type."""
        return cast(arr, self.arrow_type(col))

    def raw_type(self, col: Column) -> pa.DataType:
        """The Arrow type of :meth:`select_expr`'s value as the text protocol (pymysql) returns it."""
        return pa.string()

    def text_fetch_expr(self, col: Column, q: str) -> str:
        """The text reader's outer SELECT of the column (``q``: its name in the chunk's SELECT)."""
        return q

    def raw_floor(self, col: Column) -> object | None:
        """For a column :meth:`select_expr` reads as stored under ``raw_dates``: the first valid
        value (an earlier one is a year-0 date the server's check makes NULL); else None."""
        return None

    # --- the binlog ------------------------------------------------------------------------

    def binlog_value(self, col: Column, v: object) -> object:
        """The canonical value of a non-NULL value decoded from a binlog row image (with
        cdc_core/binlog/columns.py's corrections) or read by a text client."""
        return v

    def binlog_value_unchanged(self, col: Column) -> bool:
        """Whether :meth:`binlog_value` gives back every value the binlog decoder gives
        (equal, of the same type)."""
        return False

    def claims(self, col) -> bool:
        """Whether this codec describes a table-map column of one of its ``binlog_types``
        (types several codecs share, told apart by the column's collation)."""
        return True

    def table_map_column(self, col, collation: str | None) -> Column:
        """A table-map column as ``describe_table`` would describe it (nullable: the table map
        does not say); ``collation``: the table map's, None for binary columns."""
        t = getattr(col, "binlake_type", col.type)
        return Column(col.name, f"binlog type {t}", f"binlog type {t}")

    def prepare(self, col) -> ValueFix | None:
        """Set the library's decoding of the column up before it reads a row (it may change
        ``col``); the correction its non-NULL values need after the library, if any."""
        return None

    def library_fix(self, col) -> Fix | None:
        """A correction of the library's row values that needs their none sources, if any."""
        return None

    def row_reader(self, col) -> Reader | None:
        """binlake's own reader of the column's values in a row image, giving exactly what the
        library gives; None when the library must decode it (cdc_core/binlog/row_images.py)."""
        return None

    # --- checksums -------------------------------------------------------------------------

    def mysql_value(self, col: Column, q: str) -> str:
        """Server SQL rendering one value of the column ``q`` (NULL when Delta holds NULL)."""
        raise unmapped(col)

    def delta_value(self, col: Column, r: str) -> str:
        """DataFusion SQL rendering the non-NULL Delta value ``r`` as :meth:`mysql_value` does."""
        raise unmapped(col)

    def checksum_exclusion(self, col: Column, mariadb: bool) -> str | None:
        """Why the column cannot be rendered alike on both sides of this server, or None."""
        return None

    # --- key order -------------------------------------------------------------------------

    # Whether the server orders the column's values by a number of their own (an ENUM's member
    # index, a SET's bits) and compares them with a number as numbers, whatever the column's
    # collation: its chunk bounds are those numbers (``enum_set.Ordinal``).
    ordinal_keys = False

    def key_bound_sql(self, col: Column, q: str) -> str:
        """The SQL the planner reads a chunk bound of the column ``q`` with: a value the server
        compares with the column as its index orders it, when rendered as a literal."""
        return q

    def key_sort_key(self, col: Column, v: object) -> object:
        """A key value of the column without a collation (or with ``ordinal_keys``) as Python
        orders it the way the server's index does; ``v`` is canonical (as Delta holds it) or a
        chunk bound as the server returned it, and both forms of one value give one sort key."""
        return v

    def key_from_text(self, col: Column, text: str) -> object:
        """A key bound typed on the command line as the column's Python value; raises
        ValueError when it is not one."""
        return text

    def chunk_key_problem(self, col: Column) -> str | None:
        """Why the column cannot be a chunk key (binlake cannot order its values as the server
        does), or None."""
        return None

    # --- defaults --------------------------------------------------------------------------

    def implicit_default(self, col: Column) -> object:
        """The canonical value of a NOT NULL column without DEFAULT in existing rows."""
        raise DefaultNotKnown(f"column {col.name}: binlake has no value for a {col.column_type} default")

    def default_value(self, col: Column, d: DefaultValue) -> object:
        """A DEFAULT literal converted to the column's type as the server converts it,
        canonical; raises DefaultNotKnown, ValueError or ArithmeticError when it cannot."""
        raise DefaultNotKnown(f"column {col.name}: binlake has no value for a {col.column_type} default")

    # --- DDL -------------------------------------------------------------------------------

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        """The column a DDL declares, as information_schema describes it afterwards."""
        return Column(name, t.data_type, t.data_type, nullable, collation=t.collation)
