"""The server flavour seam (cdc_core/source/flavour.py): MariaDB against the real server the
suite starts, MySQL 8.0 / 8.4 against tests/mysql_double.py, whose answers follow the MySQL
manual (SHOW BINARY LOG STATUS, 15.7.7.1: "added in MySQL 8.2.0 as a replacement for SHOW
MASTER STATUS"; the 8.4 page of SHOW MASTER STATUS: "no longer supported"; SHOW REPLICAS,
15.7.7.33: from 8.0.22, SHOW SLAVE HOSTS removed in 8.4; 8.4.0 release notes, "SQL statements
removed")."""

from __future__ import annotations

import pytest

from cdc_core.offset.gtid import GtidSet, server_gtids, server_purged
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.startup import ServerIdInUse, binlog_files, check_server_id, connected_replicas
from cdc_core.source.flavour import Flavour, flavour_of
from tests.mysql_double import UUID, MySqlDouble

# VERSION() and @@version_comment as servers answer them, and what binlake says to each.
SERVERS = [
    # version, comment, statement for the binlog end, for the replicas, GTID variable, monitor privilege
    ("10.11.19-MariaDB-0+deb12u1-log", "Debian 12", "SHOW MASTER STATUS", "SHOW SLAVE HOSTS", "gtid_binlog_pos",
     "BINLOG MONITOR"),
    ("5.5.5-10.4.32-MariaDB", "mariadb.org binary distribution", "SHOW MASTER STATUS", "SHOW SLAVE HOSTS",
     "gtid_binlog_pos", "REPLICATION CLIENT"),
    ("8.0.21", "MySQL Community Server - GPL", "SHOW MASTER STATUS", "SHOW SLAVE HOSTS", "gtid_executed",
     "REPLICATION CLIENT"),
    ("8.0.36", "MySQL Community Server - GPL", "SHOW MASTER STATUS", "SHOW REPLICAS", "gtid_executed",
     "REPLICATION CLIENT"),
    ("8.2.0", "MySQL Community Server - GPL", "SHOW BINARY LOG STATUS", "SHOW REPLICAS", "gtid_executed",
     "REPLICATION CLIENT"),
    ("8.4.3", "MySQL Community Server - GPL", "SHOW BINARY LOG STATUS", "SHOW REPLICAS", "gtid_executed",
     "REPLICATION CLIENT"),
    ("9.1.0", "MySQL Community Server - GPL", "SHOW BINARY LOG STATUS", "SHOW REPLICAS", "gtid_executed",
     "REPLICATION CLIENT"),
    ("8.0.35-27", "Percona Server (GPL), Release 27, Revision 2f8eeab2", "SHOW MASTER STATUS", "SHOW REPLICAS",
     "gtid_executed", "REPLICATION CLIENT"),
]


@pytest.mark.parametrize("version,comment,status_sql,replicas_sql,gtid_variable,monitor", SERVERS)
def test_statements_variables_and_privileges_per_server(version, comment, status_sql, replicas_sql, gtid_variable,
                                                       monitor):
    f = Flavour.parse(version, comment)
    assert (f.binlog_status_sql, f.replicas_sql, f.gtid_position_variable, f.monitor_privilege) == (
        status_sql, replicas_sql, gtid_variable, monitor)
    assert f.binary_logs_sql == "SHOW BINARY LOGS" and f.binlog_events_sql == "SHOW BINLOG EVENTS"
    assert f.stream_privilege == "REPLICATION SLAVE"
    assert f.mariadb == ("MariaDB" in version)
    assert f.gtid_purged_variable == (None if f.mariadb else "gtid_purged")
    assert f.snapshot_position == (f.mariadb or "Percona" in comment)  # binlog_snapshot_position reported


def test_aurora_version_text_is_mysql_8_0():
    f = Flavour.parse("8.0.mysql_aurora.3.05.2", "Source distribution")
    assert not f.mariadb and f.version == (8, 0, 0) and f.binlog_status_sql == "SHOW MASTER STATUS"


