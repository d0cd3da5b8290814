"""Parallel decoding of a backlog (``source.parallel_decode``; pipelines/stream/reader.py,
cdc_core/binlog/ranges.py) against a real MariaDB:

- the backlog's cuts are transaction ends strictly inside the range, increasing;
- the parallel reader gives exactly the records of one reader over the same range (row
  events, transaction ends, statements, positions, values), across transactions of
  several tables, a DDL, a non-transactional table's COMMIT and a binlog rotation;
- a chunk reader's server_id used by another replica: one reader reads the backlog, and
  the other replica keeps its connection;
- the stream catches a backlog up with two workers: Delta equals MySQL;
- SIGKILLed again and again while catching up with two workers, then resumed: Delta
  equals MySQL, nothing applied twice, each table's commits strictly increasing.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re

from cdc_core.binlog.events import Heartbeat, ReaderEnd, ReaderError, RowsEvent, TableLayout, TransactionEnd
from cdc_core.binlog.ranges import cuts
from cdc_core.binlog.reader import ReaderSpec
from cdc_core.config import ParallelDecodeConfig
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.source.connection import connection_settings
from pipelines.stream import StreamEngine
from pipelines.stream.reader import ParallelReader, ReaderProcess
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, snapshot, write_config_file
from tests.test_stream_crash import (
    SEED,
    STREAM,
    Writer,
    assert_commits_strictly_increase,
    create_tables,
    kill_at_random,
    prove_after_kills,
    replica_registered,
    wait_for,
    workload_keys,
)

SMALL_CHUNKS = {"workers": 2, "min_backlog_mb": 0, "chunk_mb": 0.1}  # every backlog, in chunks of ~100 kB
STALLED_TAKES = 120  # a reader giving nothing for this many one-second takes in a row has stalled


def _history(conn) -> tuple[BinlogPosition, BinlogPosition]:
    """A binlog range with transactions of one and of several tables, updates and deletes, a
    DDL, a non-transactional table (its transactions end in a COMMIT query) and a rotation."""
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, n INT NOT NULL, s VARCHAR(40))")
        cur.execute("CREATE TABLE b (id BIGINT PRIMARY KEY, v DECIMAL(12,2))")
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, s VARCHAR(20)) ENGINE=MyISAM")
        start = master_position(cur)
        rng = random.Random(SEED)
        for i in range(60):
            conn.begin()
            rows = ",".join(f"({i * 50 + j}, {j}, 'r{i}-{j}')" for j in range(50))
            cur.execute(f"INSERT INTO a (id, n, s) VALUES {rows}")
            cur.execute("UPDATE a SET n = n + 1 WHERE id BETWEEN %s AND %s", (rng.randrange(i * 50 + 1), i * 50))
            cur.execute("INSERT INTO b VALUES (%s, %s)", (i, i * 1.25))
            cur.execute("DELETE FROM a WHERE id = %s", (rng.randrange(i * 50 + 1),))
            conn.commit()
            cur.execute("INSERT INTO m VALUES (%s, %s)", (i, f"m{i}"))  # autocommit: BEGIN ... COMMIT queries
            if i == 20:
                cur.execute("ALTER TABLE a ADD COLUMN t VARCHAR(10) DEFAULT 'x'")
            if i == 40:
                cur.execute("FLUSH BINARY LOGS")
        end = master_position(cur)
    return start, end


def _records(reader, start: BinlogPosition) -> list:
    """Every record ``reader`` gives from ``start`` up to and including its ``ReaderEnd``."""
    reader.start(start, None)
    records, idle = [], 0
    try:
        while not records or not isinstance(records[-1], ReaderEnd):
            got = reader.take(1.0)
            idle = 0 if got else idle + 1
            assert idle < STALLED_TAKES, f"the reader stalled after {len(records)} records"
            assert not any(isinstance(r, ReaderError) for r in got), got
            records += got
    finally:
        reader.stop()
    return records


def _resolved(records: list) -> list:
    """The records without layouts (ids differ between readers) and heartbeats (timing):
    each row event carries its layout's schema in place of the id."""
    layouts, out = {}, []
    for r in records:
        if isinstance(r, TableLayout):
            assert r.id not in layouts, f"layout id {r.id} given twice"
            layouts[r.id] = r.schema
        elif isinstance(r, RowsEvent):
            out.append((r.table, r.op, r.position, layouts[r.layout], r.rows, r.timestamp, r.size, r.gtid))
        elif not isinstance(r, Heartbeat):
            out.append(r)
    return out


