"""A catch-up on a loaded machine: three busy processes oversubscribe the two cores while
``binlake stream --until now`` works through a backlog, and the server cuts every connection
binlake holds (its binlog dump, its control queries, its key orders) at random moments, so
that a lost connection (2013) meets whichever step is running: the reader, a control query,
a commit's checks. The run must exit 0, with Delta equal to MySQL row by row and every change
of the binlog counted once per table and per key (tests/change_count.py)."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import psutil

from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, snapshot, write_config_file
from tests.test_stream_crash import Stream

SEED = 20261129
BUSY = 3  # processes that spin: with the server and binlake, the 2 cores are oversubscribed
CUTS = 8  # rounds in which every connection of binlake is killed during the catch-up


def _backlog(conn, rng: random.Random) -> None:
    """About 290,000 row changes: inserts in transactions of 2,000 rows, updates and deletes
    over the whole key range, a few single-row transactions between them."""
    with conn.cursor() as cur:
        for i in range(40):
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t SELECT %s + seq, seq, REPEAT('x', 80) FROM seq_1_to_2000", (100_000 * (i + 1),))
            cur.execute("UPDATE t SET v = v + 1 WHERE id %% 7 = %s", (i % 7,))
            cur.execute("COMMIT")
            cur.execute("DELETE FROM t WHERE id %% 29 = %s", (rng.randrange(29),))
            for _ in range(20):
                cur.execute("UPDATE t SET v = v - 1 WHERE id = %s", (rng.randrange(1, 5001),))


def _binlake_connections(cur, pid: int) -> list[int]:
    """Server ids of the connections the process ``pid`` and its children hold (its binlog
    dump, control and key-order connections), found by their client ports."""
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    ports = set()
    for proc in procs:
        try:
            ports |= {c.laddr.port for c in proc.net_connections(kind="tcp") if c.raddr}
        except psutil.NoSuchProcess:
            continue
    cur.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST")
    return [i for i, host in cur.fetchall() if host and host.rpartition(":")[2].isdigit()
            and int(host.rpartition(":")[2]) in ports]


def test_catch_up_on_oversubscribed_cores_with_connections_cut(mariadb, db, spark, make_config, tmp_path):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT, pad VARCHAR(100))")
        cur.execute("INSERT INTO t SELECT seq, seq, 'p' FROM seq_1_to_5000")
    cfg = make_config(name, stream={"max_batch_rows": 2000})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    snapshot(cfg, spark)
    rng = random.Random(SEED)
    _backlog(conn, rng)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY)]
    cut: list[int] = []
    try:
        stream = Stream(config, tmp_path / "logs", "--until", "now", password=mariadb.password)
        with mariadb.connect() as killer, killer.cursor() as cur:
            # Attempts that found no connection (the stream still starting on the busy cores) do not count.
            while sum(1 for n in cut if n) < CUTS and stream.alive():
                time.sleep(rng.uniform(0.3, 1.5))
                ids = _binlake_connections(cur, stream.proc.pid)
                for i in ids:
                    try:
                        cur.execute("KILL CONNECTION %s", (i,))
                    except Exception:  # noqa: BLE001 - it ended meanwhile
                        pass
                cut.append(len(ids))
        code = stream.wait(600)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert code == 0, stream.describe()
    assert sum(1 for n in cut if n) >= 2, f"binlake's connections cut only {cut}: the catch-up ended first"
    assert_equal(cfg, [f"{name}.t"])
    assert_changes_counted(cfg, [f"{name}.t"])
