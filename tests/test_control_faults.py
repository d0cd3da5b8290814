"""The stream's control queries (queries it makes to MySQL outside the binlog reader) under
dropped connections, injected by the TCP fault proxy (tests/fault_proxy.py): each path
retries a fault that passes as the reader does (cdc_core/errors.py ``is_transient``,
cdc_core/retry.py ``retrying``), and one that outlasts the budget ends naming the step that
failed, never a bare ``OperationalError 2013``.

- key orders (``ServerSql``, the hand-off's comparisons on the server);
- the CLI's line for an error no loop retried names the step it happened in.
"""

from __future__ import annotations

import pymysql
import pytest

from cdc_core.retry import RetryBudgetExceeded, RetryPolicy
from cdc_core.source.connection import connect, connection_settings
from cdc_core.types.key_order import ServerSql
from pipelines.cli import _explain
from pipelines.snapshot.driver import SnapshotJob
from tests.fault_proxy import Rule, via

FAST = RetryPolicy(delays=(0.2, 0.5), budget_seconds=60)
DESCRIBE = b"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "


def _snapshotted(db, make_config, rows: int = 500):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO t SELECT seq, seq FROM seq_1_to_{rows}")
    cfg = make_config(name, stream={"max_batch_rows": 200}, source={"snapshot": {"chunk_size": 100, "runner": "local"}})
    SnapshotJob(cfg).run()
    return name, conn, cfg


def _changes(conn, rounds: int = 3) -> None:
    with conn.cursor() as cur:
        for i in range(rounds):
            cur.execute("UPDATE t SET v = v + 1 WHERE id %% 3 = %s", (i % 3,))
            cur.execute("DELETE FROM t WHERE id %% 37 = %s", (i,))
            cur.execute("INSERT INTO t SELECT 100000 * %s + seq, seq FROM seq_1_to_50", (i + 1,))


@pytest.mark.parametrize("action", ["drop"])
def test_key_order_query_dropped_or_cut_is_retried(make_config, db, proxy, action):
    """A key-order query whose connection is dropped before it reaches the server, or cut in the
    middle of its answer, is made again on a new connection and answers."""
    name, _ = db
    settings = connection_settings(via(make_config(name), proxy))
    rule = proxy.add(Rule(b"key-order-probe", action, times=2))
    sql = ServerSql(lambda: connect(settings), policy=FAST)
    try:
        assert sql.rows("SELECT 'key-order-probe', %s + 1", [41]) == [("key-order-probe", 42)]
    finally:
        sql.close()
    assert rule.fired == 2 and rule.seen == 3


def test_key_order_query_outlasting_the_budget_names_the_step(make_config, db, proxy):
    """A connection dropped on every attempt for longer than the budget: the error names the
    step and the cause."""
    name, _ = db
    settings = connection_settings(via(make_config(name), proxy))
    proxy.add(Rule(b"key-order-probe", "drop", times=1000))
    sql = ServerSql(lambda: connect(settings), policy=RetryPolicy(delays=(0.1,), budget_seconds=1))
    with pytest.raises(RetryBudgetExceeded) as failed:
        sql.rows("SELECT 'key-order-probe'", [])
    assert "ordering key values on the source" in str(failed.value)
    assert "OperationalError" in str(failed.value) and "kept failing" in str(failed.value)


def test_unexpected_error_names_its_step():
    """A connection lost that no loop retried (a note says where it happened): the CLI's one
    line names the step, not only ``OperationalError 2013``."""
    e = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    e.add_note("while reading the captured tables' foreign keys")
    assert _explain(e) == ("OperationalError: (2013, 'Lost connection to MySQL server during query') "
                           "(while reading the captured tables' foreign keys)")
