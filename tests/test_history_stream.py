"""Table modes against a real MariaDB (cdc_core/schema/modes.py; docs/history.md), each table
checked against the binlog as ``mariadb-binlog -v`` prints it (tests/binlog_oracle.py), not
against binlake's own reader:

- under random writes (several changes to a key in one transaction, deletes, re-inserts of
  deleted keys), an ALTER TABLE ADD COLUMN, and ``binlake stream`` SIGKILLed at random
  instants and at its named steps (tests/pause_points.py), restarted each time:
  - ``history``: every key's versions are exactly the binlog's row images after the snapshot,
    in order (``_cdc_seq``, op, values, ``_cdc_ts``, ``_cdc_position``); each version ends
    where the next change of its key begins (``_valid_to_seq``), a delete closes it; one
    current version per key MySQL holds, none for the others; times never step back;
  - ``soft_delete``: the live rows equal MySQL's; every key deleted and not inserted again is
    a tombstone holding its before image, stamped with its delete;
  - ``current`` with metadata columns: Delta equals MySQL, each row stamped with its key's
    last change; also without a change feed (a test of its own: that batch folds as the
    default's);
  - the change feed of each: exactly the binlog's changes, once each, in order;
- an online backfill of an intact table writes nothing (no repair version, no tombstone
  touched); after Delta is damaged by hand, the backfill repairs it: a history table's wrong
  current versions are closed and corrected ones opened (``_cdc_op`` 'r'), a soft-delete
  table's tombstones of keys MySQL lacks are kept as they were;
- TRUNCATE TABLE ends every row: tombstones, closed versions.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable

from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.schema.modes import FEED_SUFFIX
from pipelines.lake.tables import table_uri
from tests.binlog_oracle import Change, table_changes
from tests.helpers import assert_equal, write_config_file
from tests.pause_points import MARKER
from tests.test_stream_crash import Stream, run_stream, wait_for

SEED = 20261127
TABLES = ("t_cur", "t_soft", "t_hist")
STREAM = {"max_batch_rows": 60, "max_batch_seconds": 0.3}


def _config(make_config, name: str, tmp_path: Path):
    cfg = make_config(name, chunk_size=50, stream=STREAM, source={"snapshot": {"runner": "local"}},
                      sink={"metadata_columns": ["_cdc_ts", "_cdc_position"],
                            "table_modes": {rf"{name}\.t_soft": "soft_delete", rf"{name}\.t_hist": "history"},
                            "change_feed": [rf"{name}\.t_.*"]})
    return cfg, write_config_file(cfg, tmp_path / "binlake.yaml")


def _create(conn, rows: int = 120) -> None:
    with conn.cursor() as cur:
        for t in TABLES:
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(30))")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq % 7, CONCAT('s', seq) FROM seq_1_to_{rows}")


class Writer(threading.Thread):
    """Random changes to every table: inserts (new keys and deleted ones again), updates (a key
    updated several times in one transaction), deletes; an ALTER TABLE ADD COLUMN on request."""

    def __init__(self, server, database: str, seed: int):
        super().__init__(daemon=True)
        self.server, self.database, self.rng = server, database, random.Random(seed)
        self.stop_event, self.alter = threading.Event(), threading.Event()
        self.altered = False
        self.steps = 0

    def run(self) -> None:
        with self.server.connect(self.database) as c, c.cursor() as cur:
            while not self.stop_event.is_set():
                if self.alter.is_set() and not self.altered:
                    for t in TABLES:
                        cur.execute(f"ALTER TABLE {t} ADD COLUMN w INT")
                    self.altered = True
                self.step(cur)
                time.sleep(0.005)

    def step(self, cur) -> None:
        r, t = self.rng.random(), self.rng.choice(TABLES)
        key = self.rng.randint(1, 200)
        w = f", w = {self.rng.randint(0, 9)}" if self.altered else ""
        if r < 0.3:
            cur.execute(f"INSERT IGNORE INTO {t} SET id = {key}, v = {self.rng.randint(0, 99)}, s = 'i{key}'{w}")
        elif r < 0.6:
            cur.execute(f"UPDATE {t} SET v = v + 1, s = CONCAT('u', {self.rng.randint(0, 9)}){w} WHERE id = {key}")
        elif r < 0.75:
            cur.execute("BEGIN")
            for _ in range(self.rng.randint(2, 4)):
                cur.execute(f"UPDATE {t} SET v = v + 1{w} WHERE id = {key}")
            cur.execute("COMMIT")
        elif r < 0.9:
            cur.execute(f"DELETE FROM {t} WHERE id = {key}")
        else:  # a range: several rows in one event
            cur.execute(f"UPDATE {t} SET v = v + 2{w} WHERE id BETWEEN {key} AND {key + 5}")
        self.steps += 1


def _kill_at_random(config: str, logs: Path, password: str, rng: random.Random, kills: int, writer: Writer) -> None:
    points = ["batch_read", "tables_committed", None, None]
    for i in range(kills):
        if i == kills // 2:
            writer.alter.set()
        point = rng.choice(points)
        pause = f"{point}:{rng.randint(1, 4)}" if point else None
        s = Stream(config, logs, password=password, pause=pause)
        try:
            if pause:
                wait_for(lambda s=s: MARKER in s.stderr or not s.alive(), 60, f"the pause at {pause}")
            else:
                time.sleep(rng.uniform(0.5, 2.5))
        finally:
            s.kill()


def _delta(cfg, name: str, table: str):
    return DeltaTable(table_uri(cfg.sink.path, f"{name}.{table}")).to_pyarrow_table()


def _image(row: dict, width: int) -> tuple:
    return tuple(row[c] for c in ("id", "v", "s", "w")[:width])


def _by_key(changes: list[Change]) -> dict[int, list[Change]]:
    out: dict[int, list[Change]] = defaultdict(list)
    for ch in changes:
        if ch.before_key is not None and ch.op in ("u", "d"):
            out[ch.before_key].append(ch)
        if ch.op == "u" and ch.after_key != ch.before_key:
            raise AssertionError("the workload moves no key")
    for ch in changes:
        if ch.op == "c":
            out[ch.after_key].append(ch)
    return {k: sorted(v, key=lambda c: c.seq) for k, v in out.items()}


def _check_history(cfg, name: str, changes: list[Change], start_rows: dict[int, tuple]) -> None:
    rows = _delta(cfg, name, "t_hist").to_pylist()
    versions: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        versions[r["id"]].append(r)
    expected = _by_key(changes)
    live = set()
    for key in set(versions) | set(expected) | set(start_rows):
        mine = sorted(versions.get(key, []), key=lambda r: r["_cdc_seq"])
        if key in start_rows:  # the snapshot's row is the key's first version
            first = mine.pop(0)
            assert first["_cdc_op"] == "r" and _image(first, 3) == start_rows[key], (key, first)
        theirs = expected.get(key, [])
        opened = [c for c in theirs if c.op != "d"]
        assert [(r["_cdc_seq"], r["_cdc_op"], _image(r, len(c.image))) for r, c in zip(mine, opened)] == \
            [(c.seq, c.op, c.image) for c in opened], f"key {key}: versions differ from the binlog"
        assert len(mine) == len(opened), f"key {key}: {len(mine)} versions, the binlog has {len(opened)}"
        for r, c in zip(mine, opened):
            assert r["_cdc_ts"].timestamp() == c.ts and r["_cdc_position"] == c.gtid, (key, r, c)
        # Each version ends where its key's next change begins; the last one is current unless deleted.
        chain = sorted(versions.get(key, []), key=lambda r: r["_cdc_seq"])
        ends = [c.seq for c in theirs]
        for r in chain:
            after = [s for s in ends if s > r["_cdc_seq"]]
            if after:
                assert r["_valid_to_seq"] == after[0] and not r["_is_current"], (key, r)
                assert r["_valid_to"] is not None and r["_valid_to"] >= r["_valid_from"], (key, r)
            else:
                assert r["_valid_to_seq"] is None and r["_valid_to"] is None and r["_is_current"], (key, r)
                live.add(key)
        froms = [r["_valid_from"] for r in chain]
        assert froms == sorted(froms), f"key {key}: validity times step back"
    current = [r["id"] for r in rows if r["_is_current"]]
    assert len(current) == len(set(current)), "a key has two current versions"
    assert set(current) == live


def _check_soft(cfg, name: str, changes: list[Change]) -> None:
    rows = {r["id"]: r for r in _delta(cfg, name, "t_soft").to_pylist()}
    assert len(rows) == _delta(cfg, name, "t_soft").num_rows, "a key is held twice"
    for key, theirs in _by_key(changes).items():
        last = theirs[-1]
        r = rows[key]
        assert r["_cdc_seq"] == last.seq and r["_cdc_deleted"] == (last.op == "d"), (key, r, last)
        assert _image(r, len(last.image)) == last.image and r["_cdc_op"] == last.op, (key, r, last)
        assert r["_cdc_ts"].timestamp() == last.ts and r["_cdc_position"] == last.gtid


def _check_current(cfg, name: str, changes: list[Change]) -> None:
    rows = {r["id"]: r for r in _delta(cfg, name, "t_cur").to_pylist()}
    for key, theirs in _by_key(changes).items():
        last = theirs[-1]
        if last.op == "d":
            assert key not in rows
            continue
        r = rows[key]
        assert (r["_cdc_seq"], r["_cdc_op"], r["_cdc_position"]) == (last.seq, last.op, last.gtid), (key, r, last)
        assert r["_cdc_ts"].timestamp() == last.ts


def _check_feed(cfg, name: str, table: str, changes: list[Change]) -> None:
    feed_table = DeltaTable(table_uri(cfg.sink.path, f"{name}.{table}{FEED_SUFFIX}"))
    assert feed_table.metadata().configuration.get("delta.checkpointInterval") == "10"  # as binlake's tables
    feed = feed_table.to_pyarrow_table()
    rows = sorted(feed.to_pylist(), key=lambda r: r["_cdc_seq"])
    assert [(r["_cdc_seq"], r["_cdc_op"], _image(r, len(c.image)), r["_cdc_position"]) for r, c in zip(rows, changes)] \
        == [(c.seq, c.op, c.image, c.gtid) for c in changes], f"{table}: the change feed differs from the binlog"
    assert len(rows) == len(changes), f"{table}: {len(rows)} changes in the feed, {len(changes)} in the binlog"


def test_modes_under_kills_alter_and_backfill_equal_the_binlog(mariadb, db, make_config, tmp_path):
    name, conn = db
    _create(conn)
    cfg, config = _config(make_config, name, tmp_path)
    logs = tmp_path / "logs"
    snap = run_stream(config, logs, command="snapshot", password=mariadb.password)
    assert snap.proc.returncode == 0, snap.describe()
    with conn.cursor() as cur:
        start = master_position(cur)  # every change after it is streamed (the snapshot read them all before)
        cur.execute("SELECT id, v, s FROM t_hist")
        start_rows = {r[0]: tuple(r) for r in cur.fetchall()}
    writer = Writer(mariadb, name, SEED)
    writer.start()
    try:
        _kill_at_random(config, logs, mariadb.password, random.Random(SEED), 10, writer)
    finally:
        writer.stop_event.set()
        writer.join(30)
    assert writer.altered and writer.steps > 200
    final = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert final.proc.returncode == 0, final.describe()
    names = [f"{name}.{t}" for t in TABLES]
    assert_equal(cfg, names)
    datadir = Path(mariadb.base_dir) / "data"
    changes = {t: table_changes(datadir, start, name, t) for t in TABLES}
    _check_history(cfg, name, changes["t_hist"], start_rows)
    _check_soft(cfg, name, changes["t_soft"])
    _check_current(cfg, name, changes["t_cur"])
    for t in TABLES:
        _check_feed(cfg, name, t, changes[t])

    # An intact table's backfill writes nothing: no repair version, every tombstone as it was.
    before = {t: _delta(cfg, name, t) for t in TABLES}
    for t in TABLES:
        done = run_stream(config, logs, "--table", f"{name}.{t}", password=mariadb.password, command="backfill")
        assert done.proc.returncode == 0, done.describe()
    for t in TABLES:
        assert _delta(cfg, name, t).sort_by("_cdc_seq").equals(before[t].sort_by("_cdc_seq")), t

    # Damage by hand: a current version's value changed, a current version removed, a live row
    # made a tombstone, a tombstone's value changed; the backfill repairs what MySQL holds.
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM t_hist ORDER BY id LIMIT 2")
        wrong, gone = (r[0] for r in cur.fetchall())
        cur.execute("SELECT id FROM t_soft ORDER BY id LIMIT 1")
        (revived,) = cur.fetchone()
    hist = DeltaTable(table_uri(cfg.sink.path, f"{name}.t_hist"))
    hist.update(updates={"v": "-5"}, predicate=f"id = {wrong} AND _is_current")
    hist.delete(f"id = {gone} AND _is_current")
    soft = DeltaTable(table_uri(cfg.sink.path, f"{name}.t_soft"))
    soft.update(updates={"_cdc_deleted": "true"}, predicate=f"id = {revived}")
    tombs = _delta(cfg, name, "t_soft").filter(pc.field("_cdc_deleted"))
    kept = tombs.filter(pc.field("id") != revived).sort_by("id")
    for t in ("t_hist", "t_soft"):
        done = run_stream(config, logs, "--table", f"{name}.{t}", password=mariadb.password, command="backfill")
        assert done.proc.returncode == 0, done.describe()
    assert_equal(cfg, names)
    after = _delta(cfg, name, "t_soft").filter(pc.field("_cdc_deleted"))
    assert after.filter(pc.field("id") != revived).sort_by("id").equals(kept), "a tombstone changed"
    repaired = sorted((r for r in _delta(cfg, name, "t_hist").to_pylist() if r["id"] in (wrong, gone)),
                      key=lambda r: (r["id"], r["_cdc_seq"]))
    latest = {r["id"]: r for r in repaired}
    assert latest[wrong]["_cdc_op"] == latest[gone]["_cdc_op"] == "r" and latest[wrong]["_is_current"]
    closed = [r for r in repaired if r["id"] == wrong and r["v"] == -5]
    assert closed and not closed[0]["_is_current"] and closed[0]["_valid_to_seq"] == latest[wrong]["_cdc_seq"]

    # TRUNCATE ends every row, keeping the past.
    with conn.cursor() as cur:
        for t in TABLES:
            cur.execute(f"TRUNCATE TABLE {t}")
    final = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert final.proc.returncode == 0, final.describe()
    assert_equal(cfg, names)
    assert _delta(cfg, name, "t_hist").num_rows > 0 and not pc.any(_delta(cfg, name, "t_hist")["_is_current"]).as_py()
    assert pc.all(_delta(cfg, name, "t_soft")["_cdc_deleted"]).as_py()


def test_metadata_columns_without_a_change_feed_equal_the_binlog(mariadb, db, make_config, tmp_path):
    """A ``current`` table with metadata columns and no change feed (its batch folds as the
    default's; the stamps come per row event): each row stamped with its key's last change."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t_cur (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(30))")
        cur.execute("INSERT INTO t_cur SELECT seq, seq % 7, CONCAT('s', seq) FROM seq_1_to_120")
    cfg = make_config(name, chunk_size=50, stream=STREAM, source={"snapshot": {"runner": "local"}},
                      sink={"metadata_columns": ["_cdc_ts", "_cdc_position"]})
    config, logs = write_config_file(cfg, tmp_path / "binlake.yaml"), tmp_path / "logs"
    assert run_stream(config, logs, command="snapshot", password=mariadb.password).proc.returncode == 0
    with conn.cursor() as cur:
        start = master_position(cur)
        rng = random.Random(SEED)
        for i in range(150):
            key = rng.randint(1, 200)
            cur.execute("BEGIN")
            cur.execute(f"INSERT IGNORE INTO t_cur SET id = {key}, v = {i}, s = 'i{i}'")
            cur.execute(f"UPDATE t_cur SET v = v + 1 WHERE id BETWEEN {key} AND {key + rng.randint(0, 6)}")
            if i % 3 == 0:
                cur.execute(f"DELETE FROM t_cur WHERE id = {rng.randint(1, 200)}")
            cur.execute("COMMIT")
            if i % 40 == 0:
                time.sleep(1.1)  # changes in several seconds: several times
    done = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert done.proc.returncode == 0, done.describe()
    assert_equal(cfg, [f"{name}.t_cur"])
    _check_current(cfg, name, table_changes(Path(mariadb.base_dir) / "data", start, name, "t_cur"))


