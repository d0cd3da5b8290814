"""Lake maintenance against real Delta tables (pipelines/lake/maintenance/), no source needed:

- policy: the effective target's bounds; a compaction is due at the small-file trigger, and
  below it only when idle, at the interval or asked;
- compaction changes no row, keeps the table's stream offset and transaction version, commits
  only ``dataChange=false`` actions and no transaction; its files hold disjoint, ordered key
  ranges; a one-key batch after it rewrites no more than it did before, or than one target
  file where its key was in a smaller file, and less in sum over the table's keys;
- a compaction whose inputs a batch replaced meanwhile commits nothing and leaves no file; one
  rewrites at most its budget of bytes, the files of the lowest keys first;
- vacuum: a reader holding an old version keeps reading while the retention has not passed
  (``retention_hours`` 1), and its files go once it has (0); a file no commit added goes too;
  bytes on disk then equal the live bytes;
- layout: tables binlake creates carry the configured and default properties, an existing
  one gains them; ``cluster_by`` orders compacted files on its columns; a partitioned table
  (``partition_by``) is written, updated by MERGE and compacted partition by partition;
- the stream's look at its tables reads only the files of tables committed since, a few tables
  per look, and still finds the one due;
- after a table's vacuum the stream's handles of it are opened afresh from the checkpoint the
  vacuum wrote (a handle kept for the stream's life grows with every commit) and read the same;
- configuration: every key validated, a short retention warned about, properties binlake cannot
  keep refused.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.config import ConfigError, SinkConfig, parse_config
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset, app_id
from pipelines.lake.apply import _rewritable, apply_changes
from pipelines.lake.files import commit_files, write_files, write_parquet
from pipelines.lake.maintenance import compaction, layout, policy, vacuum
from pipelines.lake.offsets import last_stream_offset, stream_commit_properties
from pipelines.lake.tables import ensure_table

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.int64()), ("pad", pa.string()),
                    ("_cdc_op", pa.string()), ("_cdc_seq", pa.int64())])
MiB = 1 << 20


def _rows(ids, seq: int = 0, op: str = "c", v: int = 0) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "region": [("eu", "us", "ap")[i % 3] for i in ids],
                     "v": pa.array([v + i % 97 for i in ids], pa.int64()), "pad": [f"{i:040x}" for i in ids],
                     "_cdc_op": [op] * len(ids), "_cdc_seq": pa.array([seq] * len(ids), pa.int64())}, schema=SCHEMA)


def _props(seq: int):
    pos = BinlogPosition("binlog.000001", 4 + 100 * seq)
    return stream_commit_properties("p", StreamOffset(pos, pos))


def _streamed(uri: str, snapshot_rows: int = 20_000, batches: int = 24) -> DeltaTable:
    """A table as the stream leaves it: one snapshot file, then batches that insert new keys (one
    small file each) and update keys anywhere (copy-on-write)."""
    dt = ensure_table(uri, SCHEMA)
    commit_files(dt, [write_parquet(uri, _rows(range(snapshot_rows), op="r"))], SCHEMA, {})
    rng = random.Random(5)
    top = snapshot_rows
    for b in range(1, batches + 1):
        new = _rows(range(top, top + 40), seq=b)
        top += 40
        upd = _rows(sorted(rng.sample(range(top - 40), 3)), seq=b, op="u", v=b)
        apply_changes(dt, ("id",), new, upd, SCHEMA.empty_table(), _props(b), uri)
    return dt


def _sorted(dt_or_uri) -> pa.Table:
    dt = DeltaTable(dt_or_uri) if isinstance(dt_or_uri, str) else dt_or_uri
    return dt.to_pyarrow_table().sort_by("id")


def _compact(dt: DeltaTable, uri: str, target_mb: float, sort_by=("id",), asked: bool = True):
    files = compaction.table_files(dt)
    trigger = policy.compaction_due(files, target_mb, idle_seconds=0, interval_due=False, asked=asked)
    assert trigger is not None
    job = compaction.plan(dt, "d.t", uri, None, trigger, policy.effective_target(target_mb, files.live_bytes),
                          sort_by)
    return job, compaction.commit(dt, compaction.rewrite(job))


# --- policy --------------------------------------------------------------------------------------


def test_effective_target_is_capped_for_small_tables_and_floored():
    assert policy.effective_target(128, 10_000 * MiB) == 128 * MiB  # a large table: the configured target
    assert policy.effective_target(128, 80 * MiB) == 10 * MiB  # an eighth of a small table
    assert policy.effective_target(128, 2 * MiB) == policy.MIN_TARGET_BYTES  # never below the floor
    assert policy.effective_target(0.02, 2 * MiB) == int(0.02 * MiB)  # nor above the target


def _files(sizes) -> policy.TableFiles:
    return policy.TableFiles(1, tuple(policy.DataFile(f"f{i}", s, 1) for i, s in enumerate(sizes)))


def test_compaction_is_due_at_the_trigger_and_otherwise_when_idle_due_or_asked():
    big = [100 * MiB] * 10
    small = [MiB] * (policy.SMALL_FILES_TRIGGER - 1)
    due = dict(idle_seconds=0, interval_due=False, asked=False)
    assert policy.compaction_due(_files(big + small), 128, **due) is None
    hit = policy.compaction_due(_files(big + small + [MiB]), 128, **due)
    assert hit is not None and len(hit.inputs) == policy.SMALL_FILES_TRIGGER  # the small files only
    for why, kw in (("idle", {"idle_seconds": policy.IDLE_SECONDS}), ("maintenance interval", {"interval_due": True}),
                    ("asked", {"asked": True})):
        assert policy.compaction_due(_files(big + [MiB, MiB]), 128, **{**due, **kw}).reason == why
    assert policy.compaction_due(_files(big + [MiB]), 128, **{**due, "asked": True}) is None  # nothing to merge
    split = policy.compaction_due(_files([512 * MiB, 100 * MiB]), 128, **{**due, "asked": True})
    assert [f.size for f in split.inputs] == [512 * MiB]  # an oversized file is cut


# --- compaction ----------------------------------------------------------------------------------


def _actions(uri: str, version: int) -> list[dict]:
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _one_key_rewrite(uri: str, key: int, work: Path) -> int:
    """Bytes a one-key update batch writes on a copy of the table at ``uri``."""
    copy = work / f"copy-{key}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(uri, copy)
    dt = DeltaTable(str(copy))
    before = set(dt.file_uris())
    apply_changes(dt, ("id",), SCHEMA.empty_table(), _rows([key], seq=999, op="u", v=1), SCHEMA.empty_table(),
                  _props(999), str(copy))
    added = pa.table(dt.get_add_actions(flatten=False))
    return sum(s for p, s in zip(added.column("path").to_pylist(), added.column("size_bytes").to_pylist())
               if str(copy / p) not in {u.removeprefix("file://") for u in before})


def test_compaction_keeps_rows_offsets_and_key_ranges(tmp_path):
    uri = str(tmp_path / "t")
    dt = _streamed(uri)
    rows, version = _sorted(uri), dt.version()
    txn, offset = dt.transaction_version(app_id("p")), last_stream_offset(dt, "p")
    keys = [k for k in range(0, rows.num_rows, 1200)] + [20_000 + 40 * b + 7 for b in range(0, 24, 5)]
    before = {k: _one_key_rewrite(uri, k, tmp_path) for k in keys}

    # A target between the sizes: the batches' files are small, the snapshot file is cut too
    # (oversized), whatever the Parquet encoding makes of their rows.
    sizes = sorted(f.size for f in compaction.table_files(dt).files)
    small_below, oversized_above = sizes[-2] / policy.SMALL_FRACTION, sizes[-1] / policy.OVERSIZED_FACTOR
    assert small_below < oversized_above, sizes
    job, done = _compact(dt, uri, target_mb=(small_below + oversized_above) / 2 / (1 << 20))
    assert done is not None and done.files_removed > done.files_added
    assert _sorted(uri).equals(rows)  # no row changed
    reread = DeltaTable(uri)
    assert reread.transaction_version(app_id("p")) == txn and last_stream_offset(reread, "p") == offset
    actions = _actions(uri, done.version)
    file_actions = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert file_actions and all(a["dataChange"] is False for a in file_actions)
    assert not any("txn" in a for a in actions)
    assert "binlake.stream.offset" not in next(a["commitInfo"] for a in actions if "commitInfo" in a)

    # The new files hold disjoint, ordered ranges of the key.
    stats = pa.table(reread.get_add_actions(flatten=True))
    new = sorted((lo, hi) for p, lo, hi in zip(stats.column("path").to_pylist(), stats.column("min.id").to_pylist(),
                                               stats.column("max.id").to_pylist()) if "compact" in p)
    assert len(new) == done.files_added and all(a[1] < b[0] for a, b in zip(new, new[1:]))
    after = {k: _one_key_rewrite(uri, k, tmp_path) for k in keys}
    for k in keys:  # no more than before, or than one target file when its key was in a smaller one
        assert after[k] <= max(before[k], 2 * job.target), (k, before[k], after[k], job.target)
    assert sum(after.values()) < sum(before.values())
    assert version < done.version


def test_compaction_whose_inputs_changed_meanwhile_commits_nothing(tmp_path):
    uri = str(tmp_path / "t")
    dt = _streamed(uri, snapshot_rows=2_000, batches=20)
    files = compaction.table_files(dt)
    trigger = policy.compaction_due(files, 1, idle_seconds=0, interval_due=False, asked=True)
    job = compaction.plan(dt, "d.t", uri, None, trigger, policy.effective_target(1, files.live_bytes), ("id",))
    done = compaction.rewrite(job)
    touched = next(f for f in job.inputs if "stream" in f.path)
    key = job.fragments[touched.path].to_table(columns=["id"]).column(0)[0].as_py()
    apply_changes(dt, ("id",), SCHEMA.empty_table(), _rows([key], seq=500, op="u", v=3), SCHEMA.empty_table(),
                  _props(500), uri)  # a batch rewrites one of its inputs meanwhile
    version = dt.version()
    assert compaction.commit(dt, done) is None
    assert dt.version() == version
    assert not any((Path(uri) / w.path).exists() for w in done.written)  # its files deleted
    assert _sorted(uri).num_rows == 2_000 + 20 * 40


# --- vacuum --------------------------------------------------------------------------------------


def test_vacuum_keeps_what_a_version_within_the_retention_reads(tmp_path):
    uri = str(tmp_path / "t")
    dt = _streamed(uri, snapshot_rows=2_000, batches=20)
    old = DeltaTable(uri)  # a reader holding the version before compaction
    rows = _sorted(old)
    _compact(dt, uri, target_mb=1)
    orphan = write_parquet(uri, _rows(range(10)), kind="stream")  # written, never committed (a crash)
    kept = vacuum.sweep(vacuum.plan(dt, "d.t", uri, None, retention_hours=1))
    assert kept.files_deleted == 0 and (Path(uri) / orphan.path).exists()
    assert _sorted(old).equals(rows)  # the old version still reads: the retention has not passed
    swept = vacuum.sweep(vacuum.plan(dt, "d.t", uri, None, retention_hours=0))
    assert swept.files_deleted > 0 and not (Path(uri) / orphan.path).exists()
    assert swept.stored_bytes == swept.live_bytes == vacuum.usage(dt, uri, None).stored_bytes
    with pytest.raises(OSError):
        old.to_pyarrow_table()  # its files are gone once the retention passed
    assert _sorted(uri).equals(rows)
    assert (Path(uri) / "_delta_log" / f"{dt.version():020d}.checkpoint.parquet").exists()


# --- layout --------------------------------------------------------------------------------------


def _sink(**raw) -> SinkConfig:
    return parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": ["d\\..*"]},
                         "sink": raw}).sink


def test_table_properties_at_creation_and_on_existing_tables(tmp_path):
    sink = _sink(path=str(tmp_path), table_properties={"delta.checkpointInterval": "50"},
                 maintenance={"retention_hours": 24})
    created = layout.create_table(sink, str(tmp_path / "d" / "a"), "d.a", SCHEMA)
    conf = created.metadata().configuration
    assert conf["delta.checkpointInterval"] == "50"
    assert conf[layout.DELETED_FILE_RETENTION] == "interval 24 hours"
    assert conf[layout.LOG_RETENTION] == "interval 168 hours"
    existing = ensure_table(str(tmp_path / "d" / "b"), SCHEMA)
    assert layout.apply_properties(existing, layout.table_properties(sink), "d.b") == layout.table_properties(sink)
    assert DeltaTable(str(tmp_path / "d" / "b")).metadata().configuration == conf
    assert layout.apply_properties(existing, layout.table_properties(sink), "d.b") == {}  # once
    cdf = layout.create_table(_sink(path=str(tmp_path), table_properties={"delta.enableChangeDataFeed": "true"}),
                              str(tmp_path / "d" / "c"), "d.c", SCHEMA)
    assert not _rewritable(cdf)  # its batches are MERGEs, which write the change data
    assert cdf.metadata().configuration["delta.checkpointInterval"] == "10"  # binlake's default, Delta's own


def test_tables_binlake_creates_write_a_checkpoint_every_ten_commits(tmp_path):
    """A table created with the default properties gets a checkpoint at versions 9, 19, ... (delta-rs
    alone: every 100), and a handle opened after the stream's commits reads it and the commits after."""
    sink = _sink(path=str(tmp_path))
    uri = str(tmp_path / "d" / "t")
    dt = layout.create_table(sink, uri, "d.t", SCHEMA)  # version 0
    for b in range(1, 21):
        apply_changes(dt, ("id",), _rows([b], seq=b), SCHEMA.empty_table(), SCHEMA.empty_table(), _props(b), uri)
    checkpoints = sorted(int(p.name.split(".")[0]) for p in (Path(uri) / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints == [9, 19]
    assert _sorted(uri).column("id").to_pylist() == list(range(1, 21))


def test_cluster_by_orders_compacted_files_on_its_columns(tmp_path):
    uri = str(tmp_path / "t")
    dt = _streamed(uri, snapshot_rows=3_000, batches=20)
    sink = _sink(path=str(tmp_path), layout={"d\\.t": {"cluster_by": ["v"]}})
    sort_by = layout.sort_columns(sink, "d.t", SCHEMA, ("id",))
    assert sort_by == ("v", "id")
    rows = _sorted(uri)
    _, done = _compact(dt, uri, target_mb=0.005, sort_by=sort_by)  # the snapshot file cut into several
    assert _sorted(uri).equals(rows)
    stats = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    ranges = sorted((lo, hi) for p, lo, hi in zip(stats.column("path").to_pylist(), stats.column("min.v").to_pylist(),
                                                  stats.column("max.v").to_pylist()) if "compact" in p)
    assert len(ranges) == done.files_added > 1 and all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))


