"""Character strings (CHAR, VARCHAR, TINYTEXT…LONGTEXT) and binary strings (BINARY, VARBINARY,
TINYBLOB…LONGBLOB), which share their binlog format: a length, then the bytes (CHAR and
BINARY, VARCHAR and VARBINARY, TEXT and BLOB are one binlog type each, told apart by the
table map's collation, ``binary`` for the binary strings).

- Delta: string (UTF-8) and binary. CHAR drops trailing spaces, as MySQL does; BINARY(n) is
  padded with 0x00 to n bytes, as MySQL stores it; other binary values are exact.
- The binlog carries text in the column's own character set: the library is made to decode
  it with binlake's codec ``binlake_<charset>`` (cdc_core/binlog/columns.py registers it;
  cdc_core/types/charsets.py decodes as the server converts), ``binlake_z_<charset>`` for a
  MariaDB COMPRESSED column, whose value it inflates first; a compressed binary value passes
  that codec as latin-1 text, turned back into bytes after. The library gives an empty
  binary value as ''.
- Checksum: CHAR, VARCHAR, TINYTEXT ``<utf8 byte length>:<utf8 text>`` (the server converts
  to utf8mb4 and to binary, so columns of different collations can be joined); TEXT,
  MEDIUMTEXT, LONGTEXT MD5 of the utf8 text in hex, which bounds a row's text under
  ``max_allowed_packet``; BINARY, VARBINARY, TINYBLOB hex; BLOB, MEDIUMBLOB, LONGBLOB MD5.
- Row images: binlake's own reader for uncompressed columns (the same codec's text function,
  or the bytes of a binary column).
- DDL: CHAR/BINARY/VARCHAR/VARBINARY(n) give CHARACTER_MAXIMUM_LENGTH n (1 without it); the
  TEXT and BLOB types their size.

Tested by tests/test_types.py (type and charset matrices), tests/test_binlog_decoder.py,
tests/test_reconcile_checksum.py, tests/test_ddl_corpus.py, tests/test_bad_input_limits.py.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from cdc_core.schema.table import Column
from cdc_core.types.charsets import charset_of, decoder
from cdc_core.types.codec import Codec, DeclaredType, Inline, Reader, ValueFix, cast, plain
from cdc_core.types.literals import text

if TYPE_CHECKING:
    from cdc_core.schema.column_def import DefaultValue

CODEC_PREFIX = "binlake_"  # the library's codec of a prepared column: binlake_<charset>, binlake_z_<charset>
_PREPARED = (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
_READ = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB)
_BLOB_SIZES = {1: "tiny", 2: "", 3: "medium", 4: "long"}  # a BLOB's length bytes: its size
_LENGTHS = {"tiny": 255, "": 65535, "medium": 16777215, "long": 4294967295}
_SHORT_TEXT = {"char", "varchar", "tinytext"}
_SHORT_BINARY = {"binary", "varbinary", "tinyblob"}


def utf8(col: Column, q: str) -> str:
    """Server SQL: the column's text in utf8mb4 (converted only when it is in another charset)."""
    return q if (col.collation or "").startswith("utf8mb4_") else f"CONVERT({q} USING utf8mb4)"


def short_text_value(col: Column, q: str) -> str:
    """Server SQL: ``<utf8 byte length>:<utf8 text>`` (utf8mb4 then binary: the bytes Delta's
    UTF-8 holds, and no collation to clash with another column's in CONCAT)."""
    x = f"CAST({utf8(col, q)} AS BINARY)"
    return f"CONCAT(LENGTH({x}), ':', {x})"


def short_text_delta(r: str) -> str:
    """DataFusion SQL of :func:`short_text_value`."""
    return f"concat(CAST(octet_length({r}) AS VARCHAR), ':', {r})"


def _latin1_bytes(v: str) -> bytes:
    return v.encode("latin-1")


def _binary(raw: bytes) -> bytes | str:
    """A binary column's bytes as the library gives them: '' when empty (Python decodes an empty
    buffer without looking its codec up, so the library's decode succeeds there)."""
    return raw or ""


