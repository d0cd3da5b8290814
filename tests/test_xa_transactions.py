"""XA transactions (two-phase commit, as JTA transaction managers use them; cdc_core/binlog/xa.py).
MariaDB writes an XA transaction's rows to the binlog at XA PREPARE and its outcome later,
as an ``XA COMMIT`` or ``XA ROLLBACK`` of its own: a prepared transaction's rows are not
MySQL's rows until that outcome says so. Before cdc_core/binlog/xa.py the stream applied them at
XA PREPARE: a rolled-back insert stayed in Delta and a rolled-back delete removed a row
MySQL kept. Each test that streams also counts: every committed XA row applied once, at its XA
COMMIT, none of a rolled-back one (tests/change_count.py)."""

from __future__ import annotations

import pytest

from cdc_core.binlog.range_reads import read_changes
from cdc_core.binlog.xa import XaHold, XaOutsideWindow, XaStatement, XaVerb, canonical_xid, xa_statement
from cdc_core.offset.position import master_position
from cdc_core.source.connection import connection_settings
from tests.change_count import assert_changes_counted
from tests.helpers import assert_equal, snapshot
from tests.test_stream import stream_until_now


def _prepare(cur, xid: str, *work: str) -> None:
    cur.execute(f"XA START '{xid}'")
    for w in work:
        cur.execute(w)
    cur.execute(f"XA END '{xid}'")
    cur.execute(f"XA PREPARE '{xid}'")


def test_statements_and_the_hold():
    assert xa_statement("XA START X'61',X'',1") == XaStatement(XaVerb.START, "x'61',x'',1")
    assert xa_statement("xa commit X'6A7B',X'',1 ONE PHASE") == XaStatement(XaVerb.COMMIT, "x'6a7b',x'',1")
    assert xa_statement("XA ROLLBACK X'61',X'',1") == XaStatement(XaVerb.ROLLBACK, "x'61',x'',1")
    assert xa_statement("XA END X'61',X'',1").verb == XaVerb.END
    assert xa_statement("COMMIT") is None and xa_statement("SELECT 'XA COMMIT'") is None
    assert canonical_xid("X'6A', X'', 1") == "x'6a',x'',1"
    hold = XaHold()
    assert not hold.holding
    hold.start()
    hold.hold("row 1")
    hold.hold("row 2")
    hold.end("x'61',x'',1")
    hold.prepared()
    assert not hold.holding
    assert hold.outcome("x'62',x'',1") is None  # prepared before this reader: looked up elsewhere
    assert hold.outcome("x'61',x'',1") == ["row 1", "row 2"]
    assert hold.outcome("x'61',x'',1") is None  # decided once


def test_xa_transactions_committed_rolled_back_and_one_phase(mariadb, db, make_config):
    name, conn = db
    other = mariadb.connect(name)
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO x VALUES (1, 'plain'), (2, 'plain')")
        _prepare(cur, "a", "INSERT INTO x VALUES (10, 'xa commit')", "UPDATE x SET v = 'xa commit' WHERE id = 1")
        with other.cursor() as between:  # another session's work between the two phases
            between.execute("INSERT INTO x VALUES (3, 'in between')")
        cur.execute("XA COMMIT 'a'")
        _prepare(cur, "b", "INSERT INTO x VALUES (11, 'xa rollback')", "DELETE FROM x WHERE id = 2")
        cur.execute("XA ROLLBACK 'b'")
        cur.execute("XA START 'c'")
        cur.execute("INSERT INTO x VALUES (12, 'one phase')")
        cur.execute("XA END 'c'")
        cur.execute("XA COMMIT 'c' ONE PHASE")
    other.close()
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.x"])
    assert assert_changes_counted(cfg, [f"{name}.x"], start=at) == {f"{name}.x": {"c": 5, "u": 1, "d": 0}}


