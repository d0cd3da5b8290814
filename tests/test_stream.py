"""The binlog stream into Delta against a real MariaDB: random workloads during and
after the snapshot, large transactions and values, TRUNCATE, rotation, tables
outside the capture list, startup modes, resume, and the type matrix through the
stream. Every test ends with Delta equal to MySQL row by row."""

from __future__ import annotations

import random
import threading
import time

import pytest
from deltalake import DeltaTable

from cdc_core.batch.micro_batch import CATCHUP_LAG_SECONDS
from cdc_core.offset.position import master_position
from cdc_core.offset.startup import StartupError, clock_offset
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset
from cdc_core.source.connection import connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.snapshot.plan import plan_snapshot
from pipelines.snapshot.verify import finished_snapshot
from pipelines.stream import StreamEngine
from tests.columnar_rows import COLUMNAR_TYPES, columnar_row
from tests.helpers import EngineThread, Worker, assert_equal, snapshot


def stream_until_now(cfg):
    return StreamEngine(cfg, until_now=True).run()


def _workload(settings, database: str, seed: int, ops: int | None, stop: threading.Event | None = None) -> int:
    """Inserts, counter updates, deletes, key moves and multi-table transactions."""
    rng = random.Random(seed)
    done = 0
    with connect(settings, database=database) as conn, conn.cursor() as cur:
        while (ops is None or done < ops) and not (stop is not None and stop.is_set()):
            k = rng.randrange(1, 3000)
            r = rng.random()
            if r < 0.3:
                cur.execute("INSERT IGNORE INTO a VALUES (%s, 0, %s)", (rng.randrange(1, 6000), f"i{done}"))
            elif r < 0.6:
                cur.execute("UPDATE a SET counter = counter + 1, s = %s WHERE id = %s", (f"u{done}", k))
            elif r < 0.7:
                cur.execute("DELETE FROM a WHERE id = %s", (k,))
            elif r < 0.8:
                cur.execute("UPDATE IGNORE a SET id = %s, counter = counter + 1 WHERE id = %s",
                            (rng.randrange(1, 6000), k))
            elif r < 0.82:
                cur.execute("UPDATE a SET counter = counter + 1 WHERE id BETWEEN %s AND %s", (k, k + 200))
            else:
                conn.begin()
                cur.execute("UPDATE b SET n = n + 1 WHERE id = %s", (k % 500,))
                cur.execute("INSERT INTO b VALUES (%s, 1) ON DUPLICATE KEY UPDATE n = n + 1", (rng.randrange(1000),))
                cur.execute("DELETE FROM b WHERE id = %s", (rng.randrange(1000),))
                cur.execute("UPDATE a SET counter = counter + 1 WHERE id = %s", (k,))
                conn.commit()
            done += 1
    return done


def _tables(conn, rows: int = 3000) -> None:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, counter INT NOT NULL, s VARCHAR(40))")
        cur.execute("CREATE TABLE b (id BIGINT PRIMARY KEY, n INT)")
        cur.executemany("INSERT INTO a VALUES (%s, 0, 'x')", [(i,) for i in range(1, rows)])
        cur.executemany("INSERT INTO b VALUES (%s, 0)", [(i,) for i in range(500)])


def test_random_workload_during_and_after_snapshot(db, spark, make_config):
    name, conn = db
    _tables(conn)
    cfg = make_config(name, chunk_size=200, stream={"max_batch_rows": 700})
    stop = threading.Event()
    writer = Worker(_workload, connection_settings(cfg), name, 1, None, stop, name="writer")
    writer.start()
    try:
        snapshot(cfg, spark)  # the writer runs throughout the snapshot
        time.sleep(0.5)  # and a little after it: changes for the hand-off
    finally:
        stop.set()
    assert writer.join() > 0  # its failure, if it failed
    _workload(connection_settings(cfg), name, 2, 1500)  # and after it
    summary = stream_until_now(cfg)
    assert summary.changes > 0 and summary.batches >= 2
    assert_equal(cfg, [f"{name}.a", f"{name}.b"])

    # Delta history: each stream commit's offset is strictly later than the one before.
    for t in ("a", "b"):
        applied = [StreamOffset.from_json(c[OFFSET_KEY]).applied
                   for c in reversed(DeltaTable(table_uri(cfg.sink.path, f"{name}.{t}")).history()) if OFFSET_KEY in c]
        assert applied and all(x < y for x, y in zip(applied, applied[1:]))

    # A second run continues from the checkpoint: only the new changes, then equal again.
    _workload(connection_settings(cfg), name, 3, 300)
    again = stream_until_now(cfg)
    assert 0 < again.changes <= 300 * 210 and again.start >= summary.end
    assert_equal(cfg, [f"{name}.a", f"{name}.b"])
    assert stream_until_now(cfg).changes == 0