def test_partitioned_table_written_merged_and_compacted_by_partition(tmp_path):
    uri = str(tmp_path / "d" / "t")
    sink = _sink(path=str(tmp_path), layout={"d\\.t": {"partition_by": ["region"]}})
    dt = layout.create_table(sink, uri, "d.t", SCHEMA)
    assert dt.metadata().partition_columns == ["region"] and not _rewritable(dt)
    commit_files(dt, list(write_files(uri, _rows(range(3_000), op="r"), partition_by=("region",))), SCHEMA, {})
    for b in range(1, 13):
        apply_changes(dt, ("id",), _rows(range(3_000 + 30 * b, 3_030 + 30 * b), seq=b),
                      _rows([b * 7, b * 11], seq=b, op="u", v=b), SCHEMA.empty_table(), _props(b), uri)
    rows = _sorted(uri)
    assert rows.num_rows == 3_000 + 12 * 30 and set(rows.column("region").to_pylist()) == {"eu", "us", "ap"}
    _, done = _compact(dt, uri, target_mb=1)
    assert done is not None and done.files_added == 3  # one per partition
    after = DeltaTable(uri)
    assert _sorted(after).equals(rows)
    parts = pa.table(after.get_add_actions(flatten=True))
    assert sorted(parts.column("partition.region").to_pylist()) == ["ap", "eu", "us"]
    with pytest.raises(ConfigError, match="no column nowhere"):
        layout.create_table(_sink(path=str(tmp_path), layout={"d\\.u": {"partition_by": ["nowhere"]}}),
                            str(tmp_path / "d" / "u"), "d.u", SCHEMA)


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(("sink", "says"), [
    ({"maintenance": {"target_file_mb": 128, "retention_hour": 1}}, "sink.maintenance.retention_hour: unknown key"),
    ({"maintenance": {"retention_hours": -1}}, "sink.maintenance.retention_hours"),
    ({"layout": {"d\\.t": {"cluster": ["v"]}}}, "cluster: unknown key"),
    ({"table_properties": {"delta.appendOnly": "true"}}, "delta.appendOnly"),
    ({"table_properties": {"delta.deletedFileRetentionDuration": "interval 1 days"}}, "shorter than"),
    ({"table_properties": {"delta.logRetentionDuration": "7 days"}}, "not a Delta interval"),
])
def test_maintenance_keys_are_checked(sink, says):
    with pytest.raises(ConfigError, match=says):
        _sink(**sink)


