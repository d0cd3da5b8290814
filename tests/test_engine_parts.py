"""The stream engine's pure parts, directly (no server): the error taxonomy, micro-batch
assembly, the retry schedule and the start scan over transaction marks."""

from __future__ import annotations

import errno

import pymysql
import pytest

from cdc_core.batch.micro_batch import CATCHUP_LAG_SECONDS, BatchLimits, BatchPolicy, MicroBatch
from cdc_core.batch.table_batch import TableBatch
from cdc_core.config import ConfigError
from cdc_core.errors import EXIT_BAD_INPUT, EXIT_RUNTIME, BadInput, TransientError, is_transient
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import Mark, PositionPurged, find_start
from cdc_core.retry import Retry, RetryPolicy
from cdc_core.schema.table import Column, TableSchema
from pipelines.schema.applier import SchemaChangeRejected


def P(pos: int) -> BinlogPosition:
    return BinlogPosition("binlog.000001", pos)


def test_error_taxonomy_decides_exit_codes_and_retries():
    assert issubclass(ConfigError, BadInput) and issubclass(PositionPurged, BadInput)
    assert ConfigError("x").exit_code == EXIT_BAD_INPUT and SchemaChangeRejected("x").exit_code == EXIT_RUNTIME
    assert is_transient(pymysql.err.OperationalError(2013, "Lost connection"))
    assert not is_transient(pymysql.err.OperationalError(1045, "Access denied"))
    assert not is_transient(OSError(errno.ENOSPC, "No space left on device"))  # stops at once, says so
    assert not is_transient(OSError(errno.EACCES, "Permission denied"))
    assert is_transient(TransientError("x")) and not is_transient(ConfigError("x"))
    assert not is_transient(ValueError("a bug"))


SCHEMA = TableSchema("d", "t", (Column("id", "int", "int"), Column("v", "int", "int")), ("id",))


def test_micro_batch_is_due_at_rows_bytes_or_seconds():
    limits = BatchLimits(max_rows=3, max_seconds=1.0, max_bytes=100)
    b = MicroBatch()
    assert not b.due(0.0, limits)  # empty: never due
    b.add("d.t", SCHEMA, lambda: TableBatch(SCHEMA), "c", [(1, 1)], P(10), 10, now=5.0)
    assert not b.due(5.5, limits) and b.due(6.0, limits)  # a second after its first row
    b.add("d.t", SCHEMA, lambda: TableBatch(SCHEMA), "c", [(2, 1), (3, 1)], P(20), 10, now=5.6)
    assert b.rows == 3 and b.due(5.6, limits)
    big = MicroBatch()
    big.add("d.t", SCHEMA, lambda: TableBatch(SCHEMA), "c", [(1, 1)], P(10), 100, now=0.0)
    assert big.due(0.0, limits)


def test_batch_policy_uses_the_catchup_limits_only_for_a_backlog_and_never_smaller_ones():
    policy = BatchPolicy.of(max_rows=10, max_seconds=1.0, catchup_rows=1000, catchup_seconds=10.0)
    assert policy.limits(0.0) == policy.limits(CATCHUP_LAG_SECONDS) == BatchLimits(10, 1.0)  # live
    assert policy.limits(CATCHUP_LAG_SECONDS + 0.1) == BatchLimits(1000, 10.0)  # a backlog
    assert policy.limits(-30.0) == BatchLimits(10, 1.0)  # a source clock ahead of ours: live
    b = MicroBatch()
    b.add("d.t", SCHEMA, lambda: TableBatch(SCHEMA), "c", [(i, i) for i in range(10)], P(10), 10, now=0.0)
    assert b.due(0.0, policy.limits(0.0)) and not b.due(9.0, policy.limits(60.0))  # the same rows, read late
    assert b.due(10.0, policy.limits(60.0))  # the byte and time bounds hold in both
    small = BatchPolicy.of(max_rows=500, max_seconds=2.0, catchup_rows=100, catchup_seconds=0.5)
    assert small.limits(60.0) == small.live  # catch-up limits below the live ones are raised to them


def test_micro_batch_accepts_one_set_of_columns_per_table_and_absorbs_holds():
    b = MicroBatch()
    b.add("d.t", SCHEMA, lambda: TableBatch(SCHEMA), "c", [(1, 1)], P(10), 1, now=1.0)
    other = TableSchema("d", "t", tuple(reversed(SCHEMA.columns)), ("id",))
    assert b.accepts("d.t", SCHEMA) and not b.accepts("d.t", other) and b.accepts("d.u", other)
    held = MicroBatch()
    held.add("d.u", other, lambda: TableBatch(other), "c", [(2, 2)], P(30), 1, now=0.5)
    b.absorb(held)
    assert set(b.tables) == {"d.t", "d.u"} and b.rows == 2 and b.opened == 0.5


def test_retry_follows_its_schedule_within_its_budget():
    r = Retry(RetryPolicy(delays=(1, 2, 4), budget_seconds=10))
    assert [r.next_delay(now=t) for t in (0, 1, 3, 7)] == [1, 2, 4, 4]
    assert r.next_delay(now=10.5) is None  # failing for longer than the budget
    r.succeeded()
    assert r.next_delay(now=11) == 1


MARKS_WITH_GTIDS = [Mark("gtid", P(100), 10, "0-1-1"), Mark("begin", P(150), 10), Mark("commit", P(200), 10),
                    Mark("gtid", P(250), 20, "0-1-2"), Mark("statement", P(300), 20),
                    Mark("gtid", P(350), 30, "0-1-3"), Mark("begin", P(400), 30), Mark("commit", P(450), 31)]
MARKS_WITHOUT = [m for m in MARKS_WITH_GTIDS if m.kind != "gtid"]


@pytest.mark.parametrize("marks", [MARKS_WITH_GTIDS, MARKS_WITHOUT], ids=["gtids", "no-gtids"])
def test_start_by_timestamp_is_the_boundary_before_the_first_later_transaction(marks):
    start = P(4)
    assert find_start(marks, timestamp_s=5, start=start) == start
    assert find_start(marks, timestamp_s=20, start=start) == P(200)
    assert find_start(marks, timestamp_s=25, start=start) == P(300)  # after the DDL, a transaction of its own
    assert find_start(marks, timestamp_s=31, start=start) is None  # the last transaction began at 30


def test_start_by_gtid_is_the_end_of_that_transaction():
    assert find_start(MARKS_WITH_GTIDS, gtid="0-1-1", start=P(4)) == P(200)
    assert find_start(MARKS_WITH_GTIDS, gtid="0-1-2", start=P(4)) == P(300)
    assert find_start(MARKS_WITH_GTIDS, gtid="0-9-9", start=P(4)) is None
