"""The schema at a position (cdc_core/schema/history.py), directly: folding a table's
history, and the columns a row is decoded with given its table map."""

from __future__ import annotations

import datetime as dt

from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.history import HistoryEntry, Status, conversion_schema, fold, storage_class
from cdc_core.schema.table import Column, TableSchema

P = [BinlogPosition("binlog.000001", p) for p in range(0, 1000, 100)]


def _schema(*cols: Column, pk=("id",)) -> TableSchema:
    return TableSchema("d", "t", (Column("id", "int", "int"), *cols), pk)


A = Column("a", "int", "int")
B = Column("b", "varchar", "varchar(10)")
B_LONG = Column("b_long", "varchar", "varchar(200)")


def _entry(pos: int, status: Status, schema: TableSchema | None = None, **kw) -> HistoryEntry:
    return HistoryEntry("d.t", P[pos], 0, kw.pop("kind", "x"), status, schema=schema,
                        recorded_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), **kw)


def test_fold_is_the_schema_at_the_position_not_the_latest():
    before, after = _schema(A, B), _schema(A, B_LONG)
    history = [_entry(1, Status.BASELINE, before), _entry(5, Status.PENDING, after), _entry(5, Status.APPLIED, after)]
    assert fold("d.t", history, P[4]).schema == before  # a restart before the DDL decodes with the old columns
    assert fold("d.t", history, P[6]).schema == after
    assert fold("d.t", history, P[4]).baseline == P[1]


def test_a_later_baseline_supersedes_earlier_changes_and_reflects_them():
    old, resnapped = _schema(A), _schema(A, B)
    history = [_entry(1, Status.BASELINE, old), _entry(3, Status.APPLIED, _schema()), _entry(7, Status.BASELINE,
                                                                                              resnapped)]
    state = fold("d.t", history, P[2])  # the stream resumes before the re-snapshot
    assert state.schema == resnapped and state.baseline == P[7]
    assert state.reflects(P[3]) and state.reflects(P[7]) and not state.reflects(P[8])


def test_recorded_stops_streaming_and_a_create_resumes_it():
    history = [_entry(1, Status.BASELINE, _schema(A)), _entry(2, Status.RECORDED, kind="drop_table"),
               _entry(4, Status.APPLIED, _schema(B), kind="create_table")]
    assert not fold("d.t", history, P[3]).streamed
    state = fold("d.t", history, P[5])
    assert state.streamed and state.schema == _schema(B)


def test_needs_backfill_holds_until_a_later_baseline():
    history = [_entry(1, Status.BASELINE, _schema(A)),
               _entry(3, Status.DIVERGED, _schema(A, B), needs_backfill=True)]
    assert fold("d.t", history, P[4]).needs_backfill
    assert not fold("d.t", [*history, _entry(6, Status.BASELINE, _schema(A, B))], P[7]).needs_backfill


def test_conversion_uses_the_table_maps_columns_refined_by_the_declared_ones():
    declared = _schema(Column("ip", "inet6", "inet6"), Column("Name", "varchar", "varchar(5)"))
    layout = _schema(Column("ip", "binary", "binary(16)", char_length=16), Column("name", "varchar", "varchar"))
    schema, divergence = conversion_schema(declared, layout, P[1])
    assert divergence is None
    assert [c.data_type for c in schema.columns] == ["int", "inet6", "varchar"]  # refined by the history
    assert [c.name for c in schema.columns] == ["id", "ip", "name"]  # the table map's spelling and order


def test_a_table_map_the_history_does_not_explain_is_a_divergence():
    declared = _schema(A, B)
    layout = _schema(Column("a", "bigint", "bigint"), B_LONG, Column("c", "date", "date"))
    schema, d = conversion_schema(declared, layout, P[2])
    assert d is not None and d.added == ("b_long", "c") and d.removed == ("b",) and d.retyped == ("a",)
    assert [c.name for c in schema.columns] == ["id", "a", "b_long", "c"]
    assert "b_long" in d.describe() and str(P[2]) in d.describe()


def test_storage_class_tells_apart_what_decodes_differently():
    assert storage_class(Column("x", "int", "int")) != storage_class(Column("x", "int", "int unsigned"))
    assert storage_class(Column("x", "varchar", "varchar(5)")) == storage_class(Column("x", "text", "text"))
    assert storage_class(Column("x", "json", "json")) == storage_class(Column("x", "longtext", "longtext"))
    assert storage_class(Column("x", "enum", "enum('a','b')")) != storage_class(Column("x", "enum", "enum('a')"))
    # information_schema shows a member's 4-byte characters as '?': the same ENUM
    assert storage_class(Column("x", "set", "set('a ?')")) == storage_class(Column("x", "set", "set('a 😀')"))
    assert storage_class(Column("x", "binary", "binary(4)", char_length=4)) != storage_class(
        Column("x", "binary", "binary(8)", char_length=8))