def test_short_retention_is_accepted_with_a_warning():
    assert _sink(maintenance={"retention_hours": 0}).maintenance.retention_warning()
    assert _sink().maintenance.retention_warning() is None
    assert _sink().maintenance.target_file_mb == 128 and _sink().maintenance.retention_hours == 168


def test_small_files_of_a_fresh_stream_are_counted(tmp_path):
    uri = str(tmp_path / "t")
    dt = _streamed(uri, snapshot_rows=1_000, batches=5)
    files = compaction.table_files(dt)
    assert len(files.files) == 6 and files.live_bytes == sum(np.array([f.size for f in files.files]))


def test_a_compaction_rewrites_at_most_its_budget_in_key_order(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    dt = ensure_table(uri, SCHEMA)
    for lo in range(2_000, 0, -100):  # 20 files, committed in descending key order
        commit_files(dt, [write_parquet(uri, _rows(range(lo - 100, lo)))], SCHEMA, {})
    rows = _sorted(uri)
    size = max(f.size for f in compaction.table_files(dt).files)
    monkeypatch.setattr(compaction, "JOB_BYTES", 5 * size)
    job, done = _compact(dt, uri, target_mb=3 * size / (1 << 20))  # 20 small files
    assert len(job.inputs) == 5  # a budget's worth, ...
    taken = pa.concat_tables([job.fragments[f.path].to_table(columns=["id"]) for f in job.inputs]).column(0)
    assert sorted(taken.to_pylist()) == list(range(500))  # ... the lowest keys first
    assert _sorted(uri).equals(rows) and done.files_removed == 5


# --- long-lived handles --------------------------------------------------------------------------


def test_a_vacuum_reopens_the_streams_handles_from_its_checkpoint(tmp_path):
    """A handle kept for the stream's life grows with every commit it has seen: after a table's
    vacuum (which writes a checkpoint) the stream's handles of it are fresh ones that read the same."""
    from cdc_core.routes import Router
    from pipelines.lake.control_store import ControlStore
    from pipelines.lake.maintenance.maintainer import Maintainer
    from pipelines.lake.tables import table_uri
    from pipelines.stream.sinks import Sinks

    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": ["d\\..*"]},
                        "sink": {"path": str(tmp_path), "maintenance": {"retention_hours": 0}}})
    uri = table_uri(cfg.sink.path, "d.t")
    rows = _sorted(_streamed(uri, snapshot_rows=2_000, batches=4))
    sinks = Sinks(cfg, Router([]))
    kept = sinks.existing("d.t")
    store = ControlStore.of(cfg)
    for seq in range(3):
        pos = BinlogPosition("binlog.000001", 4 + seq)
        store.save_checkpoint(StreamOffset(pos, pos), "streaming", seq)
    now = [0.0]
    m = Maintainer(cfg, lambda: sinks.tables, lambda sink: ("id",), store, reopen=sinks.reopen,
                   clock=lambda: now[0])
    try:
        m.step()  # the tables are seen: their interval starts now
        now[0] = cfg.sink.maintenance.interval_minutes * 60 + 1  # every table's vacuum is due
        for _ in range(200):
            m.step()
            if sinks.tables["d.t"] is not kept:
                break
            now[0] += 0.1
            time.sleep(0.05)  # the compaction that is due first runs in the maintainer's thread
        fresh = sinks.tables["d.t"]
        assert fresh is not kept, "the vacuumed table's handle was not reopened"
        assert fresh.version() == DeltaTable(uri).version() and _sorted(fresh).equals(rows)
    finally:
        m.close()
    store.reopen("stream_checkpoint")  # as after a vacuum of the control table: the next write opens it
    pos = BinlogPosition("binlog.000001", 99)
    store.save_checkpoint(StreamOffset(pos, pos), "streaming", 3)
    assert store.checkpoint().offset.applied == pos


