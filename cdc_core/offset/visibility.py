"""Low watermarks: a binlog end E returned only once every transaction the binlog holds at or
before E is visible to any read view opened after the return.

The binlog's end alone does not give that: both flavours write a transaction to the binlog
before the storage engine commits it (two-phase commit: engine prepare, binlog write, engine
commit), so a SELECT right after reading E can miss a transaction the binlog already holds
before E (measured on MariaDB: 3-4 of ~1,200 samples in 20 s under 6 writers). A chunk whose
SELECT missed it and whose window starts at E would lose that change (cdc_core/chunks/reader.py).

How each flavour proves it (cdc_core/source/flavour.py decides which applies):

- MariaDB and Percona Server: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` reports the binlog
  position its read view matches exactly (``binlog_snapshot_file/position``); once that reaches
  E, every transaction up to E is committed. No privilege beyond the connection's.
- MySQL: GTID ownership. Facts of the MySQL server (sql/binlog.cc, sql/rpl_gtid_state.cc):
  (1) a transaction takes ownership of its GTID before any of its events is written to the
  binlog: automatic GTIDs are generated in the flush stage of the binlog group commit
  (``assign_automatic_gtids_to_flush_group``, under LOCK_log, before ``flush_thread_caches``
  writes the group), and a GTID set by ``SET gtid_next`` is owned from that statement on; with
  gtid_mode OFF the transaction takes *anonymous* ownership at the same point;
  (2) ownership is released only after the transaction committed in the storage engine: in the
  commit stage ``process_commit_stage_queue`` commits every transaction of the group in the
  engine and then calls ``Gtid_state::update_commit_group``, which moves the group's GTIDs from
  owned to ``gtid_executed`` (and releases anonymous ownership); with
  ``binlog_order_commits=OFF`` each session's ``finish_commit`` commits in the engine before
  ``update_on_commit``;
  (3) SHOW BINARY LOG STATUS reads the position under LOCK_log, so E falls between flush groups.
  The wait: read E at t1; read ``@@GLOBAL.gtid_owned`` (``uuid:gno#thread`` for each owned GTID)
  at t2 > t1; then poll until none of those (GTID, owner) pairs is owned any more and the
  status counter ``Ongoing_anonymous_transaction_count`` is 0 at a read after t1.
  Proof: let T be a transaction with events at or before E. It was flushed before t1, so by (1)
  it owned its GTID (or anonymous ownership) before t1. If T had not committed in the engine by
  t2, by (2) it still owned it at t2, so its pair is in the first read, and the wait ends only
  after its release, which by (2) follows its engine commit; an anonymous T keeps the counter
  above 0 until its commit, and the counter was 0 at a read after t1. So when the wait ends,
  every such T committed in InnoDB, and a read view opened afterwards sees it. ``gtid_owned``
  and SHOW GLOBAL STATUS need no privilege. The wait is only for transactions already in flight
  at t2 (new ones never extend it), except the anonymous counter, which needs a moment with no
  anonymous transaction between binlog write and commit: with gtid_mode ON there are none;
  with gtid_mode OFF a server under sustained writes may not give one before the timeout.
  Not used: ``performance_schema.log_status`` (its binlog position and gtid_executed are taken
  under LOCK_log, and only recent releases also wait for the prepared transactions to commit;
  it needs BACKUP_ADMIN and blocks every commit while it is read).

Invariants (tests/test_watermarks.py on MariaDB, tests/test_visibility.py with a MySQL 8.0 /
8.4 double answering as the manual says): the low watermark is E as read; a wait that does
not end within ``VISIBLE_WAIT_SECONDS`` raises ``TransientError`` (retried by the caller).
"""

from __future__ import annotations

import re
import time

from cdc_core.errors import TransientError
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.source.flavour import flavour_of

# How long a low watermark waits for the transactions the binlog holds before it to become visible.
VISIBLE_WAIT_SECONDS = 30.0

# @@GLOBAL.gtid_owned: each UUID (with 8.4's tag) printed once, then its GTIDs' ":number#owner"
# parts, and the next UUID right after, with no separator: an owner's digits end where a whole
# UUID begins (a UUID has its first '-' after 8 characters, so the split is unique).
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_OWNED = re.compile(rf"(?P<uuid>{_UUID})|:(?P<number>\d+)#(?P<owner>\d+?)(?=:|$|{_UUID})"
                    r"|:(?P<tag>[A-Za-z_][A-Za-z0-9_]*)")


def visible_position(cursor, base: int = 0) -> BinlogPosition:
    """A low watermark on the server ``cursor`` reaches (see the module docstring)."""
    end = master_position(cursor, base)
    deadline = time.monotonic() + VISIBLE_WAIT_SECONDS
    if flavour_of(cursor).snapshot_position:
        done, state = _snapshot_reached(cursor, end, base), "the consistent snapshot stayed at {}"
    else:
        done, state = _owners_gone(cursor), "transactions still owned: {}"
    pause = 0.001
    while True:
        finished, where = done()
        if finished:
            return end
        if time.monotonic() > deadline:
            raise TransientError(f"the transactions in the binlog up to {end} were not all visible after "
                                 f"{VISIBLE_WAIT_SECONDS:.0f} s ({state.format(where)})")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _snapshot_reached(cursor, end: BinlogPosition, base: int):
    """A check: whether a new consistent snapshot's binlog position is at or past ``end``."""
    def check():
        seen = snapshot_position(cursor, base)
        return seen is None or seen >= end, seen
    return check


def snapshot_position(cursor, base: int) -> BinlogPosition | None:
    """The binlog position a consistent snapshot's read view matches (MariaDB, Percona), or None."""
    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    try:
        cursor.execute("SHOW STATUS LIKE 'binlog\\_snapshot\\_%'")
        status = {str(k).lower(): v for k, v in cursor.fetchall()}
    finally:
        cursor.execute("COMMIT")
    file = status.get("binlog_snapshot_file")
    if not file:
        return None
    return BinlogPosition(file, int(status["binlog_snapshot_position"]), base)


def owned_gtids(text: str | None) -> set[tuple[str, int, int]]:
    """The (source, number, owner thread) of each GTID in ``@@GLOBAL.gtid_owned``; the source is
    the UUID, with its tag (``uuid:tag``) on MySQL 8.4."""
    out, source = set(), ""
    for m in _OWNED.finditer(text or ""):
        if m["uuid"]:
            source = m["uuid"].lower()
        elif m["tag"]:
            source = source.split(":")[0] + ":" + m["tag"].lower()
        else:
            out.add((source, int(m["number"]), int(m["owner"])))
    return out


def _owners_gone(cursor):
    """A check (MySQL): whether every GTID owned at the first call is released and no anonymous
    transaction is between its binlog write and its commit (see the module docstring)."""
    first: set | None = None

    def check():
        nonlocal first
        cursor.execute("SELECT @@GLOBAL.gtid_owned")
        owned = owned_gtids(cursor.fetchone()[0])
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Ongoing\\_anonymous\\_transaction\\_count'")
        row = cursor.fetchone()
        anonymous = int(row[1]) if row else 0
        if first is None:
            first = owned
        left = first & owned
        shown = [f"{s}:{n}" for s, n, _ in sorted(left)[:3]] + ([f"{anonymous} anonymous"] if anonymous else [])
        return not left and anonymous == 0, ", ".join(shown)
    return check