def test_a_backlog_is_read_in_catchup_batches(db, spark, make_config):
    """Changes older than CATCHUP_LAG_SECONDS by the source's clock go in catch-up batches
    (here one), not in batches of max_batch_rows; Delta equals MySQL either way."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO t SELECT seq, 0 FROM seq_1_to_100")
    cfg = make_config(name, stream={"max_batch_rows": 100, "max_batch_seconds": 60,
                                    "catchup_batch_rows": 100_000, "catchup_batch_seconds": 60})
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        for i in range(20):  # 2,000 row changes in 20 transactions: 20 live batches
            cur.execute("INSERT INTO t SELECT 1000 * %s + seq, %s FROM seq_1_to_90", (i + 1, i))
            cur.execute("UPDATE t SET v = v + 1 WHERE id <= 10")
        assert abs(clock_offset(cur)) < 2  # the same host's clock
    time.sleep(CATCHUP_LAG_SECONDS + 1.5)  # binlog timestamps are whole seconds
    summary = stream_until_now(cfg)
    assert summary.changes == 2000 and summary.batches == 1
    assert_equal(cfg, [f"{name}.t"])


def test_large_transaction_blob_truncate_rotation_uncaptured(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT, pad VARCHAR(20))")
        cur.execute("CREATE TABLE blobs (id INT PRIMARY KEY, data LONGBLOB)")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")  # excluded below
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(100)])
    cfg = make_config(name, source={"exclude_tables": [rf"{name}\.other"]}, stream={"max_batch_rows": 20000})
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        conn.begin()  # one transaction of 120k rows: batches cut inside it
        for lo in range(0, 120_000, 10_000):
            cur.execute(f"INSERT INTO big SELECT seq, MOD(seq, 7), 'p' FROM seq_{lo}_to_{lo + 9_999}")
        cur.execute("UPDATE big SET v = v + 1 WHERE MOD(id, 3) = 0")
        conn.commit()
        cur.execute("FLUSH BINARY LOGS")
        blob = bytes(random.Random(5).getrandbits(8) for _ in range(1 << 16)) * 256  # 16 MiB
        cur.execute("INSERT INTO blobs VALUES (1, %s), (2, 'small')", (blob,))
        cur.execute("UPDATE blobs SET data = CONCAT(data, 'x') WHERE id = 1")
        cur.execute("INSERT INTO other VALUES (1, 1), (2, 2)")
        cur.execute("TRUNCATE TABLE t")
        cur.execute("INSERT INTO t VALUES (1000, 1)")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("DELETE FROM big WHERE id >= 100000")
    summary = stream_until_now(cfg)
    assert f"{name}.other" not in summary.tables
    assert summary.end.file_number > summary.start.file_number  # read across two rotations
    assert_equal(cfg, [f"{name}.big", f"{name}.blobs", f"{name}.t"])
    rows = DeltaTable(table_uri(cfg.sink.path, f"{name}.blobs")).to_pyarrow_table().to_pylist()
    assert {r["id"]: len(r["data"]) for r in rows} == {1: (1 << 24) + 1, 2: 5}


def test_startup_modes(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO m VALUES (1, 1)")
        time.sleep(1.1)  # binlog timestamps have one-second resolution
        ts_ms = int(time.time() * 1000)
        cur.execute("INSERT INTO m VALUES (2, 2)")
        mid = master_position(cur)
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0].split(",")[0]
        cur.execute("INSERT INTO m VALUES (3, 3)")

    def ids(startup: dict) -> list[int]:
        cfg = make_config(name, source={"startup": startup}, pipeline={"name": f"m{len(startup)}{startup['mode']}"})
        cfg = cfg.model_copy(update={"sink": cfg.sink.model_copy(update={"path": f"{cfg.sink.path}/{startup['mode']}"
                                                                          f"{startup.get('gtid', '')}"})})
        stream_until_now(cfg)
        t = DeltaTable(table_uri(cfg.sink.path, f"{name}.m"))
        return sorted(t.to_pyarrow_table().column("id").to_pylist())

    assert ids({"mode": "latest"}) == []
    assert ids({"mode": "specific", "file": mid.file, "pos": mid.pos}) == [3]
    assert ids({"mode": "specific", "gtid": gtid}) == [3]
    assert ids({"mode": "timestamp", "timestamp_ms": ts_ms}) == [2, 3]
    with pytest.raises(StartupError, match="no snapshot"):
        stream_until_now(make_config(name))


def test_snapshot_mode_stops_at_highest_high_watermark(db, spark, make_config):
    name, conn = db
    _tables(conn, rows=1000)
    cfg = make_config(name, source={"startup": {"mode": "snapshot"}})
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (99999, 0, 'after')")
    summary = StreamEngine(cfg).run()  # no --until: the snapshot mode ends by itself
    assert "reached" in summary.stop_reason
    ids = DeltaTable(table_uri(cfg.sink.path, f"{name}.a")).to_pyarrow_table().column("id").to_pylist()
    assert 99999 not in ids and len(ids) == 999


def _wait(predicate, what: str, engine: EngineThread, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert engine.is_alive(), f"the engine ended while waiting for {what}: {engine.join()}"
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def test_heartbeat_moves_checkpoint_past_other_tables(db, make_config):
    """With only uncaptured tables changing, the running stream still moves its checkpoint
    past them every ``heartbeat_seconds``, without a Delta commit (a restart need not read them
    again); checked while it runs, as the stop's own checkpoint would move it anyway."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE quiet (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE busy (id INT PRIMARY KEY)")
    cfg = make_config(name, source={"startup": {"mode": "latest"}, "exclude_tables": [rf"{name}\.busy"]},
                      stream={"heartbeat_seconds": 0.5})
    store = ControlStore(cfg.sink.path, cfg.pipeline.name)
    engine = EngineThread(StreamEngine(cfg))
    engine.start()
    try:
        engine.wait_streaming()
        start = store.checkpoint().offset.applied
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO busy VALUES (%s)", [(i,) for i in range(50)])
            end = master_position(cur)
        _wait(lambda: store.checkpoint().offset.applied >= end, "the heartbeat checkpoint", engine)
        cp = store.checkpoint()
        assert start < end <= cp.offset.applied and cp.state == "streaming"
        assert engine.engine.summary.changes == 0  # nothing captured changed: no batch carried it
    finally:
        summary = engine.stop()
    assert summary.stop_reason == "stop requested"
    history = DeltaTable(table_uri(cfg.sink.path, f"{name}.quiet")).history()
    assert [h["operation"] for h in history] == ["CREATE TABLE"]  # the checkpoint moved without a commit