def test_a_worn_handle_is_opened_afresh_and_reads_the_same(tmp_path, monkeypatch):
    """Between vacuums the stream's handles are opened afresh once they are ``RENEW_VERSIONS``
    versions past where they were opened (delta-rs's incremental update keeps every commit's actions
    in the handle), at the next checkpoint: the data table's (Sinks.renew, the engine's step between
    batches) and the control store's stream_checkpoint handle (a commit per batch); the fresh ones
    read the same."""
    from cdc_core.routes import Router
    from pipelines.lake import tables
    from pipelines.lake.control_store import ControlStore
    from pipelines.lake.files import commit_files, write_parquet
    from pipelines.stream.sinks import Sinks

    monkeypatch.setattr(tables, "RENEW_VERSIONS", 4)
    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": ["d\\..*"]},
                        "sink": {"path": str(tmp_path)}})
    uri = tables.table_uri(cfg.sink.path, "d.t")
    ensure_table(uri, SCHEMA, configuration={"delta.checkpointInterval": "5"})  # checkpoints at 4, 9, ...
    _streamed(uri, snapshot_rows=100, batches=0)  # version 1
    sinks = Sinks(cfg, Router([]))
    kept = sinks.existing("d.t")
    top = 100
    for version in range(2, 9):  # 4 versions past its opening at 5, but the next checkpoint is 9
        commit_files(kept, [write_parquet(uri, _rows(range(top, top + 10)))], SCHEMA, {})
        top += 10
        sinks.renew()
        assert sinks.tables["d.t"] is kept and not tables.worn(kept), f"version {version}"
    commit_files(kept, [write_parquet(uri, _rows(range(top, top + 10)))], SCHEMA, {})  # version 9
    top += 10
    assert tables.worn(kept)
    sinks.renew()
    fresh = sinks.tables["d.t"]
    assert fresh is not kept and not tables.worn(fresh)
    assert fresh.version() == kept.version() == DeltaTable(uri).version() == 9
    assert _sorted(fresh).equals(_sorted(uri)) and _sorted(fresh).num_rows == top

    # The control tables take delta-rs's default interval; a smaller one keeps the test short.
    monkeypatch.setattr(tables, "DEFAULT_CHECKPOINT_INTERVAL", 3)
    store = ControlStore.of(cfg)
    seen = []
    for seq in range(1, 16):
        pos = BinlogPosition("binlog.000001", 4 + seq)
        store.save_checkpoint(StreamOffset(pos, pos), "streaming", seq)
        if store._checkpoints is not None and all(h is not store._checkpoints for h in seen):  # noqa: SLF001
            seen.append(store._checkpoints)  # noqa: SLF001
    assert len(seen) >= 2, "the checkpoint handle was never opened afresh"
    for reader in (store, ControlStore.of(cfg)):
        cp = reader.checkpoint()
        assert (cp.offset.applied, cp.seq, cp.rows_applied) == (pos, 15, 15)


