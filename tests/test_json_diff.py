"""How binlake applies a MySQL partial JSON update's diffs (cdc_core/binlog/json_diff.py), beyond the eight
recorded events of tests/test_mysql_corpus.py (object members only): array cells counted from the start and from
the end, quoted members, inserts past an array's end, and the diffs MySQL would reject (which binlake refuses
rather than guess). The rules are MySQL's ``apply_json_diffs`` (sql/json_diff.cc) and ``Json_array_index``: a
REPLACE or REMOVE needs the value to exist; an INSERT adds a member that does not exist yet, or a cell at its
index clamped to the array's end; ``[last-n]`` counts from the last cell."""

from __future__ import annotations

import pytest

from cdc_core.binlog.json_diff import INSERT, REMOVE, REPLACE, Cell, Diff, DiffError, apply, parse_path, read_diffs
from cdc_core.types import mysql_json
from tests.test_mysql_json import binary


def _apply(doc, *diffs):
    return apply(doc, [Diff(op, parse_path(path), value) for op, path, value in diffs])


def test_paths():
    assert parse_path('$.a."b c"[3][last][last-2].d') == ("a", "b c", Cell(3), Cell(0, True), Cell(2, True), "d")
    assert parse_path('$."with \\"quote\\""') == ('with "quote"',)
    for bad in ("$", "a.b", "$.*", "$[*]", "$**.a", "$[1 to 2]", "$.a[x]"):
        with pytest.raises(DiffError):
            parse_path(bad)


def test_array_cells():
    doc = {"a": [1, 2, 3]}
    assert _apply(doc, (REPLACE, "$.a[1]", 20)) == {"a": [1, 20, 3]}
    assert _apply(doc, (REPLACE, "$.a[last]", 30)) == {"a": [1, 20, 30]}
    assert _apply(doc, (INSERT, "$.a[0]", 0)) == {"a": [0, 1, 20, 30]}
    assert _apply(doc, (INSERT, "$.a[9]", 99)) == {"a": [0, 1, 20, 30, 99]}  # past the end: appended
    assert _apply(doc, (INSERT, "$.a[last]", 98)) == {"a": [0, 1, 20, 30, 98, 99]}  # before the last cell
    assert _apply(doc, (REMOVE, "$.a[last-1]", None)) == {"a": [0, 1, 20, 30, 99]}
    assert _apply(doc, (REMOVE, "$.a[0]", None), (REPLACE, "$.a[0]", "one")) == {"a": ["one", 20, 30, 99]}


def test_members_and_order():
    doc = {"a": {"b": 1}}
    assert _apply(doc, (INSERT, '$.a."x y"', None), (REPLACE, "$.a.b", [1]), (REMOVE, "$.a.b", None)) == \
        {"a": {"x y": None}}
    assert mysql_json.text(_apply({"b": 1}, (INSERT, "$.aaa", 1), (INSERT, "$.c", 2))) == '{"b": 1, "c": 2, "aaa": 1}'


@pytest.mark.parametrize("diff", [
    (REPLACE, "$.missing", 1), (REMOVE, "$.missing", None), (INSERT, "$.a", 1),  # a exists: INSERT never replaces
    (REPLACE, "$.a[5]", 1), (REMOVE, "$.a[5]", None), (INSERT, "$.a.x", 1),  # a is an array: no member leg
    (REPLACE, "$.b[0]", 1),  # no auto-wrapping of a scalar into an array
])
def test_what_mysql_rejects_is_refused(diff):
    with pytest.raises(DiffError):
        _apply({"a": [1], "b": 2}, diff)


def test_diffs_from_bytes():
    """The binary form: operation, path (length-encoded), value (length-encoded binary JSON) except for REMOVE."""
    value = binary([True])
    raw = bytes([REPLACE, 3]) + b"$.a" + bytes([len(value)]) + value + bytes([REMOVE, 3]) + b"$.b"
    assert read_diffs(raw) == [Diff(REPLACE, ("a",), [True]), Diff(REMOVE, ("b",))]
    with pytest.raises(DiffError):
        read_diffs(bytes([7, 3]) + b"$.a")  # no such operation
    with pytest.raises(DiffError):
        read_diffs(bytes([REPLACE, 3]) + b"$.a" + bytes([9]) + value)  # a value running past the column
