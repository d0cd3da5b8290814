"""Row changes the binlog holds as SQL: a session may set ``binlog_format`` to STATEMENT (or
MIXED) although the server's is ROW, and its INSERT, UPDATE or DELETE is then written as a
statement, without its rows. Before, the stream skipped such statements and Delta missed
their changes; now every streamed table one may have written is backfilled online. A LOAD DATA
written as SQL is not even a QueryEvent but an EXECUTE_LOAD_QUERY event, whose SQL the event
loop reads itself (cdc_core/binlog/event_loop.py): before, the stream passed over it unseen."""

from cdc_core.binlog.range_reads import read_statements
from cdc_core.offset.position import master_position
from cdc_core.source.connection import connection_settings
from pipelines.lake.control_store import ControlStore
from tests.helpers import assert_equal
from tests.test_stream import stream_until_now


def test_rows_written_by_statement_format_sessions_are_backfilled(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO s VALUES (1, 1), (2, 2)")
        cur.execute("INSERT INTO other VALUES (1, 1)")
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute("INSERT INTO s VALUES (3, 3)")
        cur.execute("UPDATE s SET v = 10 WHERE id = 1")
        cur.execute("DELETE FROM s WHERE id = 2")
        cur.execute("SET SESSION binlog_format = 'ROW'")
        cur.execute("UPDATE other SET v = 5")  # rows, as usual: streamed, not backfilled
        cur.execute("INSERT INTO s VALUES (4, 4)")  # after the statement: in the backfill or streamed after it
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    stream_until_now(cfg)  # --until now finishes the backfill it requested
    assert_equal(cfg, [f"{name}.s", f"{name}.other"])
    assert [(r.table, r.reason, str(r.state)) for r in ControlStore.of(cfg).backfills()] == [
        (f"{name}.s", "needed", "done")]


def test_a_load_data_written_as_sql_is_a_statement_and_its_table_is_backfilled(db, mariadb, make_config, tmp_path):
    name, conn = db
    data = tmp_path / "rows.csv"
    data.write_text("".join(f"{i},{i * 10}\n" for i in range(1, 6)))
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO s VALUES (100, 100)")
    loader = mariadb.connect(database=name, local_infile=True)
    with loader, loader.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE s FIELDS TERMINATED BY ','")
        end = master_position(cur)
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    loads = [s for s in read_statements(connection_settings(cfg), cfg.source.server_id + 9, at, end)
             if s.sql.startswith("LOAD DATA")]
    assert [(s.database, " INTO TABLE `s` " in s.sql) for s in loads] == [(name, True)]
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.s"])
    assert [(r.table, r.reason, str(r.state)) for r in ControlStore.of(cfg).backfills()] == [
        (f"{name}.s", "needed", "done")]
