"""XA transactions in the binlog: rows held from their XA PREPARE until their outcome.

MariaDB 10.5+ and MySQL 5.7+ write an XA (two-phase) transaction to the binlog at XA
PREPARE, as a group of its own: its start (MariaDB: a GTID event flagged "prepared XA";
MySQL: an ``XA START <xid>`` statement), its row events, ``XA END <xid>`` and an
XA_PREPARE event. Its outcome comes later, as a transaction of its own holding one
statement, ``XA COMMIT <xid>`` or ``XA ROLLBACK <xid>``; other transactions may come in
between. (``XA COMMIT … ONE PHASE`` is written as an ordinary transaction.)

Invariants (tests/test_xa_transactions.py):
- A prepared transaction's rows are not MySQL's rows until its outcome: they are held, and
  applied at the position of its ``XA COMMIT`` as one unit, or dropped at its ``XA ROLLBACK``.
  Rows held at a reader's end, their outcome unread, are not applied: a later reader meets
  the outcome and finds them again.
- The rows of a prepared transaction hold no row another transaction changes before its
  outcome (the server keeps them locked), so applying them at the outcome's position gives
  the rows MySQL holds from there on.
- An outcome whose XA PREPARE lies before where reading started (a restart, a snapshot's
  hand-off, a start position inside it) finds its rows by looking back through the
  binlog (cdc_core/binlog/xa_lookup.py); a rollback needs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

FL_PREPARED_XA = 64  # MariaDB's GTID event flag: the group is an XA transaction's prepared part

# XA START X'61',X'',1   /   XA COMMIT X'61',X'',1   /   XA ROLLBACK 'a'  (the server writes the X'..' form)
_XA = re.compile(r"^\s*XA\s+(START|BEGIN|END|COMMIT|ROLLBACK)\s+(.*?)\s*(?:ONE\s+PHASE\s*)?;?\s*$",
                 re.IGNORECASE | re.DOTALL)


class XaOutsideWindow(Exception):
    """A range read of the binlog met an XA COMMIT whose rows (its XA PREPARE) are before the
    range: the range's changes are incomplete (a chunk's window is read again)."""


class XaVerb(StrEnum):
    START = "start"
    END = "end"
    COMMIT = "commit"
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class XaStatement:
    """One XA statement of the binlog: its verb and its xid as the server writes it."""

    verb: XaVerb
    xid: str


def xa_statement(sql: str) -> XaStatement | None:
    """The XA statement ``sql`` is, or None when it is none."""
    m = _XA.match(sql)
    if m is None:
        return None
    verb = m.group(1).lower()
    return XaStatement(XaVerb.START if verb == "begin" else XaVerb(verb), canonical_xid(m.group(2)))


def canonical_xid(text: str) -> str:
    """An xid as the binlog writes it (``X'61',X'',1``), in one spelling: the server's hex
    digits may be either case."""
    return re.sub(r"\s+", "", text).lower()


class XaHold:
    """The prepared transactions of one binlog reader (see the module invariants): the rows
    read inside an XA group are handed to :meth:`hold` instead of being applied."""

    def __init__(self) -> None:
        self._open: tuple[str, list] | None = None  # the group being read: its xid once known, its rows
        self._prepared: dict[str, list] = {}  # xid -> the rows of its prepared group

    @property
    def holding(self) -> bool:
        """Whether the reader is inside an XA group (its rows are to be held)."""
        return self._open is not None

    def start(self) -> None:
        """An XA group begins: its rows are held from now on."""
        self._open = ("", [])

    def end(self, xid: str) -> None:
        """``XA END xid``: the open group's xid (MariaDB names it only here)."""
        if self._open is not None:
            self._open = (xid, self._open[1])

    def hold(self, item) -> None:
        """A row change (in the reader's own form) of the open group."""
        self._open[1].append(item)

    def prepared(self) -> None:
        """The open group's XA_PREPARE: its rows wait for the outcome."""
        if self._open is not None:
            xid, group = self._open
            self._prepared[xid] = group
            self._open = None

    def outcome(self, xid: str) -> list | None:
        """``XA COMMIT`` or ``XA ROLLBACK`` of ``xid``: the held rows, forgotten here; None
        when its XA PREPARE was not read by this reader."""
        return self._prepared.pop(xid, None)
