"""Kill the snapshot (SIGKILL) mid-way and run it again: only unfinished chunks are
read again, no row is duplicated, and Delta equals MySQL. (The snapshot on a Spark
standalone cluster runs in tests/test_object_store.py, writing to S3.) A table's first
commit creates it; a table read whole in a window without binlog events is verified by
that commit itself, others by a commit after their last chunk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.record import ChunkRecord
from cdc_core.offset.position import BinlogPosition
from pipelines.lake.control_store import ControlStore
from pipelines.lake.files import (
    SNAPSHOT_CHUNKS_KEY,
    SNAPSHOT_RESET_KEY,
    SNAPSHOT_VERIFIED_KEY,
    commit_files,
    snapshot_commits,
)
from pipelines.lake.tables import ensure_table, table_uri
from tests.helpers import assert_equal, snapshot, write_config_file


def _binlake(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", *args]


def test_kill_and_resume(db, spark, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.execute("INSERT INTO big SELECT seq, CONCAT('row ', seq) FROM seq_1_to_60000")
    cfg = make_config(name, chunk_size=250, parallelism=1,
                      source={"snapshot": {"chunk_size": 250, "max_rows_per_task": 2000}})
    path = write_config_file(cfg, tmp_path / "binlake.yaml")
    log_dir = Path(table_uri(cfg.sink.path, f"{name}.big")) / "_delta_log"
    proc = subprocess.Popen(_binlake("snapshot", "-c", str(path)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        # Kill once a few data commits have landed (version 0 creates the table).
        while len(list(log_dir.glob("*.json"))) < 4:
            assert proc.poll() is None, "snapshot finished before it could be killed; make the table bigger"
            assert time.monotonic() < deadline, "fewer than 3 snapshot commits within 120 s"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    plan = ControlStore(cfg.sink.path, cfg.pipeline.name).load_plans()[f"{name}.big"]
    partial = DeltaTable(table_uri(cfg.sink.path, f"{name}.big")).to_pyarrow_table()
    assert 0 < partial.num_rows < 60000
    summary = snapshot(cfg, spark)  # resume
    t = summary.tables[0]
    assert t.chunks == len(plan) and 0 < t.chunks_read < t.chunks  # only unfinished chunks re-read
    assert t.delta_rows == 60000
    assert_equal(cfg, [f"{name}.big"])


def test_control_store_reads_what_another_writer_appended(tmp_path):
    """A control table read once is read again only when it changed: rows another process
    appended are seen, also when this store appended after them without reading."""
    a, b = ControlStore(str(tmp_path), "p"), ControlStore(str(tmp_path), "p")
    record = ChunkRecord.for_chunk("p", Chunk("d.t", 0, "id", None, 5), 5, BinlogPosition("b.000001", 4),
                                   BinlogPosition("b.000001", 9), 0)

    def rec(i: int) -> ChunkRecord:
        return replace(record, chunk_index=i, delta_version=i)

    assert a.chunk_records() == []
    a.record_chunks([rec(0)])
    assert [r.chunk_index for r in a.chunk_records()] == [0]
    b.record_chunks([rec(1)])  # another writer
    assert sorted(r.chunk_index for r in a.chunk_records()) == [0, 1]
    b.record_chunks([rec(2)])
    a.record_chunks([rec(3)])  # appended after b's, unread: a must not take its cache + its own rows as the table
    assert sorted(r.chunk_index for r in a.chunk_records()) == [0, 1, 2, 3]
    assert sorted(r.chunk_index for r in b.chunk_records()) == [0, 1, 2, 3]


def test_snapshot_commits_read_incrementally_equal_a_full_read(tmp_path):
    """Progress read from the commits after an earlier read equals a read of every commit
    (and a read from a newer handle than the table is read whole again)."""
    schema = pa.schema([("id", pa.int64())])
    dt_ = ensure_table(str(tmp_path), schema)
    known = snapshot_commits(dt_)
    for i in range(4):
        meta = {SNAPSHOT_CHUNKS_KEY: [{"table": "d.t", "chunk_index": i}]}
        if i == 2:
            meta[SNAPSHOT_RESET_KEY] = ["d.t"]
        commit_files(dt_, [], schema, meta)
        known = snapshot_commits(dt_, known)
        assert known == snapshot_commits(DeltaTable(str(tmp_path)))
    commit_files(dt_, [], schema, {SNAPSHOT_VERIFIED_KEY: ["d.t"]})
    assert snapshot_commits(dt_, known).is_verified("d.t")
    older = DeltaTable(str(tmp_path), version=1)
    assert snapshot_commits(older, known) == snapshot_commits(older)


def test_groups_finished_together_share_one_commit(db, make_config, monkeypatch):
    """Groups that finish while the driver commits an earlier one go into one Delta commit with
    all their chunk records (fewer commits: on an object store each is about 8 requests). The
    first commit is held back, so the other groups are done by then; every chunk is recorded
    once, at the version of the commit that holds its rows, and a re-run reads nothing."""
    from pipelines.snapshot import driver as snapshot_driver

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_4000")
    cfg = make_config(name, chunk_size=250, parallelism=4,
                      source={"snapshot": {"chunk_size": 250, "max_rows_per_task": 500, "runner": "local"}})
    real, files_per_commit = snapshot_driver.commit_files, []
    read_group, finished = snapshot_driver.SnapshotJob.group_fn, threading.Semaphore(0)

    def counted(task):
        result = read_group(task)
        finished.release()
        return result

    def slow_first(table, files, schema, metadata, retry=None):
        if files and not files_per_commit:
            for _ in range(3):  # the first group and two more have been read: the next commit holds both
                assert finished.acquire(timeout=60), "no other chunk group finished within 60 s"
        files_per_commit.append(len(files))
        return real(table, files, schema, metadata, retry)

    monkeypatch.setattr(snapshot_driver.SnapshotJob, "group_fn", staticmethod(counted))
    monkeypatch.setattr(snapshot_driver, "commit_files", slow_first)
    summary = snapshot(cfg, None)
    assert summary.tables[0].rows_written == 4000
    data_commits = [n for n in files_per_commit if n]
    chunks = summary.tables[0].chunks
    assert sum(data_commits) == (chunks + 1) // 2  # a file per group of 2 chunks
    assert max(data_commits) > 1  # some committed together
    dt_ = DeltaTable(table_uri(cfg.sink.path, f"{name}.t"))
    records = snapshot_commits(dt_).records
    assert sorted(r.chunk_index for r in records) == list(range(chunks))
    by_version: dict[int, int] = {}
    for r in records:
        by_version[r.delta_version] = by_version.get(r.delta_version, 0) + r.rows
    uri = table_uri(cfg.sink.path, f"{name}.t")
    for version, rows in by_version.items():  # the rows of its records are the rows it added
        # Version 0 is the first commit's: it created the table with its files.
        before = DeltaTable(uri, version=version - 1).to_pyarrow_dataset().count_rows() if version else 0
        assert DeltaTable(uri, version=version).to_pyarrow_dataset().count_rows() - before == rows
    assert_equal(cfg, [f"{name}.t"])
    assert snapshot(cfg, None).tables[0].chunks_read == 0



def _log(uri: str) -> list[tuple[int, int, bool]]:
    """(version, chunk records, carries the verified mark) of each commit of the table at ``uri``."""
    return sorted((c["version"], len(json.loads(c.get(SNAPSHOT_CHUNKS_KEY, "[]"))), SNAPSHOT_VERIFIED_KEY in c)
                  for c in DeltaTable(uri).history())


def test_table_read_in_a_quiet_window_is_created_and_verified_by_one_commit(db, make_config, monkeypatch):
    """No binlog event after the tables' baseline: each table (an empty one too) is one commit,
    which creates it with its rows, its chunk record and its verified mark; a re-run reads and
    commits nothing. A write on the source after a table's baseline puts an event in its read
    window: that table gets its verification in a commit after its rows."""
    from pipelines.snapshot import driver as snapshot_driver

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO a SELECT seq, CONCAT('v', seq) FROM seq_1_to_50")
        cur.execute("CREATE TABLE e (id INT PRIMARY KEY)")
    cfg = make_config(name, source={"snapshot": {"runner": "local"}})
    summary = snapshot(cfg, None)
    assert {t.table: (t.chunks, t.mysql_rows, t.matches) for t in summary.tables} == \
        {f"{name}.a": (1, 50, True), f"{name}.e": (1, 0, True)}
    for t, columns in (("a", {"id", "v"}), ("e", {"id"})):
        uri = table_uri(cfg.sink.path, f"{name}.{t}")
        assert _log(uri) == [(0, 1, True)], t
        assert columns <= set(DeltaTable(uri).schema().to_arrow().names)
    assert sum(t.chunks_read for t in snapshot(cfg, None).tables) == 0
    assert _log(table_uri(cfg.sink.path, f"{name}.a")) == [(0, 1, True)]

    # A new table, and a write to it after its baseline, before its read.
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO b VALUES (1), (2)")
    read_group = snapshot_driver.SnapshotJob.group_fn

    def after_a_write(task):
        with conn.cursor() as cur:
            cur.execute("INSERT IGNORE INTO b VALUES (3)")
        return read_group(task)

    monkeypatch.setattr(snapshot_driver.SnapshotJob, "group_fn", staticmethod(after_a_write))
    later = {t.table: t for t in snapshot(cfg, None).tables}
    assert {n: (t.chunks_read, t.matches) for n, t in later.items()} == \
        {f"{name}.a": (0, True), f"{name}.b": (1, True), f"{name}.e": (0, True)}
    assert later[f"{name}.b"].mysql_rows == 3
    assert _log(table_uri(cfg.sink.path, f"{name}.b")) == [(0, 1, False), (1, 0, True)]
    assert sum(t.chunks_read for t in snapshot(cfg, None).tables) == 0
    assert_equal(cfg, [f"{name}.a", f"{name}.b", f"{name}.e"])