def test_cuts_and_the_parallel_reader_give_the_single_readers_records(db, make_config):
    name, conn = db
    cfg = make_config(name)
    start, end = _history(conn)
    with conn.cursor() as cur:
        found = cuts(cur, start, end, 100_000)
    assert len(found) >= 4 and len({p.file for p in found}) == 2, found  # chunks on both sides of the rotation
    assert found == sorted(found) and len(set(found)) == len(found) and start < found[0] and found[-1] < end

    spec = ReaderSpec(connection_settings(cfg), cfg.source.server_id, start, None, end, (rf"{name}\..*",), ())
    single = _records(ReaderProcess(spec), start)
    ends = {r.position for r in single if isinstance(r, TransactionEnd)}
    assert set(found) <= ends, "a cut is not the end of a transaction"

    parallel = _records(ParallelReader(spec, ParallelDecodeConfig(**SMALL_CHUNKS)), start)
    assert _resolved(parallel) == _resolved(single)
    # The comparison crossed seams: each chunk reported the layouts it used again.
    layouts = [r for r in parallel if isinstance(r, TableLayout)]
    assert len(layouts) > len([r for r in single if isinstance(r, TableLayout)])
    assert {r.op for r in single if isinstance(r, RowsEvent)} == {"c", "u", "d"}
    assert any(getattr(r, "sql", "").startswith("ALTER TABLE") for r in single)


def test_a_chunk_readers_server_id_in_use_leaves_one_reader(mariadb, db, make_config):
    name, conn = db
    cfg = make_config(name)
    spec = ReaderSpec(connection_settings(cfg), cfg.source.server_id, BinlogPosition("", 0), None, None,
                      (rf"{name}\..*",), ())
    with conn.cursor() as cur:
        other = ReaderProcess(dataclasses.replace(spec, server_id=cfg.source.server_id + 3, report_as="other"))
        other.start(master_position(cur), None)
    try:
        wait_for(lambda: replica_registered(mariadb, cfg.source.server_id + 3), 30, "the other replica")
        start, end = _history(conn)
        reader = ParallelReader(dataclasses.replace(spec, until=end), ParallelDecodeConfig(**SMALL_CHUNKS))
        reader.start(start, None)
        assert not reader._reading and reader._live.pid is not None  # no chunks: one reader from start
        reader.stop()
        assert not any(isinstance(r, ReaderError) for r in other.take(0.5))
        assert replica_registered(mariadb, cfg.source.server_id + 3)
    finally:
        other.stop()


def _backlog(mariadb, db, spark, make_config, seed: int, rounds: int, steps: int):
    """Tables snapshotted with two-worker parallel decoding configured, then a backlog of
    ``rounds`` large transactions, each followed by ``steps`` random ones: (cfg, names, writer)."""
    name, conn = db
    create_tables(conn)
    cfg = make_config(name, chunk_size=1000, stream=STREAM,
                      source={**workload_keys(name, chunk_size=1000), "parallel_decode": SMALL_CHUNKS})
    names = [f"{name}.acct", f"{name}.orders", f"{name}.tags", f"{name}.events"]
    snapshot(cfg, spark)
    writer = Writer(mariadb, name, seed)
    with mariadb.connect(name) as c, c.cursor() as cur:
        for _ in range(rounds):
            writer.big_transaction(cur)
            for _ in range(steps):
                writer.step(cur)
    return cfg, names, writer


def test_catch_up_with_two_workers(mariadb, db, spark, make_config, caplog):
    cfg, names, _ = _backlog(mariadb, db, spark, make_config, SEED + 4, 4, 40)
    with caplog.at_level(logging.INFO, logger="pipelines.stream.reader"):
        summary = StreamEngine(cfg, until_now=True).run()
    planned = [int(m.group(1)) for m in map(re.compile(r"in (\d+) chunks, 2 decoded at once").search,
                                                  caplog.messages) if m]
    assert planned and planned[0] >= 3, caplog.messages  # the backlog was decoded in several chunks
    assert summary.changes > 0 and summary.reconnects == 0
    assert_equal(cfg, names)
    assert all(assert_commits_strictly_increase(cfg, n) for n in names)
    assert_changes_counted(cfg, names)  # each binlog change committed once, across the chunks


def test_sigkill_while_catching_up_with_two_workers(mariadb, db, spark, make_config, tmp_path):
    cfg, names, writer = _backlog(mariadb, db, spark, make_config, SEED + 5, 8, 30)
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    modes = kill_at_random(cfg, config, names, tmp_path / "logs", random.Random(SEED + 6), 8, mariadb.password)
    prove_after_kills(cfg, config, names, tmp_path / "logs", mariadb.password, modes, writer)