def test_stop_request_commits_and_resumes(db, make_config):
    """A stop request commits every change read so far (batches are never due by themselves
    here) and checkpoints it; the next run resumes right after it."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v INT)")
    cfg = make_config(name, source={"startup": {"mode": "latest"}},
                      stream={"max_batch_seconds": 3600, "max_batch_rows": 1_000_000, "heartbeat_seconds": 3600})
    engine = EngineThread(StreamEngine(cfg))
    engine.start()
    try:
        engine.wait_streaming()
        with conn.cursor() as cur:
            for i in range(200):
                cur.execute("INSERT INTO s VALUES (%s, %s)", (i, i))
            end = master_position(cur)
        _wait(lambda: engine.engine.state.position >= end, "the inserts to be read", engine)
        assert DeltaTable(table_uri(cfg.sink.path, f"{name}.s")).to_pyarrow_dataset().count_rows() == 0
    finally:
        summary = engine.stop(30)
    assert summary.stop_reason == "stop requested"
    assert_equal(cfg, [f"{name}.s"])  # committed by the stop, before any other run
    assert summary.changes == 200
    cp = ControlStore(cfg.sink.path, cfg.pipeline.name).checkpoint()
    assert cp.state == "stopped" and cp.offset.applied >= end
    with conn.cursor() as cur:
        cur.execute("UPDATE s SET v = v + 1000")
    resumed = stream_until_now(cfg)
    assert resumed.start == cp.offset.resume and resumed.changes == 200  # the updates only: nothing read twice
    assert_equal(cfg, [f"{name}.s"])


def test_snapshot_leaves_streamed_tables_to_the_stream(db, spark, make_config):
    """A snapshot run after the stream began does not read again the tables the stream
    already wrote without a chunk plan (one streamed from the stream's first start under
    ``latest``, one streamed from its CREATE TABLE): that would append every row a second
    time. A captured table Delta holds nothing of is snapshotted and handed off as usual."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v INT)")
    cfg = make_config(name, source={"startup": {"mode": "latest"}})
    stream_until_now(cfg)  # first start: s is streamed from here
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO s VALUES (%s, %s)", [(i, i) for i in range(300)])
        cur.execute("CREATE TABLE n (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.executemany("INSERT INTO n VALUES (%s, %s)", [(i, f"n{i}") for i in range(250)])
    stream_until_now(cfg)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE fresh (id INT PRIMARY KEY, v INT)")  # while the stream is stopped
        cur.executemany("INSERT INTO fresh VALUES (%s, %s)", [(i, -i) for i in range(400)])
    summary = snapshot(cfg, spark)
    by_table = {s.table: s for s in summary.tables}
    assert by_table[f"{name}.s"].chunks_read == 0 and by_table[f"{name}.n"].chunks_read == 0
    assert by_table[f"{name}.fresh"].chunks_read > 0
    assert all(s.matches for s in summary.tables), summary.tables
    with conn.cursor() as cur:
        cur.execute("UPDATE s SET v = v + 1 WHERE id < 100")
        cur.execute("DELETE FROM n WHERE id >= 200")
        cur.execute("UPDATE fresh SET v = 7 WHERE id < 50")
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.s", f"{name}.n", f"{name}.fresh"])
    again = snapshot(cfg, spark)  # nothing left: the streamed tables do not count as work
    assert sum(s.chunks_read for s in again.tables) == 0
    done = finished_snapshot(cfg)  # and a re-run needs no Spark
    assert set(plan_snapshot(cfg, [s.table for s in done.tables])) == {f"{name}.fresh"}  # Dagster's partitions
    assert done is not None and {s.table for s in done.tables if s.streamed} == {f"{name}.s", f"{name}.n"}



def test_columnar_changes(db, make_config, monkeypatch):
    """Multi-row inserts, updates and deletes of every column kind cdc_core/binlog/columnar.py decodes (NULLs,
    extremes, negative decimals, zero dates, fractions 0..6, multi-byte text), in two batches: a table of the same
    rows inserted then updated and deleted in the same batch; one whose rows are updated in place, moved to other
    keys (in chains, a key moved onto one just freed), inserted again at the keys they left, given NULLs and
    deleted, first in the batch that inserted them, then in a batch of its own over rows Delta already holds; a table
    with a TEXT column and one with NULLs anywhere (more null bitmaps than the columns are read for): Delta
    equals MySQL row by row, and equals, value for value and type for type (``_cdc_op`` and ``_cdc_seq``
    too), what the tuple path writes from the same binlog."""
    from cdc_core.batch import table_batch

    name, conn = db
    cols = ", ".join(f"`{c}` {t}" for c, t in COLUMNAR_TYPES.items())
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
        for table in ("c", "m", "u"):
            cur.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, {cols})")
        # A column more: table maps of equal columns share their decoding, and the NULL bitmaps met.
        cur.execute(f"CREATE TABLE r (id BIGINT PRIMARY KEY, {cols}, rx INT)")
        cur.execute(f"CREATE TABLE t (id BIGINT PRIMARY KEY, {cols}, tx TEXT)")
    configs = {how: make_config(name, source={"startup": {"mode": "latest"}}, pipeline={"name": f"col_{how}"},
                                stream={"catchup_batch_rows": 1_000_000, "catchup_batch_seconds": 3600})
               for how in ("columnar", "tuples")}
    configs = {how: cfg.model_copy(update={"sink": cfg.sink.model_copy(update={"path": f"{cfg.sink.path}/{how}"})})
               for how, cfg in configs.items()}
    for cfg in configs.values():
        stream_until_now(cfg)  # the start, before any row
    plans: list[dict | None] = []
    original = table_batch.TableBatch._columnar_plan
    monkeypatch.setattr(table_batch.TableBatch, "_columnar_plan",
                        lambda self: plans.append(original(self)) or plans[-1])

    def stream_both() -> None:
        stream_until_now(configs["columnar"])
        with monkeypatch.context() as m:
            m.setattr(table_batch, "COLUMNAR_MIN_ROWS", 10 ** 9)
            stream_until_now(configs["tuples"])

    def moves(cur, away: int) -> None:
        cur.execute("UPDATE u SET i = i DIV 2, vc = 'kept' WHERE id % 3 = 1")  # in place
        cur.execute(f"UPDATE u SET id = id + {away} WHERE id % 4 = 0 AND id < 10000")  # moved
        cur.execute(f"UPDATE u SET id = id + 4, ch = 'chain' WHERE id >= {away} ORDER BY id DESC")  # onto keys freed
        cur.executemany(f"INSERT INTO u (id, {names}) VALUES ({marks})",
                        [columnar_row(rng, i) for i in range(0, 1200, 8)])  # again at keys they left
        cur.execute("UPDATE u SET f = NULL, dt3 = NULL, vl = 'ünïcode' WHERE id % 8 IN (0, 5)")  # new NULL bitmaps
        cur.execute("DELETE FROM u WHERE id % 16 = 5")

    rng = random.Random(38)
    names = ", ".join(f"`{c}`" for c in COLUMNAR_TYPES)
    marks = ", ".join(["%s"] * (len(COLUMNAR_TYPES) + 1))
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
        for start in range(0, 1200, 300):
            rows = [columnar_row(rng, i) for i in range(start, start + 300)]
            for table in ("c", "m", "u"):
                cur.executemany(f"INSERT INTO {table} (id, {names}) VALUES ({marks})", rows)
            cur.executemany(f"INSERT INTO r (id, {names}) VALUES ({marks})",
                            [columnar_row(rng, i, patterned=False) for i in range(start, start + 300)])
            cur.executemany(f"INSERT INTO t (id, {names}, tx) VALUES ({marks}, %s)", [(*r, f"x{r[0]}") for r in rows])
        cur.execute("UPDATE m SET i = i DIV 2, vc = 'moved', id = id + 5000 WHERE id % 3 = 0")
        cur.execute("DELETE FROM m WHERE id % 5 = 0")
        cur.executemany(f"INSERT INTO m (id, {names}) VALUES ({marks})",  # keys the batch deleted, and new ones
                        [columnar_row(rng, i) for i in [*range(0, 1200, 5), *range(2000, 2100)]])
        moves(cur, 10000)
    stream_both()
    with conn.cursor() as cur:  # a batch of its own, over rows Delta holds
        cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
        moves(cur, 20000)
        cur.execute("UPDATE u SET d = -d WHERE id % 7 = 2")
    stream_both()
    assert {k for p in plans if p for k in p} == {"append", "upsert", "delete"}  # columns folded in every way
    tables = [f"{name}.{t}" for t in ("c", "m", "t", "r", "u")]
    for cfg in configs.values():
        assert_equal(cfg, tables)
    for table in tables:
        columnar, tuples = (DeltaTable(table_uri(cfg.sink.path, table)).to_pyarrow_table().sort_by("id")
                            for cfg in configs.values())
        assert columnar.schema == tuples.schema
        for column in columnar.column_names:
            assert columnar.column(column).to_pylist() == tuples.column(column).to_pylist(), (table, column)
        assert columnar.equals(tuples)


