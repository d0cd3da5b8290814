"""Failover to a replica by GTID (cdc_core/offset/failover.py, pipelines/stream/failover_start.py), on a
real primary and replica MariaDB (GTID replication with ``log_slave_updates``, the replica
logging under another base name with binlog numbers behind the primary's):

- the stream's checkpoint is inside a 3,000-row transaction and the tables' own Delta
  commits are past it (the state a crash between table commits and the checkpoint
  leaves); the primary is SIGKILLed; binlake, pointed at the replica, translates the
  checkpoint and the tables' offsets by GTID and ends with Delta equal to the replica.
  A keyless table (whole rows, duplicates counted) makes any change applied twice show as
  an extra row, every table's stream offsets must strictly increase across the
  failover, and every change from the stream's start on the primary to its end on the replica
  is counted once, per table and per key (tests/change_count.py: the primary's offsets found
  in the replica's binlog by GTID);
- a table added to the capture after the failover is snapshotted (Spark) with watermarks
  in the new server's positions, and streamed on from there;
- a replica that lacks transactions the checkpoint has (it lagged): exit 2 with a
  message saying so, nothing written; once it has caught up the same command succeeds, every
  change counted once.
"""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from cdc_core.config import BinlakeConfig
from cdc_core.offset.position import master_position
from cdc_core.offset.stream_offset import StreamOffset
from devtools.local_mariadb import LocalMariaDB
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import last_stream_offset
from pipelines.lake.tables import table_uri
from pipelines.snapshot.driver import SnapshotJob
from pipelines.stream.engine import StreamEngine
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, write_config_file
from tests.test_stream_crash import assert_commits_strictly_increase, own_config, run_stream

NAMES = ["shop.t", "shop.k", "shop.a"]
CAPTURED = [r"shop\.t", r"shop\.k", r"shop\.a"]  # shop.x joins after the failover
# Keyless tables keep copies: a change applied twice shows as an extra row. The CLI's checks want chunk keys.
KEYLESS = {"snapshot": {"chunk_key_columns": {"shop.k": "n", "shop.a": "n"}}}
BIG = 3000  # rows of the transaction the checkpoint falls inside


@pytest.fixture
def pair(tmp_path):
    """A primary (5 binlog rotations ahead) and its replica, replicating by GTID."""
    primary = LocalMariaDB(server_id=1, base_dir=tmp_path / "primary").start()
    replica = LocalMariaDB(server_id=2, base_dir=tmp_path / "replica", extra_args=(
        "--log-slave-updates", f"--log-bin={tmp_path / 'replica' / 'data' / 'replica-bin'}")).start()
    try:
        with primary.connect() as c, c.cursor() as cur:
            for _ in range(5):
                cur.execute("FLUSH BINARY LOGS")
            cur.execute("SELECT @@gtid_binlog_pos")
            pos = cur.fetchone()[0]
        with replica.connect() as c, c.cursor() as cur:
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (pos,))
            cur.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
                        f"MASTER_USER='root', MASTER_PASSWORD='{primary.password}', MASTER_USE_GTID=slave_pos")
            cur.execute("START SLAVE")
        with primary.connect() as c, c.cursor() as cur:
            cur.execute("CREATE DATABASE shop DEFAULT CHARSET utf8mb4")
            cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, counter INT NOT NULL DEFAULT 0, v VARCHAR(40))")
            cur.execute("CREATE TABLE shop.k (n INT NOT NULL, v VARCHAR(40))")
            cur.execute("CREATE TABLE shop.a (n INT NOT NULL, v VARCHAR(40))")
            cur.execute("CREATE TABLE shop.x (id INT PRIMARY KEY, v VARCHAR(40))")
            cur.executemany("INSERT INTO shop.x VALUES (%s, 'before')", [(i,) for i in range(500)])
        caught_up(primary, replica)
        yield primary, replica
    finally:
        replica.cleanup()
        primary.cleanup()


