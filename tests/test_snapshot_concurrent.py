"""A snapshot while another thread inserts, updates (keys too) and deletes in the same
tables: every chunk is consistent at its high watermark, so Delta plus the binlog
replayed through the hand-off filter equals MySQL row by row."""

from __future__ import annotations

import random
import threading

from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.reconcile.rows import mysql_rows
from tests.helpers import replay_handoff, snapshot


def _writer(settings, database: str, stop: threading.Event, counts: dict) -> None:
    rng = random.Random(42)
    conn = connect(settings, database=database)
    next_id = 100_000
    with conn.cursor() as cur:
        while not stop.is_set():
            op = rng.random()
            k = rng.randrange(1, 6000)
            if op < 0.3:
                next_id += 1
                new = rng.choice([next_id, -next_id, k * 7 + 3])
                cur.execute("INSERT IGNORE INTO a VALUES (%s, %s, %s)", (new, 0, "ins"))
            elif op < 0.6:
                cur.execute("UPDATE a SET v = v + 1, s = %s WHERE id = %s", (f"u{k}", k))
            elif op < 0.7:
                cur.execute("DELETE FROM a WHERE id = %s", (k,))
            elif op < 0.8:
                next_id += 1
                cur.execute("UPDATE IGNORE a SET id = %s WHERE id = %s", (next_id % 8000, k))  # key moves
            else:
                conn.begin()  # one transaction over both tables
                cur.execute("UPDATE b SET counter = counter + 1 WHERE id = %s", (k % 2000,))
                cur.execute("INSERT IGNORE INTO b VALUES (%s, 0)", (rng.randrange(2000, 3000),))
                cur.execute("DELETE FROM b WHERE id = %s", (rng.randrange(0, 3000),))
                cur.execute("UPDATE c SET n = n + 1 WHERE code = %s", (f"k{k % 1500:05d}",))
                conn.commit()
            counts["ops"] += 1
    conn.close()


def test_snapshot_during_writes_hands_off_exactly(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
        cur.execute("CREATE TABLE b (id BIGINT PRIMARY KEY, counter INT)")
        cur.execute("CREATE TABLE c (code VARCHAR(10) COLLATE utf8mb4_bin PRIMARY KEY, n INT)")
        cur.executemany("INSERT INTO a VALUES (%s, %s, %s)", [(i, i, "x") for i in range(1, 6000)])
        cur.executemany("INSERT INTO b VALUES (%s, 0)", [(i,) for i in range(2000)])
        cur.executemany("INSERT INTO c VALUES (%s, 0)", [(f"k{i:05d}",) for i in range(1500)])
    cfg = make_config(name, chunk_size=150, parallelism=2)
    stop, counts = threading.Event(), {"ops": 0}
    t = threading.Thread(target=_writer, args=(connection_settings(cfg), name, stop, counts))
    t.start()
    try:
        summary = snapshot(cfg, spark)
    finally:
        stop.set()
        t.join()
    names = [f"{name}.{x}" for x in ("a", "b", "c")]
    assert counts["ops"] > 100, "the writer barely ran during the snapshot"
    store = ControlStore(cfg.sink.path, cfg.pipeline.name)
    window = sum(r.window_changes for r in store.chunk_records())
    assert window > 0, "no chunk saw changes between its watermarks: the test exercised nothing"
    assert sum(s.chunks for s in summary.tables) >= 50

    states = replay_handoff(cfg, names)
    with connect(connection_settings(cfg)) as c2, c2.cursor() as cur:
        for n in names:
            schema = describe_table(cur, *n.split(".", 1))
            pk = [[c.name for c in schema.columns].index(k) for k in schema.primary_key]
            want = {tuple(r[i] for i in pk): r for r in mysql_rows(cur, schema)}
            got = states[n]
            assert got.keys() == want.keys(), f"{n}: keys differ: {sorted(got.keys() ^ want.keys())[:10]}"
            bad = [k for k in want if want[k] != got[k]]
            assert not bad, f"{n}: rows differ, e.g. {[(want[k], got[k]) for k in bad[:3]]}"
