"""Routes (cdc_core/routes.py): three shards with overlapping primary keys into one Delta
table, through the snapshot, the stream, schema changes on single shards, a new shard, a
TRUNCATE of one shard and a restart; Delta equals MySQL row by row per shard. Plus the
pure rules (widest type, sink schema, first match) and the configuration errors."""

from __future__ import annotations

import random
import re
import threading
import time
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.config import ConfigError, parse_config
from cdc_core.offset.startup import StartupError
from cdc_core.offset.stream_offset import OFFSET_KEY
from cdc_core.routes import RouteError, Router, sink_schema
from cdc_core.schema.output import CDC_SOURCE
from cdc_core.schema.table import Column, TableSchema
from cdc_core.source.connection import connect, connection_settings
from cdc_core.source.validate import check
from cdc_core.types.mapping import widest_type
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.schema.applier import SchemaChangeRejected
from pipelines.snapshot.driver import SnapshotJob
from pipelines.status import pipeline_status
from pipelines.stream import StreamEngine
from tests.helpers import EngineThread, assert_equal, snapshot

SHARDS = {
    "user_1": "id INT PRIMARY KEY, name VARCHAR(20), score INT, note VARCHAR(10)",
    "user_2": "id INT PRIMARY KEY, name VARCHAR(40), score BIGINT, amount DECIMAL(8,2)",
    "user_3": "id BIGINT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(12,4), born DATE",
}
INSERT = {
    "user_1": "INSERT IGNORE INTO user_1 (id, name, score) VALUES (%s, %s, %s)",
    "user_2": "INSERT IGNORE INTO user_2 (id, name, score, amount) VALUES (%s, %s, %s, 1.25)",
    "user_3": "INSERT IGNORE INTO user_3 (id, name, amount) VALUES (%s, %s, %s)",
}


def _col(name: str, data_type: str, column_type: str | None = None, **kw) -> Column:
    return Column(name, data_type, column_type or data_type, **kw)


def test_widest_type_sink_schema_and_first_match():
    assert widest_type(pa.int32(), pa.int64()) == pa.int64()
    assert widest_type(pa.decimal128(8, 2), pa.decimal128(12, 4)) == pa.decimal128(12, 4)
    assert widest_type(pa.decimal128(30, 2), pa.decimal128(10, 9)) == pa.decimal128(37, 9)
    assert widest_type(pa.int64(), pa.decimal128(5, 2)) == pa.decimal128(21, 2)
    assert widest_type(pa.int16(), pa.float32()) == pa.float32()
    assert widest_type(pa.int32(), pa.float32()) == pa.float64()
    assert widest_type(pa.string(), pa.string()) == pa.string()
    for a, b in ((pa.int64(), pa.float64()), (pa.string(), pa.int32()), (pa.date32(), pa.timestamp("us")),
                 (pa.timestamp("us"), pa.timestamp("us", tz="UTC")), (pa.decimal128(38, 0), pa.decimal128(2, 1))):
        assert widest_type(a, b) is None, (a, b)

    a = TableSchema("s", "u_1", (_col("id", "int"), _col("x", "varchar", "varchar(5)")), ("id",))
    b = TableSchema("s", "u_2", (_col("id", "bigint"), _col("y", "date"), _col("x", "text")), ("id",))
    schema = sink_schema([a, b], sink="s.u")
    assert schema.names == ["id", "x", "y", CDC_SOURCE, "_cdc_op", "_cdc_seq"]  # first source's order, then new
    assert schema.field("id").type == pa.int64() and not schema.field(CDC_SOURCE).nullable
    bad = TableSchema("s", "u_3", (_col("id", "int"), _col("y", "int")), ("id",))
    with pytest.raises(RouteError, match=r"column 'y' of s\.u is date32.* in s\.u_2 \(date\) but int32 in s\.u_3"):
        sink_schema([a, b, bad], sink="s.u")

    router = Router(parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": [".*"]},
                                  "routes": [{"source": r"s\.u_1", "sink": "s.first"},
                                             {"source": r"s\.u_\d+", "sink": "s.u"}]}).routes)
    assert router.sink("s.u_1") == "s.first" and router.sink("s.u_2") == "s.u"  # the first matching route wins
    assert router.sink("s.u_2x") == "s.u_2x" and not router.routed("s.other")  # full match; others unrouted
    keyed = TableSchema("s", "u", (_col("id", "int"),), ("id",))
    assert "also a captured table" in router.problems({"s.u_2": a.renamed("s.u_2"), "s.u": keyed})[0]

    for route, where in (({"source": "u_(", "sink": "s.u"}, "routes.0.source"),
                         ({"source": "u", "sink": "nodot"}, "routes.0.sink"),
                         ({"source": "u", "sink": "_binlake.x"}, "routes.0.sink")):
        with pytest.raises(ConfigError, match=where):
            parse_config({"pipeline": {"name": "p"}, "source": {"user": "u", "tables": [".*"]}, "routes": [route]})