def test_a_worn_handle_waits_for_a_checkpoint_but_not_past_the_next_interval(tmp_path, monkeypatch):
    """A handle past ``RENEW_VERSIONS`` is worn at a checkpoint version (a fresh open then replays no
    commit); one whose updates skipped that version is worn once it is as many versions past it as
    it has waited, so it is renewed within an interval whatever versions it sees."""
    from pipelines.lake import tables
    from pipelines.lake.files import commit_files, write_parquet

    monkeypatch.setattr(tables, "RENEW_VERSIONS", 2)
    uri = str(tmp_path / "t")
    writer = ensure_table(uri, SCHEMA, configuration={"delta.checkpointInterval": "5"})  # version 0

    def commit_until(version: int) -> None:
        while writer.version() < version:
            commit_files(writer, [write_parquet(uri, _rows([writer.version()]))], SCHEMA, {})

    held = tables.open_table(uri)  # at version 0
    commit_until(3)
    held.update_incremental()
    assert not tables.worn(held)  # 3 versions past, 1 waited, 4 commits after the last checkpoint's version
    commit_until(4)  # writes the checkpoint at version 4
    held.update_incremental()
    assert (Path(uri) / "_delta_log" / f"{4:020d}.checkpoint.parquet").exists() and tables.worn(held)

    held = tables.open_table(uri)  # at version 4
    commit_until(10)  # the checkpoint at 9 is skipped by the held handle's next update
    held.update_incremental()
    assert held.version() == 10 and tables.worn(held)  # 4 waited, 1 commit past the checkpoint