def test_a_table_made_for_another_mode_is_refused(mariadb, db, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO t VALUES (1, 1)")
    cfg = make_config(name, source={"snapshot": {"runner": "local"}})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    assert run_stream(config, tmp_path / "logs", command="snapshot", password=mariadb.password).proc.returncode == 0
    history = make_config(name, source={"snapshot": {"runner": "local"}}, sink={"table_modes": {".*": "history"}},
                          pipeline={"name": cfg.pipeline.name})
    config = write_config_file(history, tmp_path / "history.yaml")
    s = run_stream(config, tmp_path / "logs", "--until", "now", password=mariadb.password)
    assert s.proc.returncode == 2, s.describe()
    assert "made for another mode" in s.stderr


def test_oracle_reads_what_the_server_wrote(mariadb, db):
    """The oracle itself: a known sequence of changes, read back from the binlog files."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(10))")
        start = master_position(cur)
        cur.execute("INSERT INTO t VALUES (1, 10, 'a'), (2, 20, NULL)")
        cur.execute("UPDATE t SET v = v + 1")
        cur.execute("DELETE FROM t WHERE id = 1")
    changes = table_changes(Path(mariadb.base_dir) / "data", start, name, "t")
    assert [(c.op, c.image) for c in changes] == [("c", (1, 10, "a")), ("c", (2, 20, None)), ("u", (1, 11, "a")),
                                                  ("u", (2, 21, None)), ("d", (1, 11, "a"))]
    seqs = [c.seq for c in changes]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5 and all(c.gtid for c in changes)
    assert changes[0].seq & 0xFFF == 0 and changes[1].seq & 0xFFF == 1  # rows of one event: their index
    with conn.cursor() as cur:
        cur.execute("SELECT UNIX_TIMESTAMP()")
        now = cur.fetchone()[0]
    assert all(abs(c.ts - now) < 60 for c in changes)
    assert subprocess.run(["mariadb-binlog", "--version"], capture_output=True).returncode == 0
    assert isinstance(start, BinlogPosition)
