"""The DDL matrix: each schema change interleaved with inserts and updates before and
after it in one stream, under every schema_change_behavior; Delta's schema and every
row are what the behaviour promises (pipelines/schema/applier.py)."""

from __future__ import annotations

import dataclasses
import re
import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.history import HistoryEntry, Status
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from cdc_core.types.mapping import arrow_type
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.reconcile.rows import compare
from pipelines.schema.applier import SchemaChangeRejected
from pipelines.stream import StreamEngine
from tests.helpers import EngineThread, Worker, diff_tables

BASE = "id INT PRIMARY KEY, a INT, s VARCHAR(10), d DECIMAL(6,2)"
# case → (DDL with {t}, statements after it); before every DDL: 3 inserts and an update.
CASES = {
    "add_nullable": ("ALTER TABLE {t} ADD COLUMN n VARCHAR(20) AFTER a",
        ["INSERT INTO {t} (id, a, n) VALUES (10, 1, 'new')"]),
    "add_default": ("ALTER TABLE {t} ADD COLUMN n INT NOT NULL DEFAULT 7 FIRST",
        ["INSERT INTO {t} (id, n) VALUES (10, 3)"]),
    "drop_col": ("ALTER TABLE {t} DROP COLUMN s",
        ["INSERT INTO {t} (id, a) VALUES (10, 5)", "UPDATE {t} SET a = 9 WHERE id = 1"]),
    "rename_col": ("ALTER TABLE {t} RENAME COLUMN s TO s2", ["INSERT INTO {t} (id, s2) VALUES (10, 'r')"]),
    "change_col": ("ALTER TABLE `{t}` CHANGE s s3 VARCHAR(40)", ["UPDATE {t} SET s3 = 'changed' WHERE id = 2"]),
    "widen_int": ("ALTER TABLE {t} MODIFY a BIGINT", ["INSERT INTO {t} (id, a) VALUES (10, 50000000000)"]),
    "widen_varchar": ("ALTER TABLE {t} MODIFY COLUMN s VARCHAR(100)",
        ["INSERT INTO {t} (id, s) VALUES (10, REPEAT('x', 90))"]),
    "decimal_up": ("ALTER TABLE {t} MODIFY d DECIMAL(12,4)", ["INSERT INTO {t} (id, d) VALUES (10, 12345678.1234)"]),
    "multi": ("/* two at once */ ALTER TABLE {db}.{t} ADD COLUMN m1 INT, ADD m2 DATE, DROP COLUMN d",
              ["INSERT INTO {t} (id, m1, m2) VALUES (10, 1, '2024-02-29')"]),
    "trunc": ("TRUNCATE TABLE {t}", ["INSERT INTO {t} (id, a) VALUES (10, 1)"]),
}
DROPPED = {"drop_col": ["s"], "rename_col": ["s"], "change_col": ["s"], "multi": ["d"]}


def _run_matrix(db, make_config, behavior: str):
    name, conn = db
    with conn.cursor() as cur:
        for case in CASES:
            cur.execute(f"CREATE TABLE {case} ({BASE})")
    cfg = make_config(name, pipeline={"schema_change_behavior": behavior, "name": f"m_{behavior}_{name}"},
                      source={"startup": {"mode": "latest"}})
    StreamEngine(cfg, until_now=True).run()  # creates the Delta tables, checkpoint at the binlog end
    before = {case: DeltaTable(table_uri(cfg.sink.path, f"{name}.{case}")).schema().to_arrow() for case in CASES}
    with conn.cursor() as cur:
        write_matrix(cur, name)
    return cfg, name, before


def write_matrix(cur, database: str) -> None:
    """Each case's writes before its DDL, the DDL, and its writes after (bench/schema_hold.py too)."""
    for case, (ddl, after) in CASES.items():
        cur.executemany(f"INSERT INTO {case} VALUES (%s, %s, %s, %s)", [(i, i, f"s{i}", i / 4) for i in (1, 2, 3)])
        cur.execute(f"UPDATE {case} SET a = a + 100 WHERE id = 3")
        cur.execute(ddl.format(t=case, db=database))
        for stmt in after:
            cur.execute(stmt.format(t=case))