def _shard_workload(settings, database: str, seed: int, ops: int, stop: threading.Event | None = None) -> None:
    """Inserts, updates, deletes and key moves on every shard, on ids the shards share, and
    transactions touching the same id in all three shards."""
    rng = random.Random(seed)
    with connect(settings, database=database) as conn, conn.cursor() as cur:
        for i in range(ops):
            if stop is not None and stop.is_set():
                return
            shard = f"user_{rng.randint(1, 3)}"
            k = rng.randrange(1, 400)
            r = rng.random()
            if r < 0.3:
                cur.execute(INSERT[shard], (rng.randrange(1, 800), f"i{i}", rng.randrange(100)))
            elif r < 0.55:
                cur.execute(f"UPDATE {shard} SET name = %s WHERE id = %s", (f"u{i}", k))
            elif r < 0.65:
                cur.execute(f"DELETE FROM {shard} WHERE id = %s", (k,))
            elif r < 0.8:  # key move, often onto an id another shard also has
                cur.execute(f"UPDATE IGNORE {shard} SET id = %s WHERE id = %s", (rng.randrange(1, 800), k))
            else:
                conn.begin()
                for s in SHARDS:
                    cur.execute(f"UPDATE {s} SET name = %s WHERE id = %s", (f"t{i}", k))
                conn.commit()


def _sink(cfg, name) -> DeltaTable:
    return DeltaTable(table_uri(cfg.sink.path, f"{name}.user"))


def _stream_commits(dt: DeltaTable) -> int:
    return sum(1 for c in dt.history() if OFFSET_KEY in c)


