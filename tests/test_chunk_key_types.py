"""Chunk keys of the types whose server order is not their text's, against a real MariaDB
(the planner: cdc_core/chunks/planning.py; the order the hand-off and the chunk reader
compare in: cdc_core/types/key_order.py and the codecs' ``key_sort_key``).

- ENUM and SET keys are planned by member index and bits: every row is in exactly one
  chunk, and a chunk is read through the index (``k IN (...)``), not by a scan.
- The planner refuses a key whose bounds come back out of the order binlake models.
- End to end: tables keyed by ENUM, SET, UUID, INET6, INET4, TIME, YEAR, BIT and FLOAT
  (tests/helpers.py: KEY_TYPES), one chunk per task, a writer inserting, updating, deleting
  and moving keys across chunks during the snapshot and after it: the snapshot holds no
  duplicate, the hand-off replay equals MySQL, and after the stream Delta = MySQL row by row.
(The hand-off's placement of each key type's binlog values in the planner's chunks:
tests/test_handoff_collations.py::test_filter_places_non_string_keys_without_the_server.)
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

from cdc_core.chunks.planning import ChunkKeyError, check_bounds_order, plan_chunks
from cdc_core.chunks.reader import ChunkReader
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from cdc_core.types.enum_set import Ordinal
from pipelines.lake.control_store import ControlStore
from pipelines.reconcile.rows import mysql_rows
from pipelines.stream import StreamEngine
from tests.helpers import KEY_TYPES, assert_equal, replay_handoff, snapshot


def test_enum_and_set_chunks_follow_member_order_through_the_index(db):
    name, conn = db
    members = [f"m{(i * 37) % 100:02d}" for i in range(40)]  # index order is not text order
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE e (k ENUM({','.join(repr(m) for m in members)}) NOT NULL, id INT NOT NULL, "
                    "PRIMARY KEY (k, id))")
        cur.execute(f"INSERT INTO e SELECT ELT(1 + seq % 40, {','.join(repr(m) for m in members)}), seq "
                    "FROM seq_1_to_20000")
        cur.execute("CREATE TABLE s (k SET('d','c','b','a','h','g','f','e') NOT NULL, id INT NOT NULL, "
                    "PRIMARY KEY (k, id))")
        cur.execute("INSERT INTO s SELECT seq % 256, seq FROM seq_1_to_20000")
        cur.execute("ANALYZE TABLE e, s")
        for table, total in (("e", 20000), ("s", 20000)):
            schema = describe_table(cur, name, table)
            chunks = plan_chunks(cur, schema, "k", 1000)
            assert len(chunks) > 10 and all(isinstance(c.lo, Ordinal) for c in chunks[1:])
            seen: dict[int, int] = {}
            for c in chunks:
                cond, params = c.where()
                cur.execute(f"SELECT id FROM {table} WHERE {cond}", params)
                for (i,) in cur.fetchall():
                    assert i not in seen, f"{table}: row {i} in chunks {seen[i]} and {c.index}"
                    seen[i] = c.index
                if c.lo is not None and c.hi is not None:  # read through the index, not by a scan
                    cur.execute(f"EXPLAIN SELECT * FROM {table} WHERE {cond}", params)
                    assert cur.fetchone()[3] == "range", f"{table} chunk {c.index}: {cond}"
            assert len(seen) == total
            # Chunks follow the server's order of the key: member index (ENUM), bits (SET).
            cur.execute(f"SELECT id, k + 0 FROM {table}")
            number = dict(cur.fetchall())
            by_chunk = sorted(seen, key=lambda i: (seen[i], number[i]))
            assert [number[i] for i in by_chunk] == sorted(number.values())


def test_bounds_out_of_the_modelled_order_are_refused(db):
    """A UUID column whose index order is not the one binlake models (as one created by a
    MariaDB before 10.11.2 would be) is refused with the way out, not chunked wrongly."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE u (k UUID NOT NULL PRIMARY KEY)")
        schema = describe_table(cur, name, "u")
    col = schema.column("k")
    # In stored order (version 1 is stored node first): fine.
    time_based, plain = "ffffffff-0000-1000-8000-000000000000", "10000000-0000-0000-0000-000000000000"
    check_bounds_order(schema, col, [time_based, plain])
    with pytest.raises(ChunkKeyError, match="otherwise than binlake models it.*chunk_key_columns"):
        check_bounds_order(schema, col, [plain, time_based])