def test_an_outcome_after_a_restart_finds_the_prepared_rows_in_the_binlog(db, make_config):
    """The stream stops (its checkpoint past the XA PREPARE) with two transactions prepared;
    one commits and one rolls back before it runs again: the restarted reader never read their
    rows, and finds the committed one's by looking back."""
    name, conn = db
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO x VALUES (1, 'plain'), (2, 'plain')")
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    with conn.cursor() as cur:
        _prepare(cur, "a", "INSERT INTO x VALUES (10, 'committed')", "UPDATE x SET v = 'committed' WHERE id = 1")
    stream_until_now(cfg)  # stops with a prepared: its rows are not applied
    assert_equal(cfg, [f"{name}.x"])
    with conn.cursor() as cur:
        cur.execute("XA COMMIT 'a'")
        _prepare(cur, "b", "INSERT INTO x VALUES (11, 'rolled back')", "DELETE FROM x WHERE id = 2")
    stream_until_now(cfg)  # a's rows are looked up; b's are held, and dropped at the reader's end
    assert_equal(cfg, [f"{name}.x"])
    with conn.cursor() as cur:
        cur.execute("XA ROLLBACK 'b'")
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.x"])
    # a's rows count at its XA COMMIT, read after a restart; b's, rolled back, not at all
    assert assert_changes_counted(cfg, [f"{name}.x"], start=at) == {f"{name}.x": {"c": 3, "u": 1, "d": 0}}


def test_a_window_holds_only_committed_xa_rows(db, make_config):
    """read_changes (a chunk's window): rows prepared and not committed in the window are not
    changes; rows committed in it are, at the commit; a commit prepared before the window is
    XaOutsideWindow."""
    name, conn = db
    cfg = make_config(name)
    settings = connection_settings(cfg)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(20))")
        start = master_position(cur)
        _prepare(cur, "a", "INSERT INTO x VALUES (1, 'prepared before')")
        middle = master_position(cur)
        cur.execute("XA COMMIT 'a'")
        after_a = master_position(cur)
        _prepare(cur, "b", "INSERT INTO x VALUES (2, 'committed in window')")
        cur.execute("XA COMMIT 'b'")
        commit_b = master_position(cur)
        _prepare(cur, "c", "INSERT INTO x VALUES (3, 'never committed here')")
        end = master_position(cur)
        cur.execute("XA ROLLBACK 'c'")
    table = {(name, "x")}
    whole = list(read_changes(settings, cfg.source.server_id + 9, start, end, table))
    assert [(c.after["id"], c.position) for c in whole] == [(1, after_a), (2, commit_b)]
    with pytest.raises(XaOutsideWindow, match="x'61',x'',1"):
        list(read_changes(settings, cfg.source.server_id + 9, middle, end, table))
    assert [c.after["id"] for c in read_changes(settings, cfg.source.server_id + 9, after_a, end, table)] == [2]


def test_snapshot_with_xa_transactions_prepared_across_it(db, spark, make_config):
    """Prepared before the snapshot (its chunks cannot see the rows), decided after it: the
    stream, starting at the chunks' watermarks, finds the committed one's rows."""
    name, conn = db
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE x (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO x SELECT seq, 'plain' FROM seq_1_to_300")
        _prepare(cur, "a", "INSERT INTO x VALUES (1000, 'committed')", "UPDATE x SET v = 'committed' WHERE id = 7",
                 "DELETE FROM x WHERE id = 8")
    cfg = make_config(name, chunk_size=100)
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        cur.execute("XA COMMIT 'a'")
        _prepare(cur, "b", "INSERT INTO x VALUES (1001, 'rolled back')", "DELETE FROM x WHERE id = 9")
        cur.execute("XA ROLLBACK 'b'")
    stream_until_now(cfg)
    assert_equal(cfg, [f"{name}.x"])
    # a's rows, prepared before the stream's start, count at its XA COMMIT; b's not at all
    assert assert_changes_counted(cfg, [f"{name}.x"], read_from=at) == {f"{name}.x": {"c": 1, "u": 1, "d": 1}}