def caught_up(primary: LocalMariaDB, replica: LocalMariaDB) -> None:
    with primary.connect() as c, c.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        pos = cur.fetchone()[0]
    with replica.connect() as c, c.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, 60)", (pos,))
        assert cur.fetchone()[0] == 0, "the replica did not catch up"


def writes(server: LocalMariaDB, first: int, count: int, *, big: bool = False) -> None:
    """Small transactions on both tables; with ``big``, one transaction of BIG rows between them."""
    with server.connect("shop") as c, c.cursor() as cur:
        for i in range(first, first + count):
            cur.execute("INSERT INTO t VALUES (%s, 0, %s)", (i, f"r{i}"))
            cur.execute("INSERT INTO k VALUES (%s, 'same')", (i % 5,))  # equal rows: copies counted
            cur.execute("INSERT INTO a VALUES (%s, 'same')", (i % 5,))
        cur.execute("UPDATE t SET counter = counter + 1 WHERE id %% 3 = 0 AND id >= %s", (first,))
        if big:
            c.begin()
            for table in ("k", "a", "k", "a"):  # the tables' row events interleave
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(i % 7, "big") for i in range(BIG // 4)])
            cur.execute("UPDATE t SET counter = counter + 1, v = 'big' WHERE id >= %s", (first,))
            cur.executemany("INSERT INTO t VALUES (%s, 0, 'big')",
                            [(i,) for i in range(first + 100_000, first + 100_000 + BIG // 2)])
            c.commit()
        cur.execute("DELETE FROM k WHERE n = 1 LIMIT 2")
        cur.execute("DELETE FROM a WHERE n = 2 LIMIT 2")


def stream_start(primary: LocalMariaDB) -> StreamOffset:
    """The primary's binlog end as an offset with its GTID (a stream starting there in mode
    latest records none), so that the change count finds it in the replica's binlog."""
    with primary.connect() as c, c.cursor() as cur:
        end = master_position(cur)
        cur.execute("SELECT @@gtid_binlog_pos")
        (gtid,) = cur.fetchone()
    assert "," not in gtid, gtid  # one replication domain
    return StreamOffset(end, end, gtid=gtid, server_id=1)


def on(cfg: BinlakeConfig, server: LocalMariaDB) -> BinlakeConfig:
    """``cfg`` pointed at ``server`` (the config change a user makes after a failover)."""
    return cfg.model_copy(update={"source": cfg.source.model_copy(update={"port": server.port})})


def on_tables(cfg: BinlakeConfig, tables: list[str]) -> BinlakeConfig:
    return cfg.model_copy(update={"source": cfg.source.model_copy(update={"tables": tables})})


def delta_versions(cfg: BinlakeConfig) -> dict[str, int]:
    return {n: DeltaTable(table_uri(cfg.sink.path, n)).version() for n in NAMES}


def test_failover_inside_a_transaction_with_tables_ahead(pair, spark, tmp_path):
    primary, replica = pair
    cfg = on_tables(own_config(tmp_path, primary, "shop", 4242, stream={"max_batch_rows": 400}, source=KEYLESS),
                    CAPTURED)
    start = stream_start(primary)
    StreamEngine(cfg, until_now=True).run()  # the start: baselines and a first checkpoint
    writes(primary, 1, 50, big=True)
    # Stop inside the big transaction: every table at the checkpoint, which is inside it.
    engine = StreamEngine(cfg, until_now=True,
                          progress=lambda _s, o: o.inside_transaction and engine.request_stop())
    engine.run()
    store = ControlStore.of(cfg)
    ckpt = store.checkpoint().offset
    assert ckpt.inside_transaction and ckpt.server_id == 1 and ckpt.txn_gtid, ckpt
    # Then shop.a alone streams to the end (its own offset ahead) and the checkpoint is put back:
    # the state a crash between one table's commit and another's, before the checkpoint, leaves.
    StreamEngine(on_tables(cfg, [r"shop\.a"]), until_now=True).run()
    store.save_checkpoint(ckpt, "streaming", 0)
    assert ControlStore.of(cfg).checkpoint().offset == ckpt
    own = {n: last_stream_offset(DeltaTable(table_uri(cfg.sink.path, n)), cfg.pipeline.name) for n in NAMES}
    assert own["shop.a"].applied > ckpt.applied >= own["shop.k"].applied, own
    writes(primary, 1000, 30)  # not streamed before the failover
    caught_up(primary, replica)
    primary._proc.kill()  # the primary dies
    primary._proc.wait()

    moved = on(cfg, replica)
    config = write_config_file(moved, tmp_path / "replica.yaml")
    s = run_stream(config, tmp_path / "logs", "--until", "now", password=replica.password)
    assert s.proc.returncode == 0, s.describe()
    assert "failover" in s.stderr + s.stdout, s.describe()
    cp = ControlStore.of(moved).checkpoint().offset
    assert cp.server_id == 2 and cp.applied.base > 0 and cp.applied.file.startswith("replica-bin")
    assert_equal(moved, NAMES)
    for n in NAMES:
        assert assert_commits_strictly_increase(moved, n) > 0
    assert_changes_counted(moved, NAMES, start=start)
    # The replica goes on: a restart on it is an ordinary restart, and shop.x joins by a snapshot
    # whose watermarks are positions of the new server (they carry its base).
    with replica.connect("shop") as c, c.cursor() as cur:
        cur.execute("UPDATE x SET v = 'on the replica' WHERE id < 100")
    wider = on_tables(moved, [*CAPTURED, r"shop\.x"])
    SnapshotJob(wider, spark, only={"shop.x"}).run()
    marks = [r.high_watermark for r in ControlStore.of(wider).chunk_records() if r.table == "shop.x"]
    assert marks and all(m.base == cp.applied.base for m in marks), marks
    writes(replica, 2000, 20)
    with replica.connect("shop") as c, c.cursor() as cur:
        cur.execute("DELETE FROM x WHERE id >= 400")
    config = write_config_file(wider, tmp_path / "wider.yaml")
    s = run_stream(config, tmp_path / "logs", "--until", "now", password=replica.password)
    assert s.proc.returncode == 0, s.describe()
    assert "failover" not in s.stderr, s.describe()
    assert_equal(wider, [*NAMES, "shop.x"])


def test_lagging_replica_is_refused_until_it_caught_up(pair, tmp_path):
    primary, replica = pair
    cfg = on_tables(own_config(tmp_path, primary, "shop", 4243, source=KEYLESS), CAPTURED)
    start = stream_start(primary)
    StreamEngine(cfg, until_now=True).run()
    with replica.connect() as c, c.cursor() as cur:
        cur.execute("STOP SLAVE SQL_THREAD")  # the replica falls behind
    writes(primary, 1, 40)
    StreamEngine(cfg, until_now=True).run()  # binlake has changes the replica lacks
    before = delta_versions(cfg)

    moved = on(cfg, replica)
    config = write_config_file(moved, tmp_path / "replica.yaml")
    s = run_stream(config, tmp_path / "logs", "--until", "now", password=replica.password)
    assert s.proc.returncode == 2, s.describe()
    lines = [line for line in s.stderr.splitlines() if line.strip()]
    assert "lagged" in lines[-1] and "Traceback" not in s.stderr, s.describe()
    assert delta_versions(cfg) == before  # nothing written
    assert ControlStore.of(cfg).checkpoint().offset.server_id == 1

    with replica.connect() as c, c.cursor() as cur:
        cur.execute("START SLAVE SQL_THREAD")
    caught_up(primary, replica)
    time.sleep(0.1)
    s = run_stream(config, tmp_path / "logs", "--until", "now", password=replica.password)
    assert s.proc.returncode == 0, s.describe()
    assert_equal(moved, NAMES)
    assert_changes_counted(moved, NAMES, start=start)
