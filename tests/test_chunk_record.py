"""A snapshot chunk record and its two stored forms (cdc_core/chunks/record.py): the commit
metadata JSON stays the documented layout, and both forms read back to the same record."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import subprocess
import sys
from dataclasses import replace

import pyarrow as pa

from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.record import ChunkRecord
from cdc_core.offset.position import BinlogPosition
from pipelines.lake.control_store import CHUNKS_SCHEMA

AT = dt.datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=dt.UTC)
RECORD = ChunkRecord("d.t", 3, 5, BinlogPosition("b.000001", 4), BinlogPosition("b.000002", 9), 1, None, AT, "p")
# What binlake has always written into ``binlake.snapshot.chunks`` (docs/contracts.md).
WRITTEN = ('[{"pipeline": "p", "table": "d.t", "chunk_index": 3, "rows": 5, "lw_file": "b.000001", "lw_pos": 4, '
           '"hw_file": "b.000002", "hw_pos": 9, "window_changes": 1, "delta_version": null, '
           '"completed_at": "2026-11-21T10:00:00.123456+00:00"}]')


def test_commit_metadata_layout_is_unchanged_and_reads_back():
    assert json.dumps([RECORD.to_json_row()]) == WRITTEN
    assert [ChunkRecord.from_row(r) for r in json.loads(WRITTEN)] == [RECORD]


def test_mirror_row_reads_back():
    committed = replace(RECORD, delta_version=7)
    (row,) = pa.Table.from_pylist([committed.to_row()], schema=CHUNKS_SCHEMA).to_pylist()
    assert ChunkRecord.from_row(row) == committed
    unknown_rows = replace(committed, rows=None)
    (row,) = pa.Table.from_pylist([unknown_rows.to_row()], schema=CHUNKS_SCHEMA).to_pylist()
    assert ChunkRecord.from_row(row) == unknown_rows


def test_record_of_a_chunk_just_read_pickles():
    r = ChunkRecord.for_chunk("p", Chunk("d.t", 2, "id", 10, 20), None, BinlogPosition("b.000001", 4),
                              BinlogPosition("b.000001", 9), 0)
    assert (r.table, r.chunk_index, r.delta_version, r.pipeline) == ("d.t", 2, None, "p")
    assert r.completed_at.tzinfo is not None
    assert pickle.loads(pickle.dumps(r)) == r


def test_record_without_a_pipeline_is_read():
    (old,) = json.loads(WRITTEN)
    del old["pipeline"]
    assert ChunkRecord.from_row(old) == replace(RECORD, pipeline=None)


def test_importable_without_spark_dagster_or_pipelines():
    code = ("import sys, cdc_core.chunks.record; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'dagster', 'pipelines'}); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
