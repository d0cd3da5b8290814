"""The failover's pure parts (cdc_core/offset/failover.py, cdc_core/offset/position.py base, offsets)
checked against their invariants without a server."""

from __future__ import annotations

import pytest

from cdc_core.offset.failover import FailoverError, TransactionSpan, choose_base, lag_problem, translate
from cdc_core.offset.gtid import GtidSet
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset

OLD = BinlogPosition("binlog.000009", 500)


def span(gtid: str, rows: list[int], begin: int = 1000, before: str | None = "0-1-6") -> TransactionSpan:
    """A transaction on the new server (replica-bin.000002, base 8) with row events of ``rows`` rows each."""
    p = BinlogPosition("replica-bin.000002", begin, 8)
    ends, through, at = [], 0, begin + 100
    for n in rows:
        through += n
        at += 50
        ends.append((p.at(p.file, at), through))
    return TransactionSpan(gtid, p, before, p.at(p.file, at + 30), tuple(ends))


def test_lag_by_mariadb_gtid_position():
    def lag(needed, binlog_pos):
        return lag_problem(needed, GtidSet.parse(binlog_pos))

    assert lag("0-1-42", "0-1-42") is None
    assert lag("0-1-42", "1-2-5,0-2-50") is None  # another server id, later in the domain
    problem = lag("0-1-42", "0-2-41,1-2-99")
    assert problem and "lagged" in problem and "0-1-42" in problem and "0-2-41" in problem
    assert "has nothing" in lag("0-1-42", "1-2-99")


def test_lag_by_mysql_gtid_executed():
    """MySQL's @@gtid_executed holds exactly its transactions (a gap is a transaction it lacks)."""
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    have = GtidSet.parse(f"{uuid}:1-40:42-50,\n8a94f357-aab4-11df-86ab-c80aa9429562:1-7")
    assert lag_problem(f"{uuid}:40", have) is None and lag_problem(f"{uuid}:50", have) is None
    problem = lag_problem(f"{uuid}:41", have)
    assert problem and "lagged" in problem and f"{uuid}:41" in problem and f"{uuid}:1-40:42-50" in problem
    assert "empty" in lag_problem(f"{uuid}:1", GtidSet())
    assert "between MariaDB and MySQL" in lag_problem("0-1-4", have)


def test_position_base_orders_every_new_position_after_the_old_ones():
    old = [OLD, BinlogPosition("binlog.000009", 90_000)]
    base = choose_base(old, first_file_number=1)
    assert base == 9
    new = BinlogPosition("replica-bin.000001", 4, base)
    assert all(new > p for p in old) and all(new.seq() > p.seq() for p in old)
    assert new.at("replica-bin.000002", 4).base == base and new.at_base(0) == BinlogPosition(new.file, new.pos)
    assert choose_base(old, first_file_number=20) == 0  # numbered ahead already
    assert BinlogPosition.from_dict(new.to_dict()) == new
    assert "base" not in OLD.to_dict()  # offsets written before any failover stay as they were


def test_offset_json_round_trip_and_older_offsets():
    o = StreamOffset(OLD, OLD.at(OLD.file, 900), "0-1-6", 17, 1, "0-1-7", 120)
    assert StreamOffset.from_json(o.to_json()) == o and o.inside_transaction
    legacy = '{"resume": {"file": "binlog.000009", "pos": 500}, "applied": {"file": "binlog.000009", "pos": 500}}'
    old = StreamOffset.from_json(legacy)
    assert old.server_id is None and old.txn_rows == 0 and not old.inside_transaction


def test_translate_between_transactions_is_the_end_of_the_gtid():
    s = span("0-1-6", [3])
    t = translate(StreamOffset(OLD, OLD, "0-1-6", 5, server_id=1), {"0-1-6": s}, 2)
    assert t.resume == t.applied == s.end and t.server_id == 2 and t.gtid == "0-1-6" and t.event_time == 5


def test_translate_inside_a_transaction_counts_rows_exactly():
    s = span("0-1-7", [100, 100, 50])
    inside = StreamOffset(OLD, OLD.at(OLD.file, 900), "0-1-6", 0, 1, "0-1-7", 200)
    t = translate(inside, {"0-1-7": s}, 2)
    assert t.resume == s.begin and t.applied == s.rows[1][0] and t.gtid == "0-1-6" and t.txn_rows == 200
    with pytest.raises(FailoverError, match="other row events"):  # 150 falls inside the second event
        translate(StreamOffset(OLD, OLD.at(OLD.file, 900), "0-1-6", 0, 1, "0-1-7", 150), {"0-1-7": s}, 2)
    with pytest.raises(FailoverError, match="other row events"):  # more rows than the server has
        translate(StreamOffset(OLD, OLD.at(OLD.file, 900), "0-1-6", 0, 1, "0-1-7", 400), {"0-1-7": s}, 2)


def test_translate_refuses_what_it_cannot_find():
    with pytest.raises(FailoverError, match="not in the new server's binlogs"):
        translate(StreamOffset(OLD, OLD, "0-1-6", server_id=1), {}, 2)
    with pytest.raises(FailoverError, match="has no GTID"):
        translate(StreamOffset(OLD, OLD, None, server_id=1), {}, 2)
