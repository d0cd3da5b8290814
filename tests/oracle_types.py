"""Test oracle: the Delta type of a MySQL column, as docs/type-mapping.md states it.

The mapping tables of the document are parsed here, at test time, so that the document and
what the tests check cannot drift apart: a row the parser cannot read fails loudly, and a
column whose type the document does not map is an error, never a silent pass. Nothing of
binlake is imported (tests/test_oracle.py checks it): a mapping bug that binlake's codecs
and its own verification share is invisible to an oracle built from them.

A row of a table gives type names (``TINYINT, INT1``), parenthesised arguments (``BIT(1)``
a literal, ``BIT(n)`` a placeholder, ``DATETIME(0–6)`` a range), words a column's type must
also carry (``BIGINT UNSIGNED``, ``CHAR(n) BYTE``), conditions on the placeholders
(``p ≤ 38``), the Delta type (``decimal(p,s)`` filled from the placeholders) and, in its
notes, the type of the UNSIGNED column (``UNSIGNED → short``). Rows whose Delta cell is not a
type (``as above``, ``—``, ``see each type``) say something else and are skipped.

Also here: the Delta type names as Arrow types (the Delta protocol's primitive types), and
which Delta type holds every value of another (docs/schema-changes.md, docs/routes.md: a
column widened by a type change or by a route's sources).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyarrow as pa

DOC = Path(__file__).resolve().parent.parent / "docs" / "type-mapping.md"

_PRIMITIVES = {
    "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary(), "string": pa.string(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"^decimal\((\w+),\s*(\w+)\)$")
_STRUCT = re.compile(r"^struct<(.+)>$")
# A condition on a placeholder: "p ≤ 38", "n > 1".
_CONDITION = re.compile(r"^([a-z]) ([≤<>≥]) (\d+)$")
# A type name: upper-case words, the first one with optional arguments ("CHAR(n) BYTE").
_NAME = re.compile(r"^([A-Z][A-Z0-9_]*(?:…[A-Z][A-Z0-9_]*)?)(?:\(([^)]*)\))?((?: [A-Z][A-Z0-9_]+)*)(?=$| \()")
_SIZES = ("TINY", "", "MEDIUM", "LONG")  # TINYTEXT…LONGTEXT, TINYBLOB…LONGBLOB
_RESERVED = re.compile(r"`(_cdc_\w+)` \((\w+)")


class UnmappedType(LookupError):
    """The document has no row for a column's type."""


@dataclass(frozen=True)
class DocName:
    """One type name of a row: ``base(args) QUALIFIER…``."""

    base: str
    args: tuple[str, ...]
    qualifiers: tuple[str, ...]


@dataclass(frozen=True)
class DocRow:
    """One row of a mapping table."""

    names: tuple[DocName, ...]
    conditions: tuple[tuple[str, str, int], ...]
    delta: str
    unsigned_delta: str | None
    line: str


@dataclass(frozen=True)
class ServerColumn:
    """A column as information_schema.COLUMNS describes it."""

    name: str
    data_type: str  # DATA_TYPE, lower case: "int", "decimal", "geometrycollection"
    column_type: str  # COLUMN_TYPE: "int(6) unsigned zerofill", "text /*M!100301 COMPRESSED*/"

    @property
    def words(self) -> tuple[str, ...]:
        """COLUMN_TYPE's words without arguments and comments: ("int", "unsigned", "zerofill")."""
        text = re.sub(r"/\*.*?\*/", " ", self.column_type.lower())
        return tuple(re.sub(r"\(.*?\)", "", w) for w in re.sub(r"\([^)]*\)", "", text).split())

    @property
    def args(self) -> tuple[str, ...]:
        """COLUMN_TYPE's arguments: ("6",) for int(6), ("8", "2") for decimal(8,2); () without."""
        m = re.match(r"^\w+\(([^)]*)\)", self.column_type)
        return tuple(a.strip() for a in m[1].split(",")) if m and not m[1].startswith("'") else ()

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.words


def delta_arrow(delta: str) -> pa.DataType:
    """The Arrow type of a Delta type name as the document writes it (``decimal(20,0)``,
    ``struct<wkb: binary, srid: long>``)."""
    if delta in _PRIMITIVES:
        return _PRIMITIVES[delta]
    if m := _DECIMAL.match(delta):
        return pa.decimal128(int(m[1]), int(m[2]))
    if m := _STRUCT.match(delta):
        fields = [f.split(":", 1) for f in _split(m[1], ",")]
        return pa.struct([(n.strip(), delta_arrow(t.strip())) for n, t in fields])
    raise ValueError(f"not a Delta type: {delta!r}")


def _is_type(cell: str) -> bool:
    try:
        delta_arrow(re.sub(r"\(\w+,\s*\w+\)", "(1,0)", cell))  # decimal(p,s) is a type too
    except ValueError:
        return False
    return True


