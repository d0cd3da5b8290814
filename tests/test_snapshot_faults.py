"""Network faults during the snapshot, injected by a TCP fault proxy (tests/fault_proxy.py)
between binlake and MariaDB: a connection dropped inside a chunk read, an answer cut in the
middle of a packet, a fault between a chunk's watermarks (at the high watermark, and a stalled
binlog read of the window), a bulk read that stalls (a Spark task is cancelled; a local
runner's thread is left behind). binlake retries the chunk group with
backoff (a group is idempotent until committed) and Delta ends equal to MySQL; every test
asserts its faults were injected. An outage longer than the retry budget fails the run (exit 1,
the cause named) and a re-run resumes from the committed chunks."""

from __future__ import annotations

import random
import threading
import time

import pytest

from cdc_core.retry import RetryPolicy
from cdc_core.source.connection import connect, connection_settings
from pipelines.snapshot.driver import SnapshotJob
from tests.fault_proxy import Rule, via
from tests.helpers import assert_equal, replay_handoff, write_config_file

FAST = RetryPolicy(delays=(0.2, 0.5), budget_seconds=60, stall_seconds=30, read_timeout=4)


def _table(conn, rows: int = 3000) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(200))")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, i, "x" * 150) for i in range(1, rows + 1)])


def _chunk_select(name: str) -> bytes:
    return f"FROM `{name}`.`t` WHERE".encode()  # only the chunk reads' SELECT has this


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_dropped_and_cut_chunk_reads_are_retried(db, spark, make_config, proxy, runner):
    name, conn = db
    _table(conn)
    cfg = make_config(name, chunk_size=100, source={"snapshot": {"chunk_size": 100, "runner": runner}})
    drop = proxy.add(Rule(_chunk_select(name), "drop", skip=1))  # the second group's SELECT never arrives
    cut = proxy.add(Rule(_chunk_select(name), "cut", skip=2))  # the third's answer stops mid-packet
    summary = SnapshotJob(via(cfg, proxy), spark, retry=FAST).run()
    assert (drop.fired, cut.fired) == (1, 1)
    assert summary.retries >= 2
    assert summary.tables[0].rows_written == 3000
    assert_equal(cfg, [f"{name}.t"])


def _writes(settings, database: str, stop: threading.Event, done: list) -> None:
    rng = random.Random(7)
    with connect(settings, database=database) as c, c.cursor() as cur:
        while not stop.is_set():
            k = rng.randrange(1, 3000)
            cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (k,))
            if rng.random() < 0.2:
                cur.execute("DELETE FROM t WHERE id = %s", (rng.randrange(1, 3000),))
                cur.execute("INSERT IGNORE INTO t VALUES (%s, 0, 'new')", (rng.randrange(1, 3000),))
            done.append(1)


def test_faults_between_watermarks_under_writes(db, spark, make_config, proxy):
    """Dropped at the high watermark, and the binlog read of the window (LW, HW] stalled past the
    read timeout: the group is read again, the window read resumes; Delta plus the binlog
    through the hand-off filter equals MySQL."""
    name, conn = db
    _table(conn)
    cfg = make_config(name, chunk_size=100)
    at_hw = proxy.add(Rule(b"SHOW MASTER STATUS", "drop", skip=1))  # the first group's HW query
    window = proxy.add(Rule(b"binlog.0", "stall", seconds=10))  # COM_BINLOG_DUMP names the binlog file
    stop, done = threading.Event(), []
    writer = threading.Thread(target=_writes, args=(connection_settings(cfg), name, stop, done))
    writer.start()
    try:
        summary = SnapshotJob(via(cfg, proxy), spark, retry=FAST).run()
    finally:
        stop.set()
        writer.join()
    assert len(done) > 50, "the writer barely ran"
    assert at_hw.fired == 1 and window.fired == 1
    # The HW drop fails the group (retried by binlake); python-mysql-replication itself reconnects
    # after the stalled window read times out and reads on from its last event.
    assert summary.retries >= 1
    states = replay_handoff(cfg, [f"{name}.t"])
    with conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        want = dict(cur.fetchall())
    got = {k[0]: row[1] for k, row in states[f"{name}.t"].items()}
    assert got == want


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_stalled_bulk_read_is_cancelled_and_retried(db, spark, make_config, proxy, runner):
    name, conn = db
    _table(conn, 1000)
    cfg = make_config(name, chunk_size=100, source={"snapshot": {"chunk_size": 100, "runner": runner}})
    stall = proxy.add(Rule(_chunk_select(name), "stall", seconds=60))
    policy = RetryPolicy(delays=(0.2,), budget_seconds=60, stall_seconds=5, read_timeout=4)
    summary = SnapshotJob(via(cfg, proxy), spark, retry=policy).run()
    assert stall.fired == 1 and summary.retries >= 1
    assert_equal(cfg, [f"{name}.t"])


