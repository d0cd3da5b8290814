"""MariaDB's ``log_bin_compress``: row events and statements past a size are written
compressed, which python-mysql-replication does not decode. Before, the reader skipped them
as events it did not know, and their rows were lost without a word (50 inserts of 1 kB rows:
Delta held 0 of MySQL's 50 rows). Now ``validate`` refuses the setting and every reader that
meets such an event stops, naming it (cdc_core/binlog/undecodable.py: COMPRESSED_EVENTS):
the stream, a chunk window and failover's transaction scan at compressed rows; the readers
that read no rows (the statement and start scans) at a compressed statement only. On a server
of its own: a compressed statement in the shared server's binlog would stop every later start
scan from its first binlog."""

from __future__ import annotations

import pytest

from cdc_core.binlog.event_source import server_source
from cdc_core.binlog.range_reads import read_changes, read_statements
from cdc_core.binlog.undecodable import CompressedBinlog
from cdc_core.offset.failover import transaction_spans
from cdc_core.offset.position import master_position
from cdc_core.offset.startup import start_in
from cdc_core.source.connection import connection_settings
from cdc_core.source.validate import check
from devtools.local_mariadb import LocalMariaDB
from pipelines.stream.engine import StreamFailed
from tests.test_stream import stream_until_now


@pytest.fixture
def server(tmp_path):
    own = LocalMariaDB(base_dir=tmp_path / "server").start()
    yield own
    own.cleanup()


def test_compressed_events_are_refused_never_skipped(server, make_config):
    name = "compressed"
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
        cur.execute(f"USE {name}")
        at = master_position(cur)
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(2000))")
        cur.execute("SET GLOBAL log_bin_compress = ON")
        try:
            cfg = make_config(name, source={"port": server.port,
                                            "startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
            assert any("log_bin_compress is ON" in p for p in check(cfg))
            cur.execute("INSERT INTO s SELECT seq, REPEAT('x', 1000) FROM seq_1_to_50")
            rows_end = master_position(cur)
            cur.execute(f"CREATE TABLE long_statement (id INT PRIMARY KEY) COMMENT '{'c' * 600}'")
        finally:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
        end = master_position(cur)
        cur.execute("SELECT @@gtid_binlog_pos")
        last_gtid = cur.fetchone()[0]
    assert not any("log_bin_compress" in p for p in check(cfg))
    with pytest.raises(StreamFailed, match="compressed .*log_bin_compress"):
        stream_until_now(cfg)
    settings, server_id = connection_settings(cfg), cfg.source.server_id + 9
    with pytest.raises(CompressedBinlog, match="WRITE_ROWS_COMPRESSED"):
        list(read_changes(settings, server_id, at, end, {(name, "s")}))
    with pytest.raises(CompressedBinlog, match="WRITE_ROWS_COMPRESSED"):
        transaction_spans(settings, server_id, at, end, {last_gtid}, lambda db, table: True)
    # No rows read: compressed rows hide nothing of what is read, a compressed statement does.
    assert [s.sql for s in read_statements(settings, server_id, at, rows_end)] == [
        "CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(2000))"]
    assert start_in(server_source(settings, server_id), at, rows_end, timestamp_ms=10**15) is None  # read through
    with pytest.raises(CompressedBinlog, match=r"QUERY_COMPRESSED_EVENT, type 165\).*log_bin_compress is ON"):
        list(read_statements(settings, server_id, at, end))
    with pytest.raises(CompressedBinlog, match="QUERY_COMPRESSED_EVENT"):
        start_in(server_source(settings, server_id), at, end, timestamp_ms=10**15)