def _length_prefixed(size: int, convert: Callable[[bytes], object]) -> Reader:
    """A string of ``size`` length bytes (little-endian) then the value, through ``convert``."""
    if size == 1:
        def read(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + 1 + buf[pos]
            return convert(buf[pos + 1:end]), end
    else:
        def read(buf: bytes, pos: int) -> tuple[object, int]:
            end = pos + size + int.from_bytes(buf[pos:pos + size], "little")
            return convert(buf[pos + size:end]), end

    read.inline = Inline(length_size=size, convert=convert)  # type: ignore[attr-defined]
    return read


def _convert(col) -> Callable[[bytes], object] | None:
    """How the library (with binlake's codecs) turns a string column's bytes into its value, or None
    when binlake's reader does not decode that column."""
    name = col.character_set_name
    if name is None:
        return None
    if name.startswith(CODEC_PREFIX):
        charset = name[len(CODEC_PREFIX):]
        # cdc_core/binlog/columns.py's codec's own text function; binary values pass binlake's
        # codecs only when compressed
        return None if charset.startswith("z_") or charset == "binary" else decoder(charset)
    try:
        codecs.lookup(RowsEvent.charset_to_encoding(name))
    except LookupError:  # the library keeps the bytes (a binary column)
        return _binary
    return None


class _Strings(Codec):
    """What character and binary strings share: their binlog format."""

    binlog_types = frozenset({FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB,
                              FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB})
    binary: bool

    def claims(self, col) -> bool:
        return (getattr(col, "collation_name", None) == "binary") == self.binary

    def prepare(self, col) -> ValueFix | None:
        if col.type not in _PREPARED:
            return None
        charset = charset_of(col.collation_name)
        if charset != "binary" or col.compressed:
            col.character_set_name = f"{CODEC_PREFIX}{'z_' if col.compressed else ''}{charset}"
        return _latin1_bytes if charset == "binary" and col.compressed else None

    def row_reader(self, col) -> Reader | None:
        t = col.type
        if t not in _READ:
            return None
        convert = _convert(col)
        if convert is None:
            return None
        return _length_prefixed(col.length_size if t == FIELD_TYPE.BLOB else 2 if col.max_length > 255 else 1, convert)

    def table_map_column(self, col, collation: str | None) -> Column:
        t = col.binlake_type
        n = getattr(col, "max_length", 0)
        if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
            return (Column(col.name, "varbinary", f"varbinary({n})", char_length=n) if self.binary
                    else Column(col.name, "varchar", "varchar", collation=collation))
        if t == FIELD_TYPE.STRING:
            return (Column(col.name, "binary", f"binary({n})", char_length=n) if self.binary
                    else Column(col.name, "char", "char", collation=collation))
        size = _BLOB_SIZES.get(getattr(col, "length_size", 2), "")
        name = f"{size}blob" if self.binary else f"{size}text"
        return Column(col.name, name, name, collation=collation)

    def declared_column(self, name: str, t: DeclaredType, nullable: bool) -> Column:
        base = t.data_type
        if base in ("char", "varchar", "binary", "varbinary"):
            char_length = t.args[0] if t.args else 1
            return Column(name, base, f"{base}({char_length})", nullable, char_length=char_length,
                          collation=t.collation)
        size = base[:-4]  # tiny, medium, long, or '' (text, blob)
        return Column(name, base, base, nullable, char_length=_LENGTHS[size], collation=t.collation)


class CharacterStrings(_Strings):
    data_types = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
    ddl_aliases = {"varcharacter": "varchar", "character": "char"}
    binary = False

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.string()

    def storage_class(self, col: Column) -> str:
        return "string"  # CHAR's length is in characters and not in the table map

    def binlog_value(self, col: Column, v: object) -> object:
        return decoder(col.collation)(v) if isinstance(v, bytes) else v  # undecoded text

    def binlog_value_unchanged(self, col: Column) -> bool:
        return col.data_type in ("char", "varchar")

    def mysql_value(self, col: Column, q: str) -> str:
        return short_text_value(col, q) if col.data_type in _SHORT_TEXT else f"MD5({utf8(col, q)})"

    def delta_value(self, col: Column, r: str) -> str:
        return short_text_delta(r) if col.data_type in _SHORT_TEXT else f"md5({r})"

    def implicit_default(self, col: Column) -> object:
        return ""

    def default_value(self, col: Column, d: DefaultValue) -> object:
        s = text(d)
        return s.rstrip(" ") if col.data_type == "char" else s


def _padded(col: Column, v: bytes) -> bytes:
    """BINARY(n)'s value: padded with 0x00 to n bytes, as MySQL stores it."""
    return v.ljust(col.char_length or 0, b"\x00") if col.data_type == "binary" else v


class BinaryStrings(_Strings):
    data_types = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
    binary = True

    def arrow_type(self, col: Column) -> pa.DataType:
        return pa.binary()

    def storage_class(self, col: Column) -> str:
        return f"binary({col.char_length})" if col.data_type == "binary" else super().storage_class(col)

    def raw_type(self, col: Column) -> pa.DataType:
        return pa.binary()

    def snapshot_array(self, col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        if col.data_type == "binary" and col.char_length:
            # Snapshot values already carry the 0x00 padding; pad anyway for safety (idempotent).
            return pa.array([None if v is None else _padded(col, v) for v in plain(arr).to_pylist()], type=pa.binary())
        return cast(arr, pa.binary())

    def binlog_value(self, col: Column, v: object) -> object:
        if isinstance(v, str):  # the decoder gives an empty binary value as ''
            v = v.encode("utf-8", "surrogateescape")
        return _padded(col, v)

    def mysql_value(self, col: Column, q: str) -> str:
        return f"LOWER(HEX({q}))" if col.data_type in _SHORT_BINARY else f"MD5({q})"

    def delta_value(self, col: Column, r: str) -> str:
        return f"encode({r}, 'hex')" if col.data_type in _SHORT_BINARY else f"md5({r})"

    def key_from_text(self, col: Column, text: str) -> object:
        return text.encode() if col.data_type in ("binary", "varbinary") else text

    def implicit_default(self, col: Column) -> object:
        return b"\x00" * (col.char_length or 0) if col.data_type == "binary" else b""

    def default_value(self, col: Column, d: DefaultValue) -> object:
        return _padded(col, d.value if d.kind == "bytes" else text(d).encode("utf-8"))


CODECS = (CharacterStrings(), BinaryStrings())