def test_outage_beyond_the_budget_fails_then_a_rerun_resumes(db, spark, make_config, proxy, tmp_path, capsys,
                                                            monkeypatch):
    """Through the CLI (in-process, sharing the test's Spark session): the outage begins at the
    third group's SELECT and outlasts the budget: exit 1, one line naming the cause. With the
    source back, the same command resumes from the committed groups."""
    from pipelines import cli
    from pipelines.snapshot import driver as snapshot_driver

    name, conn = db
    _table(conn)
    cfg = make_config(name, chunk_size=100)
    monkeypatch.setattr(snapshot_driver, "RetryPolicy", lambda: RetryPolicy(delays=(0.3,), budget_seconds=3,
                                                                            stall_seconds=30, read_timeout=4))
    monkeypatch.setenv("BINLAKE_TEST_PASSWORD", cfg.source.password.get_secret_value())
    path = write_config_file(via(cfg, proxy), tmp_path / "binlake.yaml")
    outage = proxy.add(Rule(_chunk_select(name), "outage", skip=2))  # after the first groups
    assert cli.main(["snapshot", "-c", path]) == 1
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error")]
    assert outage.fired == 1 and len(lines) == 1, err
    assert "kept failing for over 3 s" in lines[0] and "resume" in lines[0]
    assert any(cause in lines[0] for cause in ("OperationalError 20", "bulk read failed", "ConnectionResetError"))
    assert "Traceback" not in err

    proxy.end_outage()
    assert cli.main(["snapshot", "-c", path]) == 0
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if f"{name}.t" in x)
    chunks, read_now = (int(v) for v in row.split("│")[2:4])
    assert 0 < read_now < chunks  # resumed: the groups committed before the outage were not read again
    assert_equal(cfg, [f"{name}.t"])


def test_groups_never_bridge_committed_chunks():
    """A failed run leaves holes (groups run in parallel and commit in any order); a resumed run
    groups the chunks still pending, and a group read as one range must not span a hole."""
    from cdc_core.chunks.planning import Chunk
    from pipelines.snapshot.plan import chunk_groups

    pending = [Chunk("d.t", i, "id", i * 10, i * 10 + 10) for i in (0, 1, 2, 5, 6, 7, 8, 9, 12)]
    groups = chunk_groups(pending, 4)
    assert [[c.index for c in g] for g in groups] == [[0, 1, 2], [5, 6, 7, 8], [9], [12]]
    assert all(g[-1].index - g[0].index == len(g) - 1 for g in groups)


def test_source_server_killed_mid_snapshot(spark, tmp_path):
    """MariaDB SIGKILLed after the first chunk group's commit and started again on the same data
    directory a moment later: the groups that failed are retried with backoff, and the snapshot
    ends with Delta equal to MySQL."""
    from devtools.local_mariadb import LocalMariaDB
    from tests.test_stream_crash import own_config

    server = LocalMariaDB(server_id=1, base_dir=tmp_path / "mariadb").start()
    try:
        with server.connect() as c, c.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("USE shop")
            _table(c, 6000)
        cfg = own_config(tmp_path, server, "shop", 4545, source={"snapshot": {"chunk_size": 100}},
                         pipeline={"parallelism": 2})
        killed = []

        def restart() -> None:
            time.sleep(1.5)
            server.start()

        def kill_once(done: int, total: int, rows: int) -> None:
            if done and not killed and done < total:
                server._proc.kill()  # SIGKILL: the server crashes between and inside chunk reads
                server._proc.wait()
                killed.append(done)
                threading.Thread(target=restart, daemon=True).start()

        summary = SnapshotJob(cfg, spark, kill_once, retry=FAST).run()
        assert killed, "the server was not killed mid-snapshot"
        assert summary.retries >= 1
        assert summary.tables[0].rows_written == 6000
        assert_equal(cfg, ["shop.t"])
    finally:
        server.cleanup()
