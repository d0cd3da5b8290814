"""The low watermark's invariant (cdc_core/offset/visibility.py ``visible_position``): every
transaction the binlog holds at or before it is visible to a statement started after it.

MariaDB writes a transaction to the binlog before InnoDB commits it, so SHOW MASTER STATUS
alone can name a position whose transactions a SELECT right after does not see yet (a chunk
would then miss a change the stream skips as already read). Sampled under six writers of
one-row transactions: each sample is (low watermark, COUNT(*) right after); the binlog read
afterwards says how many inserts were committed at or before each watermark, and the count
must reach it. Measured while writing this: SHOW MASTER STATUS alone failed 3-4 of ~1,200
samples in 20 s; ``visible_position`` none.
"""

from __future__ import annotations

import bisect
import threading
import time

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import WriteRowsEvent

from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.visibility import visible_position

WRITERS = 6
SECONDS = 8.0


def _commit_ends(mariadb, start: BinlogPosition, db_name: str) -> list[BinlogPosition]:
    """The end position of every insert transaction into ``db_name`` after ``start``, in binlog order."""
    reader = BinLogStreamReader(
        connection_settings={"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                             "passwd": mariadb.password},
        server_id=4242, log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, XidEvent], only_schemas=None)
    ends, pending = [], False
    try:
        for ev in reader:
            if isinstance(ev, WriteRowsEvent):
                pending = pending or ev.schema == db_name
            elif pending:
                ends.append(BinlogPosition(reader.log_file, ev.packet.log_pos))
                pending = False
    finally:
        reader.close()
    return ends


def test_every_transaction_up_to_the_low_watermark_is_visible_right_after_it(mariadb, db):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        start = master_position(cur)
    stop = threading.Event()

    def write() -> None:
        w = mariadb.connect(name)
        with w.cursor() as wc:
            while not stop.is_set():
                wc.execute("INSERT INTO t (v) VALUES (1)")
        w.close()

    writers = [threading.Thread(target=write) for _ in range(WRITERS)]
    for t in writers:
        t.start()
    samples = []
    try:
        reader = mariadb.connect(name)
        with reader.cursor() as cur:
            until = time.monotonic() + SECONDS
            while time.monotonic() < until:
                lw = visible_position(cur)
                cur.execute("SELECT COUNT(*) FROM t")
                samples.append((lw, cur.fetchone()[0]))
        reader.close()
    finally:
        stop.set()
        for t in writers:
            t.join()
    ends = _commit_ends(mariadb, start, name)
    assert len(samples) > 100 and len(ends) > 10 * len(samples), (len(samples), len(ends))
    missed = [(str(lw), seen, bisect.bisect_right(ends, lw)) for lw, seen in samples
              if seen < bisect.bisect_right(ends, lw)]
    assert not missed, f"{len(missed)} of {len(samples)} SELECTs missed transactions before their watermark: " \
        f"{missed[:5]}"


def test_on_a_quiet_server_the_low_watermark_is_the_binlog_end(mariadb):
    conn = mariadb.connect()
    with conn.cursor() as cur:
        assert visible_position(cur, base=3) == master_position(cur, base=3)
    conn.close()