def test_a_stream_handle_is_opened_afresh_after_each_commit_that_wrote_a_checkpoint(tmp_path):
    """delta-rs's commit replays its handle's commits since the checkpoint the handle was loaded
    from (bench/commit_growth.py): after the stream's commit that wrote a checkpoint
    (``delta.checkpointInterval``, here 3: versions 2 and 5) the sink's handle is opened afresh from it
    (Sinks.committed, called by the Committer after each table commit), and reads the same."""
    from cdc_core.routes import Router
    from pipelines.lake import tables
    from pipelines.stream.sinks import Sinks

    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": ["d\\..*"]},
                        "sink": {"path": str(tmp_path)}})
    uri = tables.table_uri(cfg.sink.path, "d.t")
    ensure_table(uri, SCHEMA, configuration={"delta.checkpointInterval": "3"})  # version 0
    sinks = Sinks(cfg, Router([]))
    top = 0
    for seq in range(1, 8):
        before = sinks.existing("d.t")
        apply_changes(before, ("id",), _rows(range(top, top + 5), seq=seq), SCHEMA.empty_table(),
                      SCHEMA.empty_table(), _props(seq), uri)
        top += 5
        sinks.committed("d.t")
        after = sinks.tables["d.t"]
        checkpointed = (Path(uri) / "_delta_log" / f"{seq:020d}.checkpoint.parquet").exists()
        assert checkpointed == ((seq + 1) % 3 == 0)
        assert (after is not before) == checkpointed, f"version {seq}"
        assert after.version() == seq and _sorted(after).num_rows == top
        assert after.transaction_version(app_id("p")) == _props(seq).app_transactions[0].version
    assert _sorted(sinks.tables["d.t"]).equals(_sorted(uri))