def _delta(cfg, name, case) -> DeltaTable:
    return DeltaTable(table_uri(cfg.sink.path, f"{name}.{case}"))


def _mysql_schema(cfg, name, case):
    with connect(connection_settings(cfg)) as c, c.cursor() as cur:
        return describe_table(cur, name, case)


@pytest.mark.parametrize("behavior", ["evolve", "try_evolve"])
def test_evolve_applies_every_change_as_is(db, make_config, behavior):
    cfg, name, _ = _run_matrix(db, make_config, behavior)
    StreamEngine(cfg, until_now=True).run()
    diffs = [d for d in diff_tables(cfg, [f"{name}.{c}" for c in CASES]) if not d.equal]
    assert not diffs, "\n".join(d.describe() for d in diffs)
    for case in CASES:
        mysql = _mysql_schema(cfg, name, case)
        delta = pa.schema(_delta(cfg, name, case).schema().to_arrow())
        source_columns = sorted(f.name for f in delta if not f.name.startswith("_cdc_"))
        assert source_columns == sorted(c.name for c in mysql.columns), case  # same columns (order may differ)
        for col in mysql.columns:
            assert delta.field(col.name).type == arrow_type(col), (case, col.name)


def test_lenient_keeps_columns_and_holds_mysql_values(db, make_config):
    cfg, name, _ = _run_matrix(db, make_config, "lenient")
    StreamEngine(cfg, until_now=True).run()
    diffs = [d for d in diff_tables(cfg, [f"{name}.{c}" for c in CASES]) if not d.equal]
    assert not diffs, "\n".join(d.describe() for d in diffs)
    for case, dropped in DROPPED.items():
        delta = _delta(cfg, name, case)
        names = pa.schema(delta.schema().to_arrow()).names
        assert all(c in names for c in dropped), (case, names)  # never dropped in Delta
        rows = {r["id"]: r for r in delta.to_pyarrow_table().to_pylist()}
        if case in ("rename_col", "change_col"):  # old column kept with the values rows had
            assert rows[1]["s"] == "s1"
    renamed = {r["id"]: r for r in _delta(cfg, name, "rename_col").to_pyarrow_table().to_pylist()}
    assert renamed[1]["s2"] == "s1" and renamed[10]["s2"] == "r" and renamed[10]["s"] is None
    added = {r["id"]: r["n"] for r in _delta(cfg, name, "add_default").to_pyarrow_table().to_pylist()}
    assert added == {1: 7, 2: 7, 3: 7, 10: 3}  # existing rows at the DEFAULT, as in MySQL
    history = ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history()
    held = [r.held_ms for r in history if r.status in ("applied", "skipped") and r.held_ms is not None]
    assert len(held) >= len(CASES) - 1
    print(f"\nheld ms (lenient matrix): p50 {sorted(held)[len(held) // 2]:.0f}, max {max(held):.0f}")


# Under ignore, a value Delta's kept, older type cannot hold is written as NULL
# (pipelines/lake/conform.py: conform): (case, id, column).
DOES_NOT_FIT = {("widen_int", 10, "a"), ("decimal_up", 10, "d")}


def test_ignore_keeps_delta_schema(db, make_config):
    cfg, name, before = _run_matrix(db, make_config, "ignore")
    StreamEngine(cfg, until_now=True).run()
    with connect(connection_settings(cfg)) as c, c.cursor() as cur:
        for case in CASES:
            delta = _delta(cfg, name, case)
            assert pa.schema(delta.schema().to_arrow()) == pa.schema(before[case]), case
            mysql = describe_table(cur, name, case)
            kept = dataclasses.replace(mysql, columns=tuple(
                col for col in mysql.columns if col.name in pa.schema(before[case]).names))
            # Every row, every column Delta kept, against MySQL's value now (canonical, as reconcile does).
            diff = compare(cur, kept, table_uri(cfg.sink.path, f"{name}.{case}"))
            assert not (diff.missing or diff.extra) and diff.mysql_rows == diff.delta_rows, diff.describe()
            assert sorted((case, k[0], col, got) for k, col, _, got in diff.different) == sorted(
                (*x, None) for x in DOES_NOT_FIT if x[0] == case), diff.describe()