@pytest.mark.parametrize("how", ["single_insert", "insert_read_as_columns", "update_read_as_columns", "history"])
def test_rows_that_fail_to_decode_stop_the_stream_naming_their_table_and_position(db, make_config, how):
    """An impossible DATE (ALLOW_INVALID_DATES), which the tuple path refuses as python-mysql-replication
    does: in a single-row insert (decoded as it is unpickled), in a multi-row insert and in an update of
    300 rows (read as columns, which find the date impossible and leave them to the tuple path when the
    batch is planned), in a table kept in history mode (folded as tuples as the event is read): the stream
    stops with a terminal error naming the error, the table and the event's position, and stops there
    again when run again."""
    from cdc_core.errors import TerminalError

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, d DATE)")
    modes = {"sink": {"table_modes": {".*": "history"}}} if how == "history" else {}
    cfg = make_config(name, source={"startup": {"mode": "latest"}}, **modes)
    stream_until_now(cfg)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, '2020-01-01')", [(i,) for i in range(100, 400)])
    stream_until_now(cfg)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        if how == "single_insert":
            cur.execute("INSERT INTO t VALUES (2, '2020-02-30')")
        elif how == "insert_read_as_columns":
            cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, "2020-02-30" if i == 50 else "2020-01-02")
                                                              for i in range(2, 99)])
        else:
            cur.execute("UPDATE t SET d = '2020-02-30' WHERE id >= 100")
    for _ in range(2):
        with pytest.raises(TerminalError) as failed:
            StreamEngine(cfg, until_now=True).run()
        assert "ValueError: day is out of range for month" in str(failed.value)
        assert f"decoding {name}.t's rows at binlog." in str(failed.value)
