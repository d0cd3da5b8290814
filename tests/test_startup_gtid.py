"""``startup.mode: specific`` with a MySQL GTID set (cdc_core/offset/startup.py): the stream
applies exactly the transactions not in the set, or binlake refuses. Binlogs as mark sequences
(what the start scan reads of them), the server's @@gtid_executed and @@gtid_purged from
tests/mysql_double.py (MySQL 8.4 manual, 19.1.6.5: gtid_purged is "the set of all transactions
that have been committed on the server, but do not exist in any binary log file")."""

from __future__ import annotations

import pytest

from cdc_core.offset.gtid import GtidSet
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import Mark, PositionPurged, StartupError, after_gtid_set, first_not_in
from tests.mysql_double import UUID, MySqlDouble

U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"
START = BinlogPosition("binlog.000001", 4)
END = BinlogPosition("binlog.000002", 4711)


def P(pos: int) -> BinlogPosition:
    return BinlogPosition("binlog.000001", pos)


def binlog(*gtids: str) -> list[Mark]:
    """A binlog of one-row transactions (GTID, BEGIN, XID) ending 100 bytes apart; "ddl:" a DDL."""
    marks, at = [], 100
    for g in gtids:
        ddl = g.startswith("ddl:")
        marks.append(Mark("gtid", P(at), 1, g.removeprefix("ddl:")))
        marks += [Mark("statement", P(at + 60), 1)] if ddl else [Mark("begin", P(at + 30), 1),
                                                                 Mark("commit", P(at + 60), 1)]
        at += 100
    return marks


def start(server: MySqlDouble, text: str, marks: list[Mark]) -> BinlogPosition:
    with server.connect() as conn, conn.cursor() as cur:
        return after_gtid_set(cur, text, END, lambda applied: first_not_in(marks, applied, START))


BINLOG = binlog(*(f"{UUID}:{n}" for n in range(10, 14)), f"ddl:{UUID}:14", f"{U2}:1", f"{UUID}:15")
SERVER = dict(variables={"gtid_executed": f"{UUID}:1-15,{U2}:1", "gtid_purged": f"{UUID}:1-9"})


def test_starts_before_the_first_transaction_not_in_the_set():
    assert start(MySqlDouble(**SERVER), f"{UUID}:1-11", BINLOG) == P(260)  # after 11's XID
    assert start(MySqlDouble(**SERVER), f"{UUID}:1-14", BINLOG) == P(560)  # after the DDL
    assert start(MySqlDouble(**SERVER), f"{UUID}:1-9", BINLOG) == START  # every binlogged one is new
    assert start(MySqlDouble(**SERVER), f"{UUID}:1-15,{U2}:1", BINLOG) == END  # nothing new: the binlog end
    assert start(MySqlDouble(**SERVER), f"{UUID.upper()}:1-12:13", BINLOG) == P(460)


def test_a_transaction_of_the_set_after_the_start_is_refused():
    """Only 12 applied of 10-15: starting before 10 would apply 12 again, after 12 would skip 10 and 11."""
    with pytest.raises(StartupError, match=rf"holds transactions {UUID}:12 that the binlog has after"):
        start(MySqlDouble(**SERVER), f"{UUID}:1-9:12", BINLOG)
    with pytest.raises(StartupError, match=f"{U2}:1 that the binlog"):
        start(MySqlDouble(**SERVER), f"{UUID}:1-13,{U2}:1", BINLOG)


def test_purged_transactions_missing_from_the_set_are_refused():
    with pytest.raises(PositionPurged, match=rf"purged transactions {UUID}:6-9"):
        start(MySqlDouble(**SERVER), f"{UUID}:1-5", BINLOG)


def test_transactions_the_server_never_had_do_not_matter():
    assert start(MySqlDouble(**SERVER), f"{UUID}:1-11,00000000-0000-0000-0000-000000000009:1-99", BINLOG) == P(260)


def test_what_cannot_be_placed_by_gtid_is_refused():
    with pytest.raises(StartupError, match="not a MySQL GTID set"):
        start(MySqlDouble(**SERVER), "0-1-42", BINLOG)
    anonymous = [Mark("begin", P(130), 1), Mark("commit", P(160), 1)]
    with pytest.raises(StartupError, match="has no GTID"):
        start(MySqlDouble(**SERVER), f"{UUID}:1-9", anonymous)


def test_first_not_in_collects_the_transactions_before_it():
    found, before = first_not_in(BINLOG, GtidSet.parse(f"{UUID}:1-12"), START)
    assert found == P(360) and before == GtidSet.parse(f"{UUID}:10-12")
    assert first_not_in(BINLOG, GtidSet.parse(f"{UUID}:1-20,{U2}:1"), START) == (None, GtidSet.parse(
        f"{UUID}:10-15,{U2}:1"))