@pytest.mark.parametrize("version,statement", [("8.0.36", "SHOW MASTER STATUS"), ("8.4.3", "SHOW BINARY LOG STATUS")])
def test_binlog_end_through_the_seam_on_mysql(version, statement):
    server = MySqlDouble(version=version, binlogs=[("binlog.000003", 180), ("binlog.000004", 9151)])
    with server.connect() as conn, conn.cursor() as cur:
        assert master_position(cur, base=2) == BinlogPosition("binlog.000004", 9151, 2)
        assert master_position(cur) == BinlogPosition("binlog.000004", 9151)
        assert binlog_files(cur) == [("binlog.000003", 180), ("binlog.000004", 9151)]
    assert statement in server.sent
    assert server.sent.count("SELECT VERSION(), @@version_comment") == 1  # detected once per connection
    with server.connect() as conn, conn.cursor() as cur:  # a new connection (maybe another server): again
        assert flavour_of(cur).version_text == version
    assert server.sent.count("SELECT VERSION(), @@version_comment") == 2


def test_mysql_8_4_refuses_the_old_names():
    """Why the seam exists: 8.4 answers SHOW MASTER STATUS and SHOW SLAVE HOSTS with a syntax error."""
    import pymysql

    server = MySqlDouble(version="8.4.3")
    with server.connect() as conn, conn.cursor() as cur:
        for old in ("SHOW MASTER STATUS", "SHOW SLAVE HOSTS"):
            with pytest.raises(pymysql.err.ProgrammingError):
                cur.execute(old)


def test_replicas_and_server_id_on_mysql():
    server = MySqlDouble(version="8.4.3", replicas=[(77, "replica-a"), (5001, "binlake:other")])
    with server.connect() as conn, conn.cursor() as cur:
        assert connected_replicas(cur) == [(77, "replica-a"), (5001, "binlake:other")]
        check_server_id(cur, 78)
        check_server_id(cur, 5001, own="binlake:other")  # our own connection an outage left behind
        with pytest.raises(ServerIdInUse, match="in use by another replica"):
            check_server_id(cur, 77, wait_seconds=0)
        with pytest.raises(ServerIdInUse, match="source server's own server_id"):
            check_server_id(cur, 1)
    assert "SHOW REPLICAS" in server.sent and "SHOW SLAVE HOSTS" not in server.sent
    no_right = MySqlDouble(version="8.4.3", grants=["GRANT SELECT, REPLICATION CLIENT ON *.* TO `binlake`@`%`"])
    with no_right.connect() as conn, conn.cursor() as cur:
        assert connected_replicas(cur) is None  # the server then refuses a duplicate id itself
        check_server_id(cur, 77)


def test_gtid_sets_read_through_the_seam_on_mysql():
    server = MySqlDouble(variables={"gtid_executed": f"{UUID}:1-57,\n8a94f357-aab4-11df-86ab-c80aa9429562:1-3",
                                    "gtid_purged": f"{UUID}:1-9"})
    with server.connect() as conn, conn.cursor() as cur:
        have = server_gtids(cur)
        assert have.contains(f"{UUID}:57") and not have.contains(f"{UUID}:58")
        assert server_purged(cur) == GtidSet.parse(f"{UUID}:1-9")
    assert "SELECT @@GLOBAL.gtid_executed" in server.sent


def test_mariadb_through_the_seam(mariadb):
    with mariadb.connect() as conn, conn.cursor() as cur:
        f = flavour_of(cur)
        assert f.mariadb and f.snapshot_position and f.binlog_status_sql == "SHOW MASTER STATUS"
        end = master_position(cur)
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        assert end == BinlogPosition(file, int(pos))
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        position = GtidSet.parse(cur.fetchone()[0])
        assert server_gtids(cur) == position and position.mariadb is not False
        assert server_purged(cur) == GtidSet()
        assert connected_replicas(cur) is not None  # root may list them


def test_status_shows_the_sources_gtids(db, make_config):
    """``binlake status --json``'s ``source_gtids``: the server's own set, as it prints it."""
    from pipelines.status import pipeline_status

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1)")
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        expected = cur.fetchone()[0]
    stream = pipeline_status(make_config(name))["stream"]
    assert stream["source_gtids"] == str(GtidSet.parse(expected)) and stream["source_gtids"]