def test_a_handle_not_opened_by_the_lake_is_never_worn(tmp_path, monkeypatch):
    from pipelines.lake import tables

    monkeypatch.setattr(tables, "RENEW_VERSIONS", 1)
    uri = str(tmp_path / "t")
    ensure_table(uri, SCHEMA, configuration={"delta.checkpointInterval": "5"})  # the change below: version 4
    _streamed(uri, snapshot_rows=10, batches=2)
    assert not tables.worn(DeltaTable(uri)) and tables.worn(tables.open_table(uri)) is False
    dt = tables.open_table(uri)
    apply_changes(dt, ("id",), _rows(range(10, 12), seq=9), SCHEMA.empty_table(), SCHEMA.empty_table(),
                  _props(9), uri)
    assert tables.worn(dt)


def test_the_streams_look_at_many_tables_reads_only_changed_ones_and_few_per_step(tmp_path, monkeypatch):
    """Each look at the tables (``CHECK_SECONDS``) reads a table's files from its handle again only
    when its version moved, at most ``CHECK_READS`` tables' per look, going on from there at the
    next; a table due for compaction is found all the same (here the last one of the round)."""
    from pipelines.lake.control_store import ControlStore
    from pipelines.lake.maintenance import maintainer

    cfg = parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": ["d\\..*"]},
                        "sink": {"path": str(tmp_path)}})
    tables = {}
    for i in range(7):
        uri = str(tmp_path / "d" / f"t{i}")
        tables[f"d.t{i}"] = ensure_table(uri, SCHEMA)
        commit_files(tables[f"d.t{i}"], [write_parquet(uri, _rows(range(10)))], SCHEMA, {})
    due = tables["d.t6"]
    for b in range(policy.SMALL_FILES_TRIGGER):  # small files enough to be compacted at once
        commit_files(due, [write_parquet(due.table_uri, _rows(range(10 + b, 11 + b)))], SCHEMA, {})
    reads = []
    real = compaction.table_files
    monkeypatch.setattr(compaction, "table_files", lambda dt: reads.append(dt.table_uri) or real(dt))
    monkeypatch.setattr(maintainer, "CHECK_READS", 3)
    now = [0.0]
    m = maintainer.Maintainer(cfg, lambda: tables, lambda sink: ("id",), ControlStore.of(cfg), clock=lambda: now[0])
    try:
        looks = []
        while m._inflight is None and len(looks) < 5:
            now[0] += maintainer.CHECK_SECONDS
            reads.clear()
            m.step(may_vacuum=False)
            looks.append(len(reads))
        assert looks == [3, 3, 1], "three tables' files read per look, the seventh (due) at the third"
        assert m._inflight[0].sink == "d.t6"

        def look() -> list[str]:
            """The next look, the compaction in flight dropped first (not committed: nothing moves)."""
            if m._inflight is not None:
                compaction.discard(m._inflight[1].result())
                m._inflight = None
            now[0] += maintainer.CHECK_SECONDS
            reads.clear()
            m.step(may_vacuum=False)
            return list(reads)

        assert look() == [], "no table committed since: no files read again"
        commit_files(tables["d.t2"], [write_parquet(tables["d.t2"].table_uri, _rows(range(50, 51)))], SCHEMA, {})
        assert look() == [tables["d.t2"].table_uri], "only the table committed since is read again"
    finally:
        m.close()