def _split(text: str, seps: str) -> list[str]:
    """``text`` split at ``seps`` outside parentheses and angle brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "(<") - (ch in ")>")
        if ch in seps and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur.strip()] if p]


def _names(item: str) -> list[DocName]:
    m = _NAME.match(item)
    if not m:
        return []
    if alias := re.search(r"\(MySQL \d+: ([A-Z]+)\)", item):  # "GEOMETRYCOLLECTION (MySQL 8: GEOMCOLLECTION)"
        return [*_names(m[0]), DocName(alias[1], (), ())]
    base, args = m[1], tuple(a.strip() for a in m[2].split(",")) if m[2] else ()
    qualifiers = tuple(m[3].split())
    if "…" in base:  # TINYTEXT…LONGTEXT
        first, last = base.split("…")
        suffix = first.removeprefix("TINY")
        if not (first.startswith("TINY") and last == "LONG" + suffix):
            raise ValueError(f"{DOC.name}: a range of types that is not TINY…LONG: {item!r}")
        return [DocName(size + suffix, args, qualifiers) for size in _SIZES]
    return [DocName(base, args, qualifiers)]


def _parse_row(line: str) -> DocRow | None:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 2 or not _is_type(cells[1]):
        return None
    names, conditions = [], []
    for item in _split(cells[0].replace("*", ""), ",;"):
        if m := _CONDITION.match(item):
            conditions.append((m[1], m[2], int(m[3])))
        else:
            names += _names(item)
    if not names:
        raise ValueError(f"{DOC.name}: a row with a Delta type and no type name: {line!r}")
    notes = cells[2] if len(cells) > 2 else ""
    unsigned = re.search(r"UNSIGNED → (\w+(?:\(\d+,\s*\d+\))?)", notes)
    return DocRow(tuple(names), tuple(conditions), cells[1], unsigned[1] if unsigned else None, line.strip())


@cache
def doc_rows(text: str | None = None) -> tuple[DocRow, ...]:
    """The rows of the document's mapping tables (those whose second column is ``Delta type``)."""
    text = DOC.read_text() if text is None else text
    rows, in_table = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 1 and cells[1] == "Delta type":
            in_table = True
        elif in_table and not set(line) <= set("|-: "):
            row = _parse_row(line)
            if row is not None:
                rows.append(row)
    if not rows:
        raise ValueError(f"{DOC}: no mapping table found")
    return tuple(rows)


@cache
def reserved_columns(text: str | None = None) -> dict[str, str]:
    """The reserved columns the document names with their Delta types: {"_cdc_op": "string", …}."""
    found = dict(_RESERVED.findall(DOC.read_text() if text is None else text))
    if not {"_cdc_op", "_cdc_seq"} <= found.keys():
        raise ValueError(f"{DOC}: the reserved columns are not stated")
    return found


def _holds(op: str, value: int, bound: int) -> bool:
    return {"≤": value <= bound, "<": value < bound, ">": value > bound, "≥": value >= bound}[op]


def _match(name: DocName, row: DocRow, col: ServerColumn) -> tuple[int, int, dict[str, int]] | None:
    """How specifically ``name`` of ``row`` matches ``col`` (qualifiers, literal arguments), and
    the placeholders' values; None when it does not match."""
    if name.base.lower() != col.data_type or not set(q.lower() for q in name.qualifiers) <= set(col.words):
        return None
    bound: dict[str, int] = {}
    literal = 0
    if name.args and col.args:
        if len(name.args) != len(col.args):
            return None
        for doc_arg, value in zip(name.args, col.args):
            if re.fullmatch(r"[a-z]", doc_arg):
                bound[doc_arg] = int(value)
            elif m := re.fullmatch(r"(\d+)–(\d+)", doc_arg):
                if not int(m[1]) <= int(value) <= int(m[2]):
                    return None
            elif doc_arg == value:
                literal += 1
            else:
                return None
    for var, op, limit in row.conditions:
        if var not in bound or not _holds(op, bound[var], limit):
            return None
    return len(name.qualifiers), literal, bound


def documented_type(col: ServerColumn, text: str | None = None) -> str:
    """The Delta type the document maps ``col`` to (``decimal(8,2)``, ``timestamp_ntz``…)."""
    found = []
    for row in doc_rows(text):
        for name in row.names:
            m = _match(name, row, col)
            if m is not None:
                qualifiers, literal, bound = m
                delta = row.unsigned_delta if col.unsigned and row.unsigned_delta else row.delta
                for var, value in bound.items():  # decimal(p,s) → decimal(8,2)
                    delta = re.sub(rf"\b{var}\b", str(value), delta)
                found.append(((qualifiers, literal), delta, row.line))
    if not found:
        raise UnmappedType(f"{DOC.name} maps no type {col.column_type!r} (column {col.name})")
    best = max(f[0] for f in found)
    types = {delta for rank, delta, _ in found if rank == best}
    if len(types) > 1:
        raise ValueError(f"{DOC.name} maps {col.column_type!r} to several types: {sorted(types)}")
    return types.pop()


def _family(t: pa.DataType) -> pa.DataType:
    """``t`` with the Arrow encodings of one logical type made one: string, large string and
    string view; binary likewise; a timestamp's UTC zone however it is spelled."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="UTC") if t.tz in ("UTC", "Etc/UTC", "+00:00", "Z") else t
    if pa.types.is_struct(t):
        return pa.struct([(t.field(i).name, _family(t.field(i).type)) for i in range(t.num_fields)])
    return t


def same_type(expected: pa.DataType, actual: pa.DataType) -> bool:
    """Whether ``actual`` (as a reader returned it) is the Arrow type ``expected``."""
    return _family(expected) == _family(actual)


_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # decimal digits of the largest value of each width


def holds(expected: pa.DataType, actual: pa.DataType) -> bool:
    """Whether a Delta column of type ``actual`` holds every value of ``expected``: the same
    type, a wider integer, a decimal with as many integer and fraction digits, double for
    FLOAT and for an integer of up to 32 bits (docs/routes.md, docs/schema-changes.md)."""
    expected, actual = _family(expected), _family(actual)
    if expected == actual:
        return True
    if expected in _INTS and actual in _INTS:
        return _INTS.index(actual) >= _INTS.index(expected)
    if pa.types.is_decimal(actual):
        if pa.types.is_decimal(expected):
            return actual.scale >= expected.scale and actual.precision - actual.scale >= (
                expected.precision - expected.scale)
        if expected in _INTS:
            return actual.precision - actual.scale >= _INT_DIGITS[expected.bit_width]
    if actual == pa.float64():
        return expected == pa.float32() or (expected in _INTS and expected.bit_width <= 32)
    return False
