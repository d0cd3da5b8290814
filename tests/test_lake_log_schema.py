"""pipelines/lake/log_schema.py: a Delta table's schema read from its log equals delta-rs's
own, through creation, appends, added columns, a rewrite and checkpoints."""

import pyarrow as pa
from deltalake import write_deltalake

from pipelines.lake.log_schema import _from_log, table_schema
from pipelines.lake.tables import add_columns, delta_schema, ensure_table, open_table, rewrite


def delta_rs(uri: str) -> pa.Schema:
    """delta-rs's schema, after checking that the log alone gave the same (no fallback to an open)."""
    want = delta_schema(open_table(uri))
    assert pa.schema(_from_log(f"{uri}/_delta_log")) == want
    return want


def test_the_log_gives_delta_rs_schema_through_every_change(tmp_path):
    uri = str(tmp_path / "db" / "t")
    assert table_schema(uri) is None  # no table yet
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.decimal128(12, 2)),
                        pa.field("at", pa.timestamp("us"))])
    dt = ensure_table(uri, schema)
    assert table_schema(uri) == delta_rs(uri)
    rows = pa.table({"id": [1, 2], "amount": pa.array([1, 2], pa.decimal128(12, 2)),
                     "at": pa.array([0, 1], pa.timestamp("us"))}, schema=schema)
    for _ in range(3):
        write_deltalake(dt, rows, mode="append")
    assert table_schema(uri) == delta_rs(uri) == delta_schema(dt)
    add_columns(dt, [pa.field("note", pa.string())], None)
    assert "note" in table_schema(uri).names and table_schema(uri) == delta_rs(uri)
    dt.create_checkpoint()  # the metaData now lives in the checkpoint, no commit after it
    assert table_schema(uri) == delta_rs(uri)
    write_deltalake(dt, rows.append_column("note", pa.array(["a", "b"])), mode="append")  # a commit after it
    assert table_schema(uri) == delta_rs(uri)
    rewrite(dt, lambda t: t.drop_columns(["at"]), None)  # an overwrite with a new schema after the checkpoint
    assert table_schema(uri).names == ["id", "amount", "note"] and table_schema(uri) == delta_rs(uri)
    assert table_schema(f"file://{uri}") == delta_rs(uri)
    spaced = str(tmp_path / "db" / "a b")
    ensure_table(spaced, schema)
    assert table_schema("file://" + spaced.replace(" ", "%20")) == delta_rs(spaced)
