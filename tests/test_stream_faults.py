"""Network faults during the stream, injected by the TCP fault proxy (tests/fault_proxy.py)
between binlake and MariaDB: the binlog connection stalled (no byte for longer than the
silence timeout: the server sends heartbeats when idle, so silence is a stalled link), the
binlog answer cut in the middle of a packet (a large row), every connection dropped in the
middle of a large transaction, and an outage longer than the retry budget (the run fails
naming the cause; a re-run resumes). Every test asserts its faults were injected and ends
with Delta equal to MySQL row by row and every binlog change counted once, per table and per
key (tests/change_count.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from cdc_core.errors import TerminalError
from cdc_core.retry import RetryPolicy
from cdc_core.source.connection import connect, connection_settings
from pipelines.stream import StreamEngine
from pipelines.stream.reader import cpu_ticks
from tests.change_count import assert_changes_counted
from tests.fault_proxy import Rule, via, wait_until
from tests.helpers import EngineThread, assert_equal, diff_tables, snapshot

FAST = RetryPolicy(delays=(0.2, 0.5), budget_seconds=60, binlog_silence_seconds=2)
BINLOG_DUMP = b"binlog.0"  # COM_BINLOG_DUMP names the binlog file to read from


def _setup(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, blob_ LONGBLOB)")
        cur.execute("INSERT INTO t SELECT seq, seq, NULL FROM seq_1_to_500")
    cfg = make_config(name, stream={"max_batch_rows": 200})
    snapshot(cfg, spark)
    return name, conn, cfg


def _backlog(conn, big_rows: int = 0) -> None:
    """Changes for the stream to read: updates, deletes, inserts, one multi-statement
    transaction, and ``big_rows`` rows of 1 MiB each."""
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET v = v + 1 WHERE id % 3 = 0")
        cur.execute("DELETE FROM t WHERE id % 17 = 0")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t SELECT 1000 + seq, seq, NULL FROM seq_1_to_3000")
        cur.execute("UPDATE t SET v = -v WHERE id > 2000")
        cur.execute("COMMIT")
        for i in range(big_rows):
            cur.execute("INSERT INTO t VALUES (%s, 0, REPEAT('x', 1048576))", (10_000 + i,))


def test_stalled_binlog_connection_is_read_again(db, spark, make_config, proxy):
    """The binlog answer held back far longer than the silence timeout: without a read timeout
    the stream would wait for the whole stall; it reconnects instead and catches up."""
    name, conn, cfg = _setup(db, spark, make_config)
    _backlog(conn)
    stall = proxy.add(Rule(BINLOG_DUMP, "stall", seconds=120, times=1))
    engine = StreamEngine(via(cfg, proxy), until_now=True, retry=FAST)
    engine.run()
    # The first answer is still held back (120 s): the stream asked for the binlog again and
    # read it on a new connection (reconnected by the binlog client or by the engine).
    assert stall.fired == 1 and stall.seen >= 2
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(cfg, [f"{name}.t"])


def test_cpu_ticks_count_what_a_process_used():
    """What tells a stuck reader from a busy one: the ticks grow while a process computes; a
    process that is gone has none."""
    before = cpu_ticks(os.getpid())
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    assert cpu_ticks(os.getpid()) >= before + 20  # 0.3 s at 100 ticks a second, less a tick or so
    done = subprocess.Popen(["true"])
    done.wait()
    assert cpu_ticks(done.pid) is None


def test_stuck_reader_process_is_ended_and_the_stream_reads_on(db, spark, make_config):
    """The binlog reader process alive but stuck (stopped by SIGSTOP: it sends nothing and uses
    no CPU, as one hung on a lock held at its fork would): the engine ends it once it has been
    silent for twice the silence timeout and reads again from its checkpoint, instead of waiting
    for it forever; what was written meanwhile reaches Delta, each change once."""
    name, conn, cfg = _setup(db, spark, make_config)
    engine = StreamEngine(cfg, retry=FAST)
    thread = EngineThread(engine)
    thread.start()
    try:
        thread.wait_streaming()
        stuck = engine.reader.pid
        os.kill(stuck, signal.SIGSTOP)
        _backlog(conn)
        assert wait_until(lambda: engine.reader.pid not in (None, stuck), 60), "the stuck reader was never replaced"
        assert wait_until(lambda: diff_tables(cfg, [f"{name}.t"])[0].equal, 60, interval=0.5)
    finally:
        summary = thread.stop()
    assert summary.reconnects >= 1
    assert not os.path.exists(f"/proc/{stuck}"), "the stuck reader process was left behind"
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(cfg, [f"{name}.t"])


def test_binlog_answer_cut_mid_packet(db, spark, make_config, proxy):
    """The binlog answer cut after half of its first bytes (1 MiB rows in the backlog): the
    stream reads again from its checkpoint, nothing lost or applied twice."""
    name, conn, cfg = _setup(db, spark, make_config)
    _backlog(conn, big_rows=4)
    cut = proxy.add(Rule(BINLOG_DUMP, "cut", times=1))
    StreamEngine(via(cfg, proxy), until_now=True, retry=FAST).run()
    assert cut.fired == 1 and cut.seen >= 2  # asked for again after the cut
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(cfg, [f"{name}.t"])


def test_connections_dropped_while_streaming_transactions(db, spark, make_config, proxy):
    """Every connection dropped three times while a writer commits transactions of 50-400
    rows and the stream reads them live: it reconnects each time, Delta equals MySQL."""
    name, conn, cfg = _setup(db, spark, make_config)
    stop, errors, drops = threading.Event(), [], []

    def writer() -> None:
        try:
            with connect(connection_settings(cfg), database=name) as c, c.cursor() as cur:
                base = 100_000
                while not stop.is_set():
                    n = 50 + base % 350
                    cur.execute("BEGIN")
                    cur.execute(f"INSERT INTO t SELECT {base} + seq, seq, NULL FROM seq_1_to_{n}")
                    cur.execute(f"UPDATE t SET v = v + 1 WHERE id BETWEEN {base} AND {base + n // 2}")
                    cur.execute("COMMIT")
                    base += 1000
                    stop.wait(0.05)  # a pace the stream keeps up with: a drop lands on a link in use
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def dropper() -> None:
        for i in range(3):
            # Each drop once the stream reads again (its i + 1-th binlog request) and has read a while.
            if not wait_until(lambda i=i: requests.seen > i, timeout=30) or stop.wait(1):
                return
            dropped = proxy.drop_all()
            # No link open at this instant (a reconnect between two connections): a drop cut nothing,
            # so it is made again once one is.
            while not dropped and not stop.wait(0.2):
                dropped = proxy.drop_all()
            drops.append(dropped)

    requests = proxy.add(Rule(BINLOG_DUMP, "stall", times=0))  # never fires: counts the binlog requests
    threads = [threading.Thread(target=writer, daemon=True), threading.Thread(target=dropper, daemon=True)]
    for t in threads:
        t.start()
    try:
        engine = StreamEngine(via(cfg, proxy), retry=FAST)
        threading.Thread(target=lambda: (wait_until(lambda: len(drops) == 3 and requests.seen >= 4, timeout=60),
                                         engine.request_stop()), daemon=True).start()
        engine.run()
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert len(drops) == 3 and all(n >= 1 for n in drops), drops
    assert requests.seen >= 4  # the binlog read again after each drop
    StreamEngine(via(cfg, proxy), until_now=True, retry=FAST).run()  # what the writer did after the stop
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(cfg, [f"{name}.t"])


def test_outage_longer_than_the_budget_fails_naming_the_cause_then_resumes(db, spark, make_config, proxy):
    name, conn, cfg = _setup(db, spark, make_config)
    _backlog(conn)
    proxied = via(cfg, proxy)
    engine = StreamEngine(proxied, until_now=True, retry=RetryPolicy(delays=(0.2,), budget_seconds=2,
                                                                    binlog_silence_seconds=2))
    outage = proxy.add(Rule(BINLOG_DUMP, "outage", times=1))
    with pytest.raises(TerminalError, match=r"unreachable for over 2 s: .*(Lost connection|Connection|lost)"):
        engine.run()
    assert outage.fired == 1
    proxy.end_outage()
    with connect(connection_settings(cfg)) as c, c.cursor() as cur:
        cur.execute(f"UPDATE `{name}`.t SET v = 0 WHERE id < 50")
    StreamEngine(proxied, until_now=True, retry=FAST).run()  # resumes from the checkpoint
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(cfg, [f"{name}.t"])