def test_three_shards_snapshot_stream_schema_change_restart(db, spark, make_config):
    started = time.monotonic()
    name, conn = db
    with conn.cursor() as cur:
        for shard, cols in SHARDS.items():
            cur.execute(f"CREATE TABLE {shard} ({cols})")
            # The same ids 1..299 in every shard: keys collide across shards.
            cur.executemany(INSERT[shard], [(i, f"{shard}-{i}", i % 50) for i in range(1, 300)])
        cur.execute("UPDATE user_1 SET note = 'n'")  # columns later dropped or renamed: not in the workload's inserts
        cur.execute("UPDATE user_3 SET born = '2001-02-03' + INTERVAL id DAY")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")  # unrouted, same pipeline
        cur.executemany("INSERT INTO other VALUES (%s, %s)", [(i, i) for i in range(50)])
    cfg = make_config(name, chunk_size=100, routes=[{"source": rf"{name}\.user_\d+", "sink": f"{name}.user"}],
                      stream={"max_batch_rows": 100_000, "max_batch_seconds": 30})
    shards = [f"{name}.{s}" for s in SHARDS]
    settings = connection_settings(cfg)

    # Snapshot under concurrent writes on every shard (per-source hand-off filters).
    stop = threading.Event()
    writer = threading.Thread(target=_shard_workload, args=(settings, name, 1, 100_000, stop))
    writer.start()
    try:
        summary = snapshot(cfg, spark)
    finally:
        stop.set()
        writer.join()
    assert {s.table for s in summary.tables} == {*shards, f"{name}.other"}
    sink = _sink(cfg, name)
    schema = pa.schema(sink.schema().to_arrow())
    assert schema.names == ["id", "name", "score", "note", "amount", "born", CDC_SOURCE, "_cdc_op", "_cdc_seq"]
    assert (schema.field("id").type, schema.field("score").type, schema.field("amount").type) == (
        pa.int64(), pa.int64(), pa.decimal128(12, 4))
    assert not (pa.schema(DeltaTable(table_uri(cfg.sink.path, f"{name}.other")).schema().to_arrow()).names
                .count(CDC_SOURCE))  # unrouted tables are unchanged
    version = sink.version()
    assert snapshot(cfg, spark).tables and _sink(cfg, name).version() == version  # a re-run is a no-op

    # Stream: the backlog since the snapshot's low watermarks plus more changes, in one batch:
    # every shard's changes go into the sink in ONE commit (one MERGE).
    _shard_workload(settings, name, 2, 400)
    with conn.cursor() as cur:
        cur.execute("UPDATE other SET v = v + 1 WHERE id < 10")
    first = StreamEngine(cfg, until_now=True).run()
    assert _stream_commits(_sink(cfg, name)) == 1 and first.commits == 2, first
    assert all(first.tables.get(s) for s in shards)
    assert_equal(cfg, [*shards, f"{name}.other"], widened=True)  # the sink holds every shard's widest type

    # Schema changes on single shards mid-stream, with writes before and after; a new shard.
    _shard_workload(settings, name, 3, 150)
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE user_2 ADD COLUMN c VARCHAR(10) DEFAULT 'dflt'")
        cur.execute("UPDATE user_2 SET c = 'set' WHERE id < 20")
        cur.execute("INSERT INTO user_2 (id, name, c) VALUES (5000, 'after', 'c5000')")
        cur.execute("ALTER TABLE user_3 ADD COLUMN score INT NOT NULL DEFAULT 5")  # a column other shards have
        cur.execute("UPDATE user_3 SET score = 77 WHERE id < 10")
        cur.execute("ALTER TABLE user_1 DROP COLUMN note")  # kept in the sink: routed columns are never dropped
        cur.execute("ALTER TABLE user_3 RENAME COLUMN born TO birth")  # birth filled from born in user_3's rows
        cur.execute("ALTER TABLE user_1 MODIFY score DECIMAL(30,2)")  # the sink's score widens for every shard
        cur.execute("UPDATE user_1 SET score = 12345678901234567890.25 WHERE id = 3")
        cur.execute("CREATE TABLE user_4 (id INT PRIMARY KEY, name VARCHAR(20), z INT)")
        cur.executemany("INSERT INTO user_4 VALUES (%s, %s, %s)", [(i, f"n{i}", i) for i in range(1, 30)])
    _shard_workload(settings, name, 4, 150)
    StreamEngine(cfg, until_now=True).run()
    shards.append(f"{name}.user_4")
    assert_equal(cfg, [*shards, f"{name}.other"], widened=True)  # the sink holds every shard's widest type
    schema = pa.schema(_sink(cfg, name).schema().to_arrow())
    assert set(schema.names) == {"id", "name", "score", "note", "amount", "born", "birth", "c", "z", CDC_SOURCE,
                                 "_cdc_op", "_cdc_seq"}  # the union of every shard's columns, nothing dropped
    assert schema.field("score").type == pa.decimal128(30, 2)
    rows = _sink(cfg, name).to_pyarrow_table().to_pylist()
    keys = [(r[CDC_SOURCE], r["id"]) for r in rows]
    assert len(keys) == len(set(keys))  # (_cdc_source, id) is unique
    assert len({r["id"] for r in rows}) < len(rows)  # while ids alone repeat across shards
    by = {(r[CDC_SOURCE].split(".")[1], r["id"]): r for r in rows}
    assert by[("user_2", 5000)]["c"] == "c5000" and all(
        r["c"] is None for (s, _), r in by.items() if s != "user_2")  # other shards' rows: NULL
    assert all(r["c"] in ("dflt", "set", "c5000") or r["c"] is None for (s, _), r in by.items() if s == "user_2")
    assert {r["score"] for (s, _), r in by.items() if s == "user_3"} <= {5, 77}  # user_3's own, not other shards'
    assert any(r["note"] == "n" for (s, _), r in by.items() if s == "user_1")  # dropped in user_1, kept in Delta

    # Restart: a second run applies only the changes made since; TRUNCATE of one shard
    # removes that shard's rows only.
    made = 0
    with conn.cursor() as cur:
        made += cur.execute("UPDATE user_1 SET name = CONCAT(COALESCE(name, ''), '!') WHERE id BETWEEN 1 AND 40")
        made += cur.execute("DELETE FROM user_2 WHERE id BETWEEN 100 AND 120")
        made += cur.executemany(INSERT["user_3"], [(9000 + i, "r", Decimal("1.5")) for i in range(7)])
        cur.execute("TRUNCATE TABLE user_4")
        made += cur.execute("INSERT INTO user_4 VALUES (1, 'again', 1)")
    again = StreamEngine(cfg, until_now=True).run()
    assert again.changes == made, (again.changes, made)
    assert_equal(cfg, [*shards, f"{name}.other"], widened=True)  # the sink holds every shard's widest type
    assert StreamEngine(cfg, until_now=True).run().changes == 0

    status = {t["table"]: t for t in pipeline_status(cfg)["tables"]}
    assert status[f"{name}.user_1"]["sink"] == f"{name}.user" and status[f"{name}.other"]["sink"] == f"{name}.other"
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM user_4")
        assert status[f"{name}.user_4"]["rows"] == cur.fetchone()[0] == 1
    print(f"\nroutes end to end: {time.monotonic() - started:.1f} s")


