"""The change-count oracle (tests/change_count.py) counts what it should and fails when it
should: a known workload gives known counts on both sides (a change folded to nothing in its
batch included, its table committed without files); the binlog's changes past what the stream
committed are reported lost; a stream commit recorded twice is reported as changes applied twice;
a commit that applies one key's update to another key, its counts per table right, is reported
per key (the lost update and the extra one, which cancel per table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import CommitProperties, DeltaTable

from cdc_core.offset.position import master_position
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import CHANGES_KEY
from pipelines.lake.tables import commit_no_data, table_uri
from pipelines.stream import StreamEngine
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal


def _stream_to_end(cfg) -> None:
    summary = StreamEngine(cfg, until_now=True).run()
    assert summary.stop_reason.startswith("reached"), summary.stop_reason


def test_counts_match_and_a_replay_a_gap_or_a_wrong_key_fails(mariadb, db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0)")
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY)")
    # One batch per run (no time cut): u's insert and delete fold together.
    cfg = make_config(name, source={"startup": {"mode": "latest"}}, stream={"max_batch_seconds": 600})
    names = [f"{name}.t", f"{name}.u"]
    _stream_to_end(cfg)  # the stream starts at the binlog end: the checkpoint is its start
    start = ControlStore.of(cfg).checkpoint().offset.applied
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, 0)", [(i,) for i in range(1, 51)])
        cur.execute("UPDATE t SET counter = counter + 1 WHERE id <= 20")
        cur.execute("FLUSH BINARY LOGS")  # the range spans two binlog files
        cur.execute("UPDATE t SET id = 1000, counter = counter + 1 WHERE id = 50")  # a key update: one change
        cur.execute("DELETE FROM t WHERE id > 45")  # 46-49 and 1000
        # Changes that fold to nothing in one batch: u is committed without files all the same.
        cur.execute("BEGIN")
        cur.execute("INSERT INTO u VALUES (1), (2)")
        cur.execute("DELETE FROM u")
        cur.execute("COMMIT")
    _stream_to_end(cfg)
    assert_equal(cfg, names)

    counts = assert_changes_counted(cfg, names, start=start)
    assert counts == {names[0]: {"c": 50, "u": 21, "d": 5}, names[1]: {"c": 2, "u": 0, "d": 2}}
    u = Path(table_uri(cfg.sink.path, names[1]))
    (commit,) = [f.read_text() for f in (u / "_delta_log").glob("*.json") if OFFSET_KEY in f.read_text()]
    assert '"add"' not in commit and '"remove"' not in commit, commit

    # A commit that applies key 3's update to key 4: the counts per table agree, the keys do not.
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET counter = counter + 1 WHERE id = 3")
        end = master_position(cur)
    offset = StreamOffset(end, end, server_id=1)
    t = DeltaTable(table_uri(cfg.sink.path, names[0]))
    t.update(predicate="id = 4", updates={"counter": "counter + 1", "_cdc_seq": str(end.seq())},
             commit_properties=CommitProperties(custom_metadata={
                 OFFSET_KEY: offset.to_json(), CHANGES_KEY: json.dumps({names[0]: {"c": 0, "u": 1, "d": 0}})}))
    with pytest.raises(AssertionError) as failed:
        assert_changes_counted(cfg, names, start=start, end=offset)
    message = str(failed.value)
    assert "key ('3',) u 0 applied, 1 in the binlog" in message and "key ('4',) u 1 applied, 0 in the binlog" in message
    assert "committed" not in message, message  # per table and op the counts agree

    # A gap: the binlog holds a change past the last commit.
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2000, 0)")
        end = master_position(cur)
    with pytest.raises(AssertionError, match=r"t: c 50 committed, 51 in the binlog \(changes lost\)"):
        assert_changes_counted(cfg, names, start=start, end=end)

    # A replay: t's last stream commit recorded a second time (what a batch applied again after a
    # crash leaves in the log), through the end the checkpoint names.
    t = DeltaTable(table_uri(cfg.sink.path, names[0]))
    last = next(c for c in t.history() if c.get(OFFSET_KEY))  # newest first
    commit_no_data(t, CommitProperties(custom_metadata={k: last[k] for k in (OFFSET_KEY, CHANGES_KEY)}))
    with pytest.raises(AssertionError, match=r"t: .*committed, .* in the binlog \(changes applied twice\)"):
        assert_changes_counted(cfg, names, start=start)

