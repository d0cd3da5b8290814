"""MySQL's partial JSON updates (PARTIAL_UPDATE_ROWS_EVENT, type 39, written while
``binlog_row_value_options=PARTIAL_JSON``): the after image of a JSON column an update changed
with JSON_SET / JSON_REPLACE / JSON_REMOVE may hold only the changes, a list of diffs applied in
order to the before image. binlake applies them itself: python-mysql-replication reads only the
first diff of a column and drops the others (tests/test_mysql_corpus.py shows it).

Row format (MySQL's sql/log_event.cc, sql/json_diff.cc): as UPDATE_ROWS_EVENT v2, except that
each after image starts with its value options (a length-encoded integer; bit 0:
PARTIAL_JSON_UPDATES) and, when that bit is set, a bitmap with one bit per JSON column of the
table; a JSON column whose bit is set holds, after its 4-byte length, diffs ``<operation: 1 byte>
<path: length-encoded size, text> [<value: length-encoded size, binary JSON>]`` (0 REPLACE,
1 INSERT, 2 REMOVE; REMOVE has no value).

How a diff applies (MySQL's ``apply_json_diffs``, the replica's own code): the path is a concrete
path (``$``, then ``.member`` / ``."quoted member"`` / ``[n]`` / ``[last]`` / ``[last-n]``, never
wildcards or ranges, never ``$`` alone); REPLACE replaces the value the whole path names (it must
exist); INSERT adds under the value its path without the last leg names: an object member that
must not exist yet, or an array cell at its index (past the end: at the end); REMOVE removes the
object member or the array cell (it must exist). Array indexes count from the start (``[n]``) or
from the end (``[last-n]``).

Invariants (tests/test_mysql_corpus.py: the eight recorded MySQL 8.0.40 events against mysqlbinlog
-vvv and the source's own rendering of each diff; tests/test_json_diff.py):
- The after image of a partially updated column is the before image with every diff applied in
  order, as MySQL text (cdc_core/types/mysql_json.py), equal to what the server stores.
- A diff binlake cannot apply as MySQL would (an unknown operation, a path it cannot read or that
  names nothing the operation may act on, a partial column whose before image is SQL NULL or left
  out) raises ``DiffError``, which the event loop turns into ``PartialJsonUpdate`` naming the
  event: it is never applied half right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.binlog.payload import lenenc
from cdc_core.binlog.undecodable import UndecodableEvent, refusal
from cdc_core.offset.position import BinlogPosition
from cdc_core.types import mysql_json

PARTIAL_UPDATE_ROWS_EVENT = 0x27
REPLACE, INSERT, REMOVE = 0, 1, 2
PARTIAL_JSON_UPDATES = 1  # the value options bit of an after image


class DiffError(ValueError):
    """A diff binlake cannot apply (the caller refuses the event, naming it)."""


@dataclass(frozen=True)
class Cell:
    """An array leg: index ``n`` from the start, or from the end for ``[last-n]``."""

    index: int
    from_end: bool = False

    def position(self, size: int) -> int:
        """Where the leg points in an array of ``size`` (MySQL's Json_array_index: clamped)."""
        if self.from_end:
            return size - self.index - 1 if self.index < size else 0
        return min(self.index, size)

    def within(self, size: int) -> bool:
        return self.index < size


Leg = str | Cell  # a member name or an array cell


@dataclass(frozen=True)
class Diff:
    operation: int
    path: tuple[Leg, ...]
    value: object = None  # the new value (a JSON value of cdc_core/types/mysql_json.py); None for REMOVE


def parse_path(text: str) -> tuple[Leg, ...]:
    """A concrete MySQL JSON path (see the module docstring) as its legs."""
    s, i = text.strip(), 1
    if not s.startswith("$"):
        raise DiffError(f"JSON path {text!r} does not start with $")
    legs: list[Leg] = []
    while i < len(s):
        c = s[i]
        if c.isspace():
            i += 1
        elif c == ".":
            i += 1
            if i < len(s) and s[i] == '"':
                name, i = _quoted(s, i)
            else:
                j = i
                while j < len(s) and s[j] not in '.[ "*':
                    j += 1
                name, i = s[i:j], j
                if not name:
                    raise DiffError(f"JSON path {text!r}: a member leg without a name (or a wildcard)")
            legs.append(name)
        elif c == "[":
            j = s.find("]", i)
            if j < 0:
                raise DiffError(f"JSON path {text!r}: an array leg without ]")
            legs.append(_cell(s[i + 1:j].strip(), text))
            i = j + 1
        else:
            raise DiffError(f"JSON path {text!r}: unexpected {c!r} (wildcards and ranges are not concrete paths)")
    if not legs:
        raise DiffError("JSON path $: a diff never names the whole document")
    return tuple(legs)


def _quoted(s: str, i: int) -> tuple[str, int]:
    """A double-quoted member name at ``s[i]`` (JSON string escapes) and the position after it."""
    j = i + 1
    while j < len(s) and s[j] != '"':
        j += 2 if s[j] == "\\" else 1
    if j >= len(s):
        raise DiffError(f"JSON path {s!r}: an unterminated quoted member")
    return json.loads(s[i:j + 1]), j + 1


def _cell(inner: str, text: str) -> Cell:
    if inner.isdigit():
        return Cell(int(inner))
    if inner.startswith("last"):
        rest = inner[4:].replace(" ", "")
        if not rest:
            return Cell(0, True)
        if rest.startswith("-") and rest[1:].isdigit():
            return Cell(int(rest[1:]), True)
    raise DiffError(f"JSON path {text!r}: array leg [{inner}] is not a concrete index")


def read_diffs(data: bytes) -> list[Diff]:
    """A partial column's diffs (the bytes after its 4-byte length)."""
    diffs, at = [], 0
    while at < len(data):
        op = data[at]
        if op not in (REPLACE, INSERT, REMOVE):
            raise DiffError(f"JSON diff operation {op} is not REPLACE, INSERT or REMOVE")
        size, at = _lenenc(data, at + 1)
        if at + size > len(data):
            raise DiffError("a JSON diff's path runs past its column")
        path = parse_path(data[at:at + size].decode("utf-8"))
        at += size
        value = None
        if op != REMOVE:
            size, at = _lenenc(data, at)
            if at + size > len(data):
                raise DiffError("a JSON diff's value runs past its column")
            value = mysql_json.parse(bytes(data[at:at + size]))
            at += size
        diffs.append(Diff(op, path, value))
    return diffs


def _lenenc(data: bytes, at: int) -> tuple[int, int]:
    try:
        return lenenc(data, at)
    except ValueError as e:
        raise DiffError(f"a JSON diff is cut short or malformed ({e})") from None


def apply(doc: object, diffs: list[Diff]) -> object:
    """``doc`` (a JSON value) with ``diffs`` applied in order, as MySQL applies them; ``doc`` is
    changed in place (and returned)."""
    for d in diffs:
        parent = _seek(doc, d.path[:-1])
        last = d.path[-1]
        if d.operation == REPLACE:
            if isinstance(parent, dict) and isinstance(last, str) and last in parent:
                parent[last] = d.value
            elif isinstance(parent, list) and isinstance(last, Cell) and last.within(len(parent)):
                parent[last.position(len(parent))] = d.value
            else:
                raise DiffError(f"REPLACE {_show(d.path)}: nothing there to replace")
        elif d.operation == INSERT:
            if isinstance(parent, dict) and isinstance(last, str) and last not in parent:
                parent[last] = d.value
            elif isinstance(parent, list) and isinstance(last, Cell):
                parent.insert(last.position(len(parent)), d.value)
            else:
                raise DiffError(f"INSERT {_show(d.path)}: no object or array to insert into, or the member exists")
        elif isinstance(parent, dict) and isinstance(last, str) and last in parent:
            del parent[last]
        elif isinstance(parent, list) and isinstance(last, Cell) and last.within(len(parent)):
            del parent[last.position(len(parent))]
        else:
            raise DiffError(f"REMOVE {_show(d.path)}: nothing there to remove")
    return doc


def _seek(doc: object, legs: tuple[Leg, ...]) -> object:
    """The value ``legs`` name exactly (no auto-wrapping), or a DiffError."""
    for leg in legs:
        if isinstance(doc, dict) and isinstance(leg, str) and leg in doc:
            doc = doc[leg]
        elif isinstance(doc, list) and isinstance(leg, Cell) and leg.within(len(doc)):
            doc = doc[leg.position(len(doc))]
        else:
            raise DiffError(f"no value at {_show(legs)}")
    return doc


def _show(legs: tuple[Leg, ...]) -> str:
    return "$" + "".join(f"[{'last-' if leg.from_end else ''}{leg.index}]" if isinstance(leg, Cell)
                         else f".{json.dumps(leg)}" for leg in legs)


# --- the rows of a PARTIAL_UPDATE_ROWS_EVENT ---------------------------------------------------


def _is_json(col) -> bool:
    return getattr(col, "binlake_type", col.type) == FIELD_TYPE.JSON


@dataclass(frozen=True)
class PartialImage:
    """One row of a PARTIAL_UPDATE_ROWS_EVENT as read: values by column name (a MySQL JSON
    column's as its bytes: binary JSON, or for the ``partial`` columns of the after image their
    diffs) and the library's none sources."""

    before: dict
    before_none: dict
    after: dict
    after_none: dict
    partial: tuple[str, ...]


def partial_images(event) -> list[PartialImage]:
    """The rows of a PARTIAL_UPDATE_ROWS_EVENT whose columns were prepared (cdc_core/binlog/columns.py:
    a MySQL JSON column reads its bytes), as read; raises DiffError when they cannot be."""
    if not event.complete:
        return []
    packet = event.packet
    rows = []
    try:
        while packet.read_bytes < event.event_size:
            before, before_none, _ = _image(event, event.columns_present_bitmap, after=False)
            after, after_none, partial = _image(event, event.columns_present_bitmap2, after=True)
            rows.append(PartialImage(before, before_none, after, after_none, tuple(partial)))
    except (ValueError, IndexError, KeyError) as e:
        raise DiffError(f"its row images cannot be read ({e})") from None
    return rows


def partial_rows(event) -> list[dict]:
    """A PARTIAL_UPDATE_ROWS_EVENT's rows in the library's form (``before_values``,
    ``before_none_sources``, ``after_values``, ``after_none_sources``), a partially updated JSON
    column's after value being the MySQL text of its before value with its diffs applied."""
    rows = []
    for img in partial_images(event):
        after = dict(img.after)
        for name in img.partial:
            old = img.before.get(name)
            if old is None:
                raise DiffError(f"column {name}: its diffs have no before image to apply to")
            try:
                after[name] = mysql_json.text(apply(mysql_json.parse(bytes(old)), read_diffs(after[name])))
            except DiffError:
                raise
            except (ValueError, UnicodeDecodeError) as e:  # a malformed binary JSON value
                raise DiffError(f"column {name}: {e}") from None
        rows.append({"before_values": img.before, "before_none_sources": img.before_none,
                     "after_values": after, "after_none_sources": img.after_none})
    return rows


def refused(error: DiffError, at: BinlogPosition) -> UndecodableEvent:
    """The error that stops reading at the partial JSON update ending at ``at``."""
    return refusal(PARTIAL_UPDATE_ROWS_EVENT, at, str(error))


def _image(event, bitmap: bytes, after: bool) -> tuple[dict, dict, list[str]]:
    """One row image: the values by column name, their none sources, the partially updated JSON
    columns (their values are their diffs' bytes). Each column's value is read by the library's
    own reader of row values, as for an UPDATE_ROWS event."""
    packet = event.packet
    columns = event.columns
    json_bits = None
    if after and packet.read_length_coded_binary() & PARTIAL_JSON_UPDATES:
        json_bits = packet.read((sum(map(_is_json, columns)) + 7) // 8)
    present = bin(int.from_bytes(bitmap, "little")).count("1")
    nulls = packet.read((present + 7) // 8)
    read_value = event._RowsEvent__read_values_name  # noqa: SLF001 - the library's reader of one column value
    none_sources = event._RowsEvent__none_sources  # noqa: SLF001
    none_sources.clear()
    values: dict = {}
    partial: list[str] = []
    null_index = json_index = 0
    for i, col in enumerate(columns):
        name = col.name
        values[name] = read_value(col, nulls, null_index, False, bitmap, col.unsigned, i)
        if _is_json(col):
            if json_bits is not None and json_bits[json_index // 8] & (1 << (json_index % 8)) \
                    and values[name] is not None:
                partial.append(name)
            json_index += 1
        if bitmap[i // 8] & (1 << (i % 8)):
            null_index += 1
    sources = {n: none_sources.get(n, "null") for n, v in values.items() if v is None}
    return values, sources, partial
