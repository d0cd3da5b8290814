"""Requests the snapshot path saves on an object store, and that it reads the same as before.

- ``snapshot_commits`` takes the commits ``ensure_table`` and ``commit_files`` made through the
  same handle from memory instead of reading them back; with a commit by anyone else in between it reads the
  log: either way it equals a fresh read of the whole log.
- The first ``commit_files`` to a table not created yet (``NewTable``) creates it with its files,
  its properties and its commit metadata in one commit (version 0), read back from memory; a
  table another writer created first is appended to instead.
- A control table this store only appended to is read back from those appends when they are
  all its commits, else from its files: either way it equals a fresh store's read.
- A commit without data leaves its handle at the version it committed, carrying its offset and
  metadata, without reading the log back; so do a column addition and a rewrite.
- Control-table appends of a store that has not read the table go through one handle from the
  second append on (the first by URI), and read back like a fresh store's read.
- On S3 a data file up to ``WRITE_BUFFER_BYTES`` is one ``PutObject``, under the key delta-rs
  reads it from (odd folder names too); with an option boto3 would not read the same way, it
  goes through delta-rs's store in one part (a create, one part, a completion).
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.record import ChunkRecord
from cdc_core.offset.position import BinlogPosition
from pipelines.lake.control_store import ControlStore
from pipelines.lake.files import (
    SNAPSHOT_CHUNKS_KEY,
    SNAPSHOT_VERIFIED_KEY,
    NewTable,
    SnapshotCommits,
    commit_files,
    snapshot_commits,
    write_parquet,
)
from pipelines.lake.offsets import applied_position_key, last_stream_offset, stream_commit_properties
from pipelines.lake.tables import add_columns, commit_no_data, ensure_table, rewrite

SCHEMA = pa.schema([("id", pa.int64()), ("_cdc_op", pa.string())])


def _record(index: int) -> ChunkRecord:
    return ChunkRecord("d.t", index, 1, BinlogPosition("b.000001", 4 + index), BinlogPosition("b.000001", 9 + index),
                       0, None, dt.datetime(2026, 11, 25, tzinfo=dt.UTC), "p")


def _commit_chunk(table: DeltaTable, index: int) -> int:
    written = write_parquet(table.table_uri, pa.Table.from_pylist([{"id": index, "_cdc_op": "r"}], schema=SCHEMA))
    return commit_files(table, [written], SCHEMA, {SNAPSHOT_CHUNKS_KEY: [_record(index).to_json_row()]}).version


def _no_reads(*_args, **_kwargs):
    raise AssertionError("read the table's commits back")


def test_own_commits_are_not_read_back_and_read_like_the_log(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    table = ensure_table(uri, SCHEMA)
    with monkeypatch.context() as m:
        m.setattr(table, "history", _no_reads)
        known = snapshot_commits(table)  # its creation, made by ensure_table
        versions = [_commit_chunk(table, i) for i in range(3)]
        commit_files(table, [], SCHEMA, {SNAPSHOT_VERIFIED_KEY: ["d.t"]})
        mine = snapshot_commits(table, known)
    assert known == SnapshotCommits([], {}, {}, 0)
    assert mine == snapshot_commits(DeltaTable(uri))
    assert [r.delta_version for r in mine.records] == versions[::-1] and mine.is_verified("d.t")

    # Another handle commits in between: this handle's next commit is not the one after its
    # version, so the commits since are read from the log.
    _commit_chunk(DeltaTable(uri), 10)
    _commit_chunk(table, 11)
    after = snapshot_commits(table, mine)
    assert after == snapshot_commits(DeltaTable(uri))
    assert {r.chunk_index: r.delta_version for r in after.records if r.chunk_index >= 10} == {10: 5, 11: 6}
    assert not after.is_verified("d.t")


def test_first_commit_of_files_creates_the_table_in_one_commit(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    properties = {"delta.logRetentionDuration": "interval 200 hours"}
    written = write_parquet(uri, pa.Table.from_pylist([{"id": 1, "_cdc_op": "r"}], schema=SCHEMA))
    done = commit_files(NewTable(uri, SCHEMA, properties), [written], SCHEMA,
                        {SNAPSHOT_CHUNKS_KEY: [_record(1).to_json_row()]})
    fresh = DeltaTable(uri)
    assert done.version == fresh.version() == 0 and done.table.version() == 0
    assert fresh.metadata().configuration == properties and fresh.schema().to_arrow().names == SCHEMA.names
    assert fresh.to_pyarrow_table().to_pylist() == [{"id": 1, "_cdc_op": "r"}]
    with monkeypatch.context() as m:
        m.setattr(done.table, "history", _no_reads)
        mine = snapshot_commits(done.table)
    assert mine == snapshot_commits(fresh) and [(r.chunk_index, r.delta_version) for r in mine.records] == [(1, 0)]

    # Another writer created the table first: the files are appended to it, once.
    other = str(tmp_path / "o")
    ensure_table(other, SCHEMA)
    written = write_parquet(other, pa.Table.from_pylist([{"id": 2, "_cdc_op": "r"}], schema=SCHEMA))
    late = commit_files(NewTable(other, SCHEMA, properties), [written], SCHEMA, {})
    assert late.version == 1 and DeltaTable(other).to_pyarrow_table().to_pylist() == [{"id": 2, "_cdc_op": "r"}]


def test_commits_that_leave_the_handle_at_their_version_are_not_read_back(tmp_path, monkeypatch):
    from cdc_core.offset.stream_offset import StreamOffset

    uri = str(tmp_path / "t")
    table = ensure_table(uri, SCHEMA)
    _commit_chunk(table, 1)
    offset = StreamOffset(BinlogPosition("b.000001", 4), BinlogPosition("b.000001", 120), None, 7)
    with monkeypatch.context() as m:
        m.setattr(table, "update_incremental", _no_reads)
        commit_no_data(table, stream_commit_properties("p", offset))
        assert table.version() == 2 and applied_position_key(table, "p") == offset.applied.key
        add_columns(table, [pa.field("extra", pa.int32())], None)
        assert table.version() == 3 and "extra" in table.schema().to_arrow().names
        rewrite(table, lambda rows: rows.drop_columns(["extra"]), None)
        assert table.version() == 4 and "extra" not in table.schema().to_arrow().names
    fresh = DeltaTable(uri)
    assert fresh.version() == 4 and last_stream_offset(fresh, "p") == offset
    assert fresh.to_pyarrow_table().to_pylist() == [{"id": 1, "_cdc_op": "r"}]  # no file added by the commit


def test_control_appends_go_through_one_handle_after_the_first(tmp_path, monkeypatch):
    import pipelines.lake.control_store as control_store

    sink = str(tmp_path / "lake")
    opened: list[str] = []
    real_open = control_store.open_table
    monkeypatch.setattr(control_store, "open_table", lambda uri, options=None: opened.append(uri) or real_open(
        uri, options))
    store = ControlStore(sink, "p")
    for table in ("d.a", "d.b", "d.c", "d.d"):
        store.save_plan(_chunks(table, 2))
    assert len(opened) == 1  # the second append opened the handle the later ones go through
    ControlStore(sink, "q").save_plan(_chunks("d.z", 1))  # another pipeline's append comes between
    store.save_plan(_chunks("d.e", 1))
    assert len(opened) == 1
    with monkeypatch.context() as m:
        m.setattr(DeltaTable, "__init__", _no_reads)  # read through the handle kept for appends
        plans = store.load_plans()
    assert plans == ControlStore(sink, "p").load_plans() and sorted(plans) == ["d.a", "d.b", "d.c", "d.d", "d.e"]


def _chunks(table: str, n: int) -> list[Chunk]:
    return [Chunk(table, i, "id", i * 10 or None, (i + 1) * 10 if i + 1 < n else None) for i in range(n)]


def test_control_table_appended_to_reads_like_its_files(tmp_path, monkeypatch):
    sink = str(tmp_path / "lake")
    store = ControlStore(sink, "p")
    store.save_plan(_chunks("d.a", 2))
    store.save_plan(_chunks("d.b", 3))
    with monkeypatch.context() as m:
        m.setattr(DeltaTable, "to_pyarrow_table", _no_reads)
        plans = store.load_plans()
    assert plans == ControlStore(sink, "p").load_plans() and sorted(plans) == ["d.a", "d.b"]

    # Another store's append comes between: this store's appends are not all of the table's
    # commits, so it reads the files (and sees the other one's plan).
    mine = ControlStore(sink, "p")
    mine.save_plan(_chunks("d.c", 1))
    ControlStore(sink, "p").save_plan(_chunks("d.d", 1))
    assert sorted(mine.load_plans()) == ["d.a", "d.b", "d.c", "d.d"]


def _random_rows(rows: int) -> pa.Table:
    values = np.random.default_rng(7).integers(0, 2**62, rows)
    return pa.table({"id": pa.array(values, pa.int64()), "_cdc_op": pa.array(["r"] * rows)})


def test_data_file_is_one_put_and_reads_back_under_odd_names(s3_sink, s3_server):
    table = _random_rows(1_000_000)  # ~8 MB: two 5 MiB parts with delta-rs's default buffer
    for folder in ("d/t", "d b/ü t%41#x", "d/a+b=c"):
        uri = f"{s3_sink['path']}/{folder}"
        dt_ = ensure_table(uri, SCHEMA, s3_sink["storage_options"])
        s3_server.requests(reset=True)
        written = write_parquet(uri, table, s3_sink["storage_options"])
        assert dict(s3_server.requests()) == {"PUT data": 1}
        assert written.size > 5 << 20
        commit_files(dt_, [written], SCHEMA, {})
        back = DeltaTable(uri, storage_options=s3_sink["storage_options"]).to_pyarrow_table()
        assert back.sort_by("id").equals(table.sort_by("id")), folder


def test_data_file_with_an_option_boto3_does_not_read_is_one_part(s3_sink, s3_server):
    uri = f"{s3_sink['path']}/d/t"
    options = {**s3_sink["storage_options"], "AWS_ALLOW_INVALID_CERTIFICATES": "true"}
    s3_server.requests(reset=True)
    written = write_parquet(uri, _random_rows(1_000_000), options)
    assert written.size > 5 << 20
    assert dict(s3_server.requests()) == {"POST data": 2, "PUT data": 1}


def test_maintenance_between_batches_adds_no_request_unless_it_compacts(s3_sink, s3_server):
    """The stream's maintenance looks at its tables from their open handles: between its polls
    for ``binlake maintain`` requests (one listing every ``REQUEST_POLL_SECONDS``), a step on a
    table that needs no compaction makes no request; one that compacts reads, writes and commits."""
    from cdc_core.config import parse_config
    from pipelines.lake.maintenance import maintainer

    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": [r"d\..*"]},
                        "sink": s3_sink})
    uri, options = f"{s3_sink['path']}/d/t", s3_sink["storage_options"]
    table = ensure_table(uri, SCHEMA, options)

    def small_file(i: int) -> None:  # a batch's new rows
        rows = pa.Table.from_pylist([{"id": i, "_cdc_op": "c"}], schema=SCHEMA)
        commit_files(table, [write_parquet(uri, rows, options, kind="stream")], SCHEMA, {})

    for i in range(3):
        small_file(i)
    now = [0.0]
    m = maintainer.Maintainer(cfg, lambda: {"d.t": table}, lambda _sink: ("id",), ControlStore.of(cfg),
                              clock=lambda: now[0])
    try:
        m.step()  # the first poll for requests
        now[0] += maintainer.CHECK_SECONDS
        m.step()  # the first look at the table: its properties set, once per process (one commit)
        s3_server.requests(reset=True)
        for _ in range(30):  # 3 s of batches: the files looked at every second, from the handle
            now[0] += 0.1
            m.step()
        assert dict(s3_server.requests()) == {}
        now[0] += maintainer.REQUEST_POLL_SECONDS
        m.step()
        polled = sum(s3_server.requests(reset=True).values())
        assert 0 < polled <= 2

        for i in range(3, 3 + maintainer.policy.SMALL_FILES_TRIGGER):
            small_file(i)
        s3_server.requests(reset=True)
        now[0] += 1.0
        m.step()  # plans and starts the rewrite
        m._inflight[1].result()  # noqa: SLF001 - wait for the rewrite in the maintenance thread
        m.step()  # commits it
        assert len(table.file_uris()) == 1 and sum(s3_server.requests().values()) > 0
    finally:
        m.close()