def test_exception_stops_at_the_first_change_with_the_statement(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE x ({BASE})")
    cfg = make_config(name, pipeline={"schema_change_behavior": "exception"}, source={"startup": {"mode": "latest"}})
    StreamEngine(cfg, until_now=True).run()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE y (id INT PRIMARY KEY)")  # create_table passes under exception
        cur.execute("INSERT INTO y VALUES (1)")
        cur.execute("INSERT INTO x (id) VALUES (1)")
        cur.execute("ALTER TABLE x ADD COLUMN z INT")
        cur.execute("INSERT INTO x (id, z) VALUES (2, 2)")
    with pytest.raises(SchemaChangeRejected, match=r"exception.*add column z.*ALTER TABLE x ADD COLUMN z INT"):
        StreamEngine(cfg, until_now=True).run()
    ids = _delta(cfg, name, "x").to_pyarrow_table().column("id").to_pylist()
    assert ids == [1]  # everything before the DDL is committed, nothing after it
    assert _delta(cfg, name, "y").to_pyarrow_table().column("id").to_pylist() == [1]


def test_two_ddls_on_two_tables_in_one_batch_and_restart_before_apply(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE p ({BASE})")
        cur.execute(f"CREATE TABLE q ({BASE})")
    cfg = make_config(name, source={"startup": {"mode": "latest"}}, stream={"max_batch_seconds": 30})
    StreamEngine(cfg, until_now=True).run()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO p (id, a) VALUES (1, 1)")
        cur.execute("ALTER TABLE p ADD COLUMN pn INT DEFAULT 4")
        cur.execute("INSERT INTO q (id, a) VALUES (1, 1)")
        cur.execute("ALTER TABLE q RENAME COLUMN s TO qs")
        cur.execute("INSERT INTO p (id, pn) VALUES (2, 5)")
        cur.execute("INSERT INTO q (id, qs) VALUES (2, 'q')")
    # A stream stopped right after the first DDL's position (a crash between DDL and apply
    # is the same: the checkpoint is before the DDL and the DDL is read again).
    with connect(connection_settings(cfg)) as c, c.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        cur.execute("SHOW BINLOG EVENTS IN %s", (cur.fetchone()[0],))
        events = cur.fetchall()
    first_ddl = next(e for e in events if "ADD COLUMN pn" in str(e[5]))
    store = ControlStore(cfg.sink.path, cfg.pipeline.name)
    store.record_schema(HistoryEntry(f"{name}.p", BinlogPosition(first_ddl[0], first_ddl[4]), 0, "add_column",
                                     Status.PENDING, description="left pending by a crash"))
    StreamEngine(cfg, until_now=True).run()
    diffs = [d for d in diff_tables(cfg, [f"{name}.p", f"{name}.q"]) if not d.equal]
    assert not diffs, "\n".join(d.describe() for d in diffs)
    statuses = [(r.table, r.status) for r in store.schema_history() if r.kind != "baseline"]
    assert (f"{name}.p", "applied") in statuses and (f"{name}.q", "applied") in statuses


def test_alter_on_200k_rows_while_writes_continue(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE big ({BASE})")
    cfg = make_config(name, source={"startup": {"mode": "latest"}})
    StreamEngine(cfg, until_now=True).run()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO big (id, a, s) SELECT seq, seq, 'x' FROM seq_1_to_200000")
    stop = threading.Event()

    def writer() -> int:
        i = 300_000
        with connect(connection_settings(cfg), database=name) as c, c.cursor() as cur:
            while not stop.is_set():
                i += 1
                cur.execute("INSERT INTO big (id, a) VALUES (%s, 1)", (i,))
                cur.execute("UPDATE big SET a = a + 1 WHERE id = %s", (i % 200_000 + 1,))
        return i - 300_000

    t = Worker(writer, name="writer")
    t.start()
    engine = EngineThread(StreamEngine(cfg))
    engine.start()
    try:
        time.sleep(2)  # writes before the ALTER, for the stream to read live
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE big ADD COLUMN extra VARCHAR(10) DEFAULT 'e', MODIFY a BIGINT")
        time.sleep(3)  # and after it
    finally:
        stop.set()
        engine.stop()
    assert t.join() > 0  # the writer's failure, if it failed
    StreamEngine(cfg, until_now=True).run()
    diffs = [d for d in diff_tables(cfg, [f"{name}.big"]) if not d.equal]
    assert not diffs, "\n".join(d.describe() for d in diffs)
    held = [r.held_ms for r in ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history()
            if r.held_ms is not None]
    print(f"\nheld ms on 200k rows: {held}")


def test_new_table_and_rename_into_capture(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE outside_x (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO outside_x VALUES (1)")
    cfg = make_config(name, source={"startup": {"mode": "latest"}, "tables": [rf"{name}\.t_.*"]})
    StreamEngine(cfg, until_now=True).run()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t_new (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO t_new VALUES (1, 1), (2, 2)")
        cur.execute("UPDATE t_new SET v = 3 WHERE id = 2")
        cur.execute("RENAME TABLE outside_x TO t_renamed")
        cur.execute("INSERT INTO t_renamed VALUES (2)")
    StreamEngine(cfg, until_now=True).run()
    assert all(d.equal for d in diff_tables(cfg, [f"{name}.t_new"]))
    history = ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history()
    backfill = [r for r in history if r.table == f"{name}.t_renamed"]
    assert backfill and "backfill" in backfill[0].detail
    # It entered with a row Delta never saw: the stream backfilled it online (tests/test_backfill.py).
    requests = ControlStore(cfg.sink.path, cfg.pipeline.name).backfills()
    assert [(r.table, str(r.state)) for r in requests] == [(f"{name}.t_renamed", "done")]
    assert all(d.equal for d in diff_tables(cfg, [f"{name}.t_renamed"]))
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t_renamed VALUES (3)")
    StreamEngine(cfg, until_now=True).run()  # after a restart it streams like any captured table
    assert DeltaTable(table_uri(cfg.sink.path, f"{name}.t_new")).version() >= 1
    assert all(d.equal for d in diff_tables(cfg, [f"{name}.t_new", f"{name}.t_renamed"]))
    from pipelines.status import pipeline_status

    phases = {t["table"]: t["phase"] for t in pipeline_status(cfg)["tables"]}
    assert phases[f"{name}.t_renamed"].startswith("streaming")


@pytest.mark.parametrize("behavior", ["exception", "lenient"])
def test_unparsed_ddl_on_a_captured_table_is_never_skipped_silently(db, make_config, behavior):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE u ({BASE})")
    cfg = make_config(name, pipeline={"schema_change_behavior": behavior}, source={"startup": {"mode": "latest"}})
    StreamEngine(cfg, until_now=True).run()
    ddl = "ALTER TABLE u ADD COLUMN v VARCHAR(36) DEFAULT (UUID())"  # existing rows: a value per row, by the server
    with conn.cursor() as cur:
        cur.execute("INSERT INTO u (id) VALUES (1)")
        cur.execute(ddl)
    if behavior == "exception":
        with pytest.raises(SchemaChangeRejected, match=r"cannot be parsed: " + re.escape(ddl)):
            StreamEngine(cfg, until_now=True).run()
    else:
        StreamEngine(cfg, until_now=True).run()
    unparsed = [r for r in ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history()
                if r.status == "unparsed"]
    assert [(r.table, r.ddl) for r in unparsed] == [(f"{name}.u", ddl)]