def _tables(conn) -> list[str]:
    """One table per key type, the key leading a composite primary key (so an ENUM key holds
    many rows), ``id`` unique to find a row without comparing its key."""
    names = []
    with conn.cursor() as cur:
        for t, (sql_type, value) in enumerate(KEY_TYPES):
            cur.execute(f"CREATE TABLE k{t} (k {sql_type} NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (k, id), "
                        "UNIQUE KEY (id))")
            cur.executemany(f"INSERT IGNORE INTO k{t} VALUES (%s, %s, 0)", [(value(i), i) for i in range(400)])
            names.append(f"k{t}")
    return names


def _writer(settings, database: str, tables: list[str], stop: threading.Event, counts: dict) -> None:
    """Inserts, updates, deletes and key moves (to any value of the type: across chunks) until
    ``stop``, a few hundred a second."""
    rng = random.Random(17)
    next_id = 10_000
    with connect(settings, database=database) as conn, conn.cursor() as cur:
        while not stop.is_set():
            t = rng.randrange(len(tables))
            value = KEY_TYPES[t][1]
            table, r = tables[t], rng.random()
            victim = rng.randrange(400)
            if r < 0.3:
                next_id += 1
                cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s, 0)", (value(rng.randrange(600)), next_id))
            elif r < 0.55:
                cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s", (victim,))
            elif r < 0.7:
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (victim,))
            else:
                cur.execute(f"UPDATE IGNORE {table} SET k = %s, v = v + 1 WHERE id = %s",
                            (value(rng.randrange(600)), victim))
            counts["ops"] += 1
            time.sleep(0.002)


def _changed_in_every_window(monkeypatch, settings, database: str, every: int) -> None:
    """Every ``every``-th chunk read gets a row of its range updated between its SELECT and its
    high watermark: the writer's changes land in a window by chance (a window lasts a few
    milliseconds), these by construction, so the fold is exercised on every run."""
    fetch = ChunkReader._fetch
    reads = itertools.count()

    def fetch_then_write(self, schema, chunk):
        table = fetch(self, schema, chunk)
        if next(reads) % every == 0:
            cond, params = chunk.where()
            with connect(settings, database=database) as conn, conn.cursor() as cur:
                cur.execute(f"UPDATE {schema.table} SET v = v + 1 WHERE {cond} LIMIT 1", params)
        return table

    monkeypatch.setattr(ChunkReader, "_fetch", fetch_then_write)


def test_key_types_hand_off_exactly_under_writes(db, spark, make_config, monkeypatch):
    name, conn = db
    tables = _tables(conn)
    # One chunk per task: every chunk has its own watermarks, so a key placed in the wrong
    # chunk is judged against the wrong high watermark. The groups run in this process's
    # threads (the local runner), where the in-window writes below are made.
    cfg = make_config(name, parallelism=2, source={"snapshot": {"chunk_size": 30, "max_rows_per_task": 30,
                                                                "runner": "local"}})
    _changed_in_every_window(monkeypatch, connection_settings(cfg), name, every=4)
    names = [f"{name}.{t}" for t in tables]
    stop, counts = threading.Event(), {"ops": 0}
    t = threading.Thread(target=_writer, args=(connection_settings(cfg), name, tables, stop, counts))
    t.start()
    try:
        summary = snapshot(cfg, spark)
        during = counts["ops"]
        while counts["ops"] < during + 300 and t.is_alive():  # and after it, before the stream starts
            time.sleep(0.05)
    finally:
        stop.set()
        t.join()
    assert during > 100, "the writer barely ran during the snapshot"
    assert sum(s.chunks for s in summary.tables) > 9 * 10
    records = ControlStore.of(cfg).chunk_records()
    assert sum(r.window_changes for r in records) > 0, "no chunk saw changes between its watermarks"

    states = replay_handoff(cfg, names)  # asserts Delta holds no key twice after the snapshot
    with connect(connection_settings(cfg)) as c2, c2.cursor() as cur:
        for n in names:
            schema = describe_table(cur, *n.split(".", 1))
            pk = [[c.name for c in schema.columns].index(k) for k in schema.primary_key]
            want = {tuple(r[i] for i in pk): r for r in mysql_rows(cur, schema)}
            got = states[n]
            assert got.keys() == want.keys(), f"{n}: keys differ: {sorted(got.keys() ^ want.keys(), key=repr)[:6]}"
            bad = [k for k in want if want[k] != got[k]]
            assert not bad, f"{n}: rows differ, e.g. {[(want[k], got[k]) for k in bad[:3]]}"
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, names)