def test_route_config_errors_name_the_tables(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k_1 (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE k_2 (code VARCHAR(10) PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE t_1 (id INT PRIMARY KEY, v DATE)")
        cur.execute("CREATE TABLE t_2 (id INT PRIMARY KEY, v INT)")
    cfg = make_config(name, source={"startup": {"mode": "latest"}},
                      routes=[{"source": rf"{name}\.k_\d", "sink": f"{name}.k"},
                              {"source": rf"{name}\.t_\d", "sink": f"{name}.t"}])
    problems = [p for p in check(cfg) if p.startswith("routes:")]
    assert len(problems) == 2, problems
    assert f"{name}.k_1 (id), {name}.k_2 (code)" in problems[0]
    assert f"column 'v' of {name}.t" in problems[1] and f"{name}.t_1 (date)" in problems[1]
    assert f"{name}.t_2 (int" in problems[1]
    with pytest.raises(StartupError, match=rf"different row keys: {name}\.k_1 \(id\), {name}\.k_2 \(code\)"):
        StreamEngine(cfg, until_now=True).run()
    with pytest.raises(RouteError, match=rf"column 'v' of {name}\.t"):
        SnapshotJob(cfg, spark).run()


def _stream_while(cfg, conn, statements: list[str], done) -> BaseException | None:
    """Run the engine in the background, execute ``statements`` once it streams (so their
    DDL is met by the running stream), stop it when ``done()`` or when it fails; returns its error."""
    engine, error = EngineThread(StreamEngine(cfg)), None
    engine.start()
    try:
        engine.wait_streaming()
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
        deadline = time.monotonic() + 30
        while engine.is_alive() and not done() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        try:
            engine.stop(60)
        except Exception as e:  # noqa: BLE001 - handed to the test, which checks what stopped the engine
            error = e
    return error


def test_new_tables_that_cannot_join_a_route_are_not_streamed(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE x_1 (id INT PRIMARY KEY, v INT)")
    routes = [{"source": rf"{name}\.x_\d", "sink": f"{name}.x"}]
    cfg = make_config(name, pipeline={"schema_change_behavior": "evolve"}, source={"startup": {"mode": "latest"}},
                      routes=routes)
    store = ControlStore(cfg.sink.path, cfg.pipeline.name)

    def creates() -> dict[str, str]:
        return {r.table: r.detail for r in store.schema_history() if r.kind == "create_table"}

    error = _stream_while(cfg, conn, [
        "INSERT INTO x_1 VALUES (1, 1), (2, 2)",
        "CREATE TABLE x_2 (code VARCHAR(5) PRIMARY KEY, v INT)",  # another key than the route's
        "INSERT INTO x_2 VALUES ('a', 1)",
        "CREATE TABLE x (id INT PRIMARY KEY, v INT)",  # unrouted, named like the sink: must never overwrite it
        "INSERT INTO x VALUES (7, 7)",
        "INSERT INTO x_1 VALUES (3, 3)",
    ], lambda: len(creates()) >= 2)
    assert error is None
    recorded = creates()
    assert "different row keys" in recorded[f"{name}.x_2"] and "not streamed" in recorded[f"{name}.x_2"]
    assert "also a captured table" in recorded[f"{name}.x"]
    # A restart refuses to start while they are captured, naming them (as for tables without a key).
    with pytest.raises(StartupError, match=rf"sink {name}\.x is also a captured table.*{name}\.x_2 \(code\)"):
        StreamEngine(cfg, until_now=True).run()
    cfg = cfg.model_copy(update={"source": cfg.source.model_copy(
        update={"exclude_tables": [rf"{name}\.x", rf"{name}\.x_2"]})})
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, [f"{name}.x_1"])
    rows = DeltaTable(table_uri(cfg.sink.path, f"{name}.x")).to_pyarrow_table().to_pylist()
    assert sorted((r[CDC_SOURCE], r["id"]) for r in rows) == [(f"{name}.x_1", i) for i in (1, 2, 3)]

    # Under evolve, a type change no column can share with the other sources stops the stream.
    error = _stream_while(cfg, conn, ["CREATE TABLE x_3 (id INT PRIMARY KEY, v INT)", "ALTER TABLE x_3 MODIFY v DATE"],
                          lambda: False)
    assert isinstance(error, SchemaChangeRejected), error
    assert re.search(r"column v is int32 in the routed table.*x_3's date32", str(error)), error
