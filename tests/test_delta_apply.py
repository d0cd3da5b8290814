"""pipelines/lake/apply.py: apply_changes, tested directly against Delta tables: random
batches folded by cdc_core/batch/table_batch.py and applied one commit each leave Delta equal to
the rows MySQL would hold, with the batch's offset in the same commit; a copy-on-write
batch rewrites only the files holding its keys."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.batch.table_batch import TableBatch
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.schema.table import Column, TableSchema
from pipelines.lake.apply import apply_changes
from pipelines.lake.offsets import applied_position_key, stream_commit_properties

INT_KEY = TableSchema("d", "t", (Column("id", "int", "int(11)"), Column("v", "int", "int(11)")), ("id",))
TWO_KEYS = TableSchema("d", "t", (Column("id", "int", "int(11)"), Column("tag", "varchar", "varchar(8)"),
                                  Column("v", "int", "int(11)")), ("id", "tag"))
STR_KEY = TableSchema("d", "t", (Column("tag", "varchar", "varchar(8)"), Column("v", "int", "int(11)")), ("tag",))


def _arrow(schema: TableSchema) -> pa.Schema:
    types = {"int": pa.int32(), "varchar": pa.string()}
    return pa.schema([pa.field(c.name, types[c.data_type]) for c in schema.columns]
                     + [pa.field("_cdc_op", pa.string()), pa.field("_cdc_seq", pa.int64())])


def _key(schema: TableSchema, rng: random.Random, space: int) -> tuple:
    i = rng.randrange(space)
    if len(schema.row_key) == 2:
        return i, f"t{rng.randrange(3)}"  # the same id under other tags: keys differing in one column only
    return (f"k{i}",) if schema.row_key == ("tag",) else (i,)


def _batch(schema: TableSchema, rng: random.Random, mysql: dict, base: int, n: int) -> TableBatch:
    """Random row events (inserts, updates, key moves, deletes) applied to ``mysql`` and folded."""
    batch = TableBatch(schema)
    for i in range(n):
        pos = BinlogPosition("binlog.000001", base + 10 * i)
        r = rng.random()
        if r < 0.4 or not mysql:
            k = _key(schema, rng, 400)
            if k not in mysql:
                mysql[k] = rng.randrange(1000)
                batch.add_event("c", [(*k, mysql[k])], pos)
        elif r < 0.75:
            k = rng.choice(list(mysql))
            before = (*k, mysql[k])
            mysql[k] = rng.randrange(1000)
            batch.add_event("u", [(before, (*k, mysql[k]))], pos)
        elif r < 0.85:
            k, new = rng.choice(list(mysql)), _key(schema, rng, 400)
            if new not in mysql:
                v = mysql.pop(k)
                mysql[new] = v
                batch.add_event("u", [((*k, v), (*new, v))], pos)
        else:
            k = rng.choice(list(mysql))
            batch.add_event("d", [(*k, mysql.pop(k))], pos)
    return batch


def _delta_rows(dt: DeltaTable, schema: TableSchema) -> dict:
    width = len(schema.row_key)
    rows = dt.to_pyarrow_dataset().to_table(columns=[c.name for c in schema.columns]).to_pylist()
    keys = [tuple(r.values())[:width] for r in rows]
    assert len(keys) == len(set(keys)), "a key Delta holds twice"
    return {tuple(r.values())[:width]: r["v"] for r in rows}


@pytest.mark.parametrize("schema", [INT_KEY, TWO_KEYS, STR_KEY], ids=["int", "two-columns", "string"])
@pytest.mark.parametrize("seed", range(4))
def test_batches_applied_leave_delta_equal_to_mysql(tmp_path, schema, seed):
    rng = random.Random(seed)
    target = _arrow(schema)
    uri = str(tmp_path / "t")
    dt = DeltaTable.create(uri, schema=target)
    mysql: dict = {}
    for b in range(12):
        base = 1000 + 10_000 * b
        plan = _batch(schema, rng, mysql, base, rng.randrange(5, 120)).plan()
        append, upsert, delete = (pa.Table.from_pylist([dict(zip(target.names, r)) for r in rows], schema=target)
                                  for rows in (plan.append, plan.upsert, plan.delete))
        offset = StreamOffset(*[BinlogPosition("binlog.000001", base + 5_000)] * 2)
        apply_changes(dt, schema.row_key, append, upsert, delete, stream_commit_properties("p", offset))
        assert applied_position_key(dt, "p") == offset.applied.key  # the offset is in the data's commit
        assert _delta_rows(DeltaTable(uri), schema) == mysql


def test_only_files_holding_the_keys_are_rewritten(tmp_path):
    target = _arrow(INT_KEY)
    uri = str(tmp_path / "t")
    for lo in range(0, 1000, 100):  # ten files, ids [lo, lo + 100)
        write_deltalake(uri, pa.table({"id": pa.array(range(lo, lo + 100), pa.int32()), "v": pa.array([0] * 100,
                                       pa.int32()), "_cdc_op": ["c"] * 100, "_cdc_seq": pa.array([1] * 100)},
                                      schema=target), mode="append")
    dt = DeltaTable(uri)
    before = set(dt.file_uris())
    upsert = pa.Table.from_pylist([{"id": 150, "v": 7, "_cdc_op": "u", "_cdc_seq": 2},
                                   {"id": 5000, "v": 8, "_cdc_op": "u", "_cdc_seq": 2}], schema=target)
    delete = pa.Table.from_pylist([{"id": 420, "_cdc_op": "d", "_cdc_seq": 2}], schema=target)
    offset = StreamOffset(*[BinlogPosition("binlog.000001", 10)] * 2)
    applied = apply_changes(dt, ("id",), target.empty_table(), upsert, delete, stream_commit_properties("p", offset))
    after = set(DeltaTable(uri).file_uris())
    assert len(before - after) == 2 and len(after - before) == 3  # two files replaced, one new for id 5000
    assert (applied.inserted, applied.updated, applied.deleted) == (1, 1, 1)
    rows = {r["id"]: r["v"] for r in DeltaTable(uri).to_pyarrow_dataset().to_table().to_pylist()}
    assert len(rows) == 1000 and rows[150] == 7 and rows[5000] == 8 and 420 not in rows
