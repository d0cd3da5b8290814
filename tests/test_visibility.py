"""The MySQL low watermark (cdc_core/offset/visibility.py): the binlog end E is returned only
after every GTID owned right after reading E is released and no anonymous transaction is in
flight. Against tests/mysql_double.py: @@GLOBAL.gtid_owned as MySQL 8.0 prints it
(Owned_gtids::to_string, sql/rpl_gtid.h: ``uuid:gno#thread`` per owned GTID, the UUID once per
run; 8.4 with its tag), Ongoing_anonymous_transaction_count as the MySQL 8.4 manual's "Server
Status Variables" describes it. MariaDB's side is tests/test_watermarks.py, on the server."""

from __future__ import annotations

import pytest

from cdc_core.errors import TransientError
from cdc_core.offset import visibility
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.visibility import owned_gtids, visible_position
from tests.mysql_double import UUID, MySqlDouble

U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"
END = BinlogPosition("binlog.000002", 4711)


def owned_reads(server: MySqlDouble) -> int:
    return server.sent.count("SELECT @@GLOBAL.gtid_owned")


def test_owned_gtids_as_mysql_prints_them():
    assert owned_gtids("") == set() and owned_gtids(None) == set()
    assert owned_gtids(f"{UUID}:58#12:59#13{U2}:3#14") == {(UUID, 58, 12), (UUID, 59, 13), (U2, 3, 14)}
    assert owned_gtids(f"{UUID.upper()}:Tag_1:5#3") == {(f"{UUID}:tag_1", 5, 3)}  # 8.4: tagged


@pytest.mark.parametrize("version", ["8.0.36", "8.4.3"])
def test_idle_server_returns_the_binlog_end_at_once(version):
    server = MySqlDouble(version=version)
    with server.connect() as conn, conn.cursor() as cur:
        assert visible_position(cur, base=3) == BinlogPosition(END.file, END.pos, 3)
    assert owned_reads(server) == 1
    assert "START TRANSACTION WITH CONSISTENT SNAPSHOT" not in server.sent  # MySQL reports no snapshot position


def test_waits_for_the_transactions_owned_right_after_the_end_and_no_others():
    """58 is between its binlog write and its commit when E is read; 60 and 61 start later and
    stay in flight: the wait ends when 58 is released, however busy the server stays."""
    reads = iter([f"{UUID}:58#12", f"{UUID}:58#12:60#15", f"{UUID}:60#15:61#16", f"{UUID}:61#16:62#17"])
    server = MySqlDouble(owned=reads)
    with server.connect() as conn, conn.cursor() as cur:
        assert visible_position(cur) == END
    assert owned_reads(server) == 3


def test_a_gtid_owned_again_by_another_thread_is_another_transaction():
    reads = iter([f"{UUID}:58#12", f"{UUID}:58#20"])  # 58 rolled back, then taken by thread 20
    server = MySqlDouble(owned=reads)
    with server.connect() as conn, conn.cursor() as cur:
        assert visible_position(cur) == END
    assert owned_reads(server) == 2


def test_gtid_mode_off_waits_for_no_anonymous_transaction_in_flight():
    server = MySqlDouble(variables={"gtid_mode": "OFF", "gtid_executed": ""}, anonymous=iter([2, 1, 3, 0, 4]))
    with server.connect() as conn, conn.cursor() as cur:
        assert visible_position(cur) == END
    assert owned_reads(server) == 4  # the counter read 0 at the fourth check


def test_a_transaction_that_never_commits_times_out_as_transient(monkeypatch):
    monkeypatch.setattr(visibility, "VISIBLE_WAIT_SECONDS", 0.05)
    server = MySqlDouble(owned=f"{U2}:9#44")
    with server.connect() as conn, conn.cursor() as cur, pytest.raises(TransientError, match=f"{U2}:9"):
        visible_position(cur)


def test_percona_server_uses_its_consistent_snapshot_position():
    server = MySqlDouble(version="8.0.35-27", comment="Percona Server (GPL), Release 27, Revision 2f8eeab2")
    with server.connect() as conn, conn.cursor() as cur:
        assert visible_position(cur) == END
    assert "START TRANSACTION WITH CONSISTENT SNAPSHOT" in server.sent and owned_reads(server) == 0
