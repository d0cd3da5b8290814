"""Column names are case-insensitive in MySQL, so a schema change or a row may spell a
column differently from its Delta table (``MODIFY DESC3`` on Delta's ``desc3``): every
lookup in pipelines/schema/applier.py and pipelines/lake/conform.py resolves the name to
Delta's spelling (cdc_core/schema/output.py: delta_name), which a column keeps (real Delta
tables)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdc_core.schema.change import SchemaChange, column_from_def, parse_ddl
from cdc_core.schema.output import delta_name, output_schema
from cdc_core.schema.table import TableSchema
from pipelines.lake.conform import conform
from pipelines.lake.tables import delta_schema, ensure_table
from pipelines.schema.applier import apply_schema_change


def _table(tmp_path) -> DeltaTable:
    schema = TableSchema("db", "t", (column_from_def("id", "INT", False), column_from_def("desc3", "VARCHAR(5)"),
                                     column_from_def("n", "INT")), ("id",))
    dt = ensure_table(str(tmp_path / "t"), output_schema(schema))
    rows = pa.table({"id": [1, 2], "desc3": ["a", None], "n": [5, None], "_cdc_op": ["c", "c"], "_cdc_seq": [1, 2]},
                    schema=output_schema(schema))
    write_deltalake(dt, rows, mode="append")
    dt.update_incremental()
    return dt


def _apply(dt: DeltaTable, sql: str, behavior: str = "evolve") -> list[str]:
    return [apply_schema_change(dt, c, behavior, None).action for c in parse_ddl(sql, "db")]


def test_delta_name():
    assert delta_name(["id", "desc3"], "DESC3") == "desc3"
    assert delta_name(["id", "desc3"], "nope") is None


def test_changes_spelled_differently_reach_deltas_column(tmp_path):
    dt = _table(tmp_path)
    assert _apply(dt, "ALTER TABLE t MODIFY COLUMN DESC3 VARCHAR(50)") == ["type of desc3 unchanged in Delta"]
    assert _apply(dt, "ALTER TABLE t MODIFY N BIGINT") == ["rewrote: n int32 → int64"]
    assert _apply(dt, "ALTER TABLE t CHANGE desc3 Desc3 TEXT") == ["type of desc3 unchanged in Delta"]
    assert _apply(dt, "ALTER TABLE t RENAME COLUMN desc3 TO DESC3") == ["rename desc3 → DESC3: nothing to do in Delta"]
    assert _apply(dt, "ALTER TABLE t ADD ID INT") == ["column ID already in Delta"]
    schema = delta_schema(dt)
    assert schema.names[:3] == ["id", "desc3", "n"] and schema.field("n").type == pa.int64()
    assert dt.to_pyarrow_table().sort_by("id").column("n").to_pylist() == [5, None]
    assert _apply(dt, "ALTER TABLE t RENAME COLUMN DESC3 TO d4", "lenient") == [
        "rewrote: added column d4 filled from desc3, kept desc3"]
    assert dt.to_pyarrow_table().sort_by("id").column("d4").to_pylist() == ["a", None]
    assert _apply(dt, "ALTER TABLE t DROP COLUMN DESC3") == ["rewrote: dropped column desc3"]
    assert "desc3" not in delta_schema(dt).names


def test_rows_spelled_differently_fill_deltas_columns(tmp_path):
    dt = _table(tmp_path)
    rows = pa.table({"ID": [3], "DESC3": ["z"], "N": [7], "_cdc_op": ["c"], "_cdc_seq": [3]})
    shaped = conform(rows, delta_schema(dt))
    assert shaped.column_names == delta_schema(dt).names and shaped.to_pylist() == [
        {"id": 3, "desc3": "z", "n": 7, "_cdc_op": "c", "_cdc_seq": 3}]


def test_change_kinds_without_delta_counterpart_are_skipped(tmp_path):
    dt = _table(tmp_path)
    result = apply_schema_change(dt, SchemaChange("alter_primary_key", "db.t", primary_key=("n",)), "evolve", None)
    assert result.skipped
