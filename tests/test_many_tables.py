"""Many tables, run as a user runs them (``binlake snapshot``, ``binlake stream`` in subprocesses):

- a snapshot of 50 small tables: Delta equals MySQL row by row for every table (the
  tables' baselines and plans are stored in one commit each, their sink tables created and
  committed in parallel: pipelines/snapshot/plan.py, pipelines/snapshot/driver.py);
- one transaction touching all 50 tables, its batch's table commits running in parallel
  (pipelines/stream/commit.py), the stream SIGKILLed while one table's commit has not
  started and the others' have landed; after a restart Delta equals MySQL row by row for
  every table, and each table's committed changes equal the binlog's (nothing applied
  twice, nothing lost: tests/change_count.py);
- a first batch over 40 tables Delta has none of (their CREATE TABLE before the stream's start
  position: each table's first table map defines it): their baselines are recorded in one
  schema-history commit and their Delta tables created in parallel before the batch's data
  (pipelines/stream/schema_operator.py: ``open_new``). The stream SIGKILLed after the
  baselines, before any table is created; again after the tables are created, before any data
  commit: each restart ends with Delta equal to MySQL row by row for every table.

Exactness only, never wall-clock time: bench/many_tables.py measures the cost per table.
"""

from __future__ import annotations

from deltalake import DeltaTable

from cdc_core.offset.position import master_position
from cdc_core.offset.stream_offset import app_id
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import open_table, table_uri
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, write_config_file
from tests.pause_points import MARKER
from tests.test_stream_crash import Stream, run_stream, wait_for

TABLES = 50
ROWS = 5


def _stream_committed(cfg, names: list[str]) -> list[str]:
    """Tables with a stream commit (a Delta transaction of the pipeline; snapshot commits have none)."""
    return [n for n in names
            if DeltaTable(table_uri(cfg.sink.path, n)).transaction_version(app_id(cfg.pipeline.name)) is not None]


def test_transaction_touching_many_tables_killed_mid_batch(mariadb, db, make_config, tmp_path):
    name, conn = db
    names = [f"{name}.t{i:02d}" for i in range(TABLES)]
    with conn.cursor() as cur:
        for n in names:
            table = n.split(".", 1)[1]
            cur.execute(f"CREATE TABLE `{table}` (id INT PRIMARY KEY, v VARCHAR(20), counter INT NOT NULL)")
            cur.execute(f"INSERT INTO `{table}` VALUES " + ", ".join(f"({i}, 'v{i}', 0)" for i in range(1, ROWS + 1)))
    cfg = make_config(name, stream={"max_batch_seconds": 2.0})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    logs = tmp_path / "logs"

    snap = run_stream(config, logs, password=mariadb.password, command="snapshot")
    assert snap.proc.returncode == 0, snap.describe()
    assert_equal(cfg, names)

    # One transaction: an insert, an update and a delete in every table.
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        for n in names:
            table = n.split(".", 1)[1]
            cur.execute(f"INSERT INTO `{table}` VALUES ({ROWS + 1}, 'new', 0)")
            cur.execute(f"UPDATE `{table}` SET v = 'updated', counter = counter + 1 WHERE id = 1")
            cur.execute(f"DELETE FROM `{table}` WHERE id = 2")
        cur.execute("COMMIT")

    # Paused at the start of the batch's 25th table commit; the other 49 commit in parallel.
    s = Stream(config, logs, password=mariadb.password, pause=f"table_commit:{TABLES // 2}")
    try:
        wait_for(lambda: MARKER in s.stderr or not s.alive(), 180, "the stream to reach a table commit")
        assert s.alive() and MARKER in s.stderr, s.describe()
        wait_for(lambda: len(_stream_committed(cfg, names)) == TABLES - 1, 120, "the other tables' commits")
    finally:
        s.kill()
    torn = [n for n in names if n not in _stream_committed(cfg, names)]
    assert len(torn) == 1, torn
    landed = next(n for n in names if n not in torn)
    applied = DeltaTable(table_uri(cfg.sink.path, landed)).transaction_version(app_id(cfg.pipeline.name))
    cp = ControlStore.of(cfg).checkpoint()
    assert cp is None or cp.offset.applied.seq() < applied, "the checkpoint moved past a batch not all committed"

    final = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert final.proc.returncode == 0, final.describe()
    assert "Traceback" not in final.stdout + final.stderr
    assert_equal(cfg, names)
    assert _stream_committed(cfg, names) == names
    assert_changes_counted(cfg, names)


NEW_TABLES = 40


def test_first_batch_over_many_new_tables_killed_between_its_steps(mariadb, db, make_config, tmp_path):
    name, conn = db
    names = [f"{name}.n{i:02d}" for i in range(NEW_TABLES)]
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # the stream starts after the tables exist: unknown to it
        for n in names:
            cur.execute(f"CREATE TABLE `{n.split('.', 1)[1]}` (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("SET SESSION sql_log_bin = 1")
        at = master_position(cur)
        for k in range(3):  # three transactions, each a row in every table
            cur.execute("BEGIN")
            for n in names:
                cur.execute(f"INSERT INTO `{n.split('.', 1)[1]}` VALUES ({k + 1}, 'v{k}')")
            cur.execute("COMMIT")
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}},
                      stream={"max_batch_seconds": 600})
    config = write_config_file(cfg, tmp_path / "binlake.yaml")
    logs = tmp_path / "logs"

    def killed_at(point: str) -> None:
        s = Stream(config, logs, "--until", "now", password=mariadb.password, pause=point)
        try:
            wait_for(lambda: MARKER in s.stderr or not s.alive(), 180, f"the stream to reach {point}")
            assert s.alive() and MARKER in s.stderr, s.describe()
        finally:
            s.kill()

    # Killed after the baselines' one commit, before any Delta table is created.
    killed_at("baselines_recorded")
    baselines = {e.table for e in ControlStore.of(cfg).schema_history() if e.kind == "baseline"}
    assert baselines == set(names)
    assert not [n for n in names if open_table(table_uri(cfg.sink.path, n)) is not None]

    # Restarted, killed again once the tables exist, before any of their data is committed.
    killed_at("batch_read")
    assert all(open_table(table_uri(cfg.sink.path, n)) is not None for n in names)
    assert _stream_committed(cfg, names) == []

    final = run_stream(config, logs, "--until", "now", password=mariadb.password)
    assert final.proc.returncode == 0, final.describe()
    assert "Traceback" not in final.stdout + final.stderr
    assert_equal(cfg, names)
    assert _stream_committed(cfg, names) == names
    assert_changes_counted(cfg, names, start=at)  # each change committed once, from the start position
