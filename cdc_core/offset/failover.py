"""Failover: resuming a pipeline on another server (a promoted replica) by GTID.

A checkpoint's file and position mean nothing on another server, which names and
numbers its binlogs on its own. Every offset also names its place by GTID
(cdc_core/offset/stream_offset.py): ``gtid``, the transaction that ends at ``resume``, and inside a
transaction ``txn_gtid``, the transaction holding ``applied``, with ``txn_rows``, how
many of its captured rows are at or before ``applied``.

Invariants (tests/test_failover_parts.py, tests/test_failover.py):
- Translation is exact or refused. An offset between transactions maps to the end of
  its ``gtid`` transaction on the new server; one inside a transaction to the end of
  the row event through which exactly ``txn_rows`` captured rows of ``txn_gtid`` are
  read, resuming at the boundary before that transaction. Rows are counted as the
  engine counts them (captured tables only). A count that falls inside a row event, or
  a transaction the new server's binlogs do not hold, is refused.
- A server that lacks a transaction an offset has (it lagged: on MariaDB its binlog GTID
  position in that domain is below the transaction's sequence number, on MySQL its
  ``gtid_executed`` does not hold the transaction) is refused with a message saying so:
  binlake never streams past the gap.
- The new server's positions carry a base (cdc_core/offset/position.py) that puts every one
  of them after every position recorded before (``choose_base``): ``_cdc_seq`` and the
  Delta transaction versions keep increasing, and no skip decision compares positions
  of two servers.
- Relied on: each replication domain's transactions are in the same order on both
  servers (MariaDB replicates a domain in order; a MySQL replica commits in the source's
  order with ``replica_preserve_commit_order=ON``, its default since 8.0.27, or with one
  applier thread), and what a failover skips is decided by the position of one
  transaction, so the captured tables' changes are expected in one domain (MySQL: from
  one source server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from cdc_core.binlog.decoder import RowDecoder
from cdc_core.binlog.event_loop import EventLoop
from cdc_core.binlog.event_source import Opener, server_source
from cdc_core.binlog.events import PreparedCommit, RowsEvent, Statement, TransactionEnd, TransactionStart
from cdc_core.offset.gtid import Gtid, GtidSet
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import PURGED_WAY_OUT, StartupError
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.source.connection import ConnectionSettings


class FailoverError(StartupError):
    """The checkpoint cannot be found on the server binlake now reads (bad input: exit 2)."""


def lag_problem(needed: str, have: GtidSet) -> str | None:
    """Why a server whose binlog holds the transactions ``have`` (cdc_core/offset/gtid.py:
    MariaDB's ``@@gtid_binlog_pos``, MySQL's ``@@gtid_executed``) lacks transaction ``needed``
    (it lagged), or None when it has it."""
    want = Gtid.parse(needed)
    try:
        if have.contains(want):
            return None
    except ValueError:
        return (f"the server names its transactions in another form than the checkpoint's transaction {needed} "
                f"(its GTIDs: {have}): binlake cannot fail over between MariaDB and MySQL; {PURGED_WAY_OUT}")
    if want.mariadb:
        last = have.domains.get(want.source)
        holds = f"its binlog ends at {last} in domain {want.source}" if last else f"its binlog has nothing in " \
                                                                                  f"domain {want.source}"
    else:
        holds = f"its gtid_executed is {have or 'empty'}"
    return (f"the server lacks transaction {needed}, which binlake already applied to Delta ({holds}): it lagged "
            "behind the server binlake read before. Nothing was streamed past the gap; run again once it has "
            "caught up, or point binlake at a server that has the transaction")


@dataclass(frozen=True)
class TransactionSpan:
    """One transaction in a server's binlog, as a failover needs it."""

    gtid: str
    begin: BinlogPosition  # the boundary before it (the end of the transaction before)
    before: str | None  # the GTID of the transaction ending at ``begin``
    end: BinlogPosition
    rows: tuple[tuple[BinlogPosition, int], ...]  # captured row events: (end, captured rows read through it)


def needed_gtid(offset: StreamOffset) -> str:
    """The GTID that locates ``offset`` on another server (see the module invariants)."""
    gtid = offset.txn_gtid if offset.inside_transaction else offset.gtid
    if not gtid:
        raise FailoverError(
            f"the checkpoint {offset.applied} has no GTID (the server had none, or the stream had read no "
            f"transaction yet), so it cannot be found on another server: {PURGED_WAY_OUT}")
    return gtid


def translate(offset: StreamOffset, spans: dict[str, TransactionSpan], server_id: int) -> StreamOffset:
    """``offset`` on the new server (see the module invariants)."""
    gtid = needed_gtid(offset)
    span = spans.get(gtid)
    if span is None:
        raise FailoverError(f"transaction {gtid} of the checkpoint is not in the new server's binlogs (purged?): "
                            f"{PURGED_WAY_OUT}")
    if not offset.inside_transaction:
        return replace(offset, resume=span.end, applied=span.end, server_id=server_id)
    for end, through in span.rows:
        if through == offset.txn_rows:
            return replace(offset, resume=span.begin, applied=end, gtid=span.before, server_id=server_id)
        if through > offset.txn_rows:
            break
    raise FailoverError(f"the checkpoint is after row {offset.txn_rows} of transaction {gtid}, which the new server "
                        f"logged in other row events ({[n for _, n in span.rows]} rows through each): it cannot "
                        "resume there exactly")


def choose_base(recorded: Iterable[BinlogPosition], first_file_number: int) -> int:
    """The base for a new server whose oldest binlog has ``first_file_number``: every
    position on it then comes after every position in ``recorded``."""
    newest = max(p.key[0] for p in recorded)
    return max(0, newest + 1 - first_file_number)


def transaction_spans(conn: ConnectionSettings, server_id: int, start: BinlogPosition, end: BinlogPosition,
                      wanted: set[str], captured: Callable[[str, str], bool]) -> dict[str, TransactionSpan]:
    """The spans of the ``wanted`` transactions in (``start``, ``end``] on the server; positions
    carry ``start``'s base."""
    return spans(server_source(conn, server_id), start, end, wanted, captured)


def spans(opener: Opener, start: BinlogPosition, end: BinlogPosition, wanted: set[str],
          captured: Callable[[str, str], bool]) -> dict[str, TransactionSpan]:
    """:func:`transaction_spans` from the source ``opener`` opens: an event loop whose rows are
    decoded only in the wanted transactions (counted as the engine counts them: a row event
    whose images leave columns out has none)."""
    found: dict[str, TransactionSpan] = {}
    if not wanted:
        return found
    boundary, before, gtid, rows, n = start, None, None, [], 0
    loop = EventLoop(opener, start, end=end, decoder=RowDecoder(), starts=True, mysql_gtids=True,
                     capture=lambda db, table: gtid in wanted and captured(db, table))
    records = loop.records()
    try:
        for record in records:
            kind = type(record)
            if kind is TransactionStart:
                if record.gtid is not None:
                    gtid, rows, n = record.gtid, [], 0
            elif kind is RowsEvent:
                n += len(record.rows)
                rows.append((record.position, n))
            elif kind is TransactionEnd or kind is PreparedCommit or kind is Statement:
                # a transaction's end (XID, COMMIT, an XA outcome or prepare); a statement (DDL) is one of its own
                if gtid in wanted:
                    found[gtid] = TransactionSpan(gtid, boundary, before, record.position, tuple(rows))
                boundary, before, gtid = record.position, gtid, None
                if len(found) == len(wanted):
                    break
    finally:
        records.close()
    return found
