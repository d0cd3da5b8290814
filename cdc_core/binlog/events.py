"""The records the binlog reader process sends the stream engine, in binlog order.

Every record is a small frozen dataclass; positions are binlog end positions of the
event (``BinlogPosition``). A ``TableLayout`` is sent before the first ``RowsEvent``
that refers to it, and again whenever the table's table map changes (a DDL, or a
change binlake did not see), so the engine always knows the exact columns a row
event was written with: names, storage types, signedness, charset, ENUM/SET members
and primary key, from the binlog itself (``binlog_row_metadata=FULL``), never from
the live ``information_schema``.

Invariants (tests/test_binlog_decoder.py):
- Layout ids are unique within one reader: one process, or the processes that decode
  one stream's binlog ranges in parallel (each numbers from its own ``first_layout_id``);
  a ``RowsEvent`` names the layout its values are in, column by column.
- Nothing follows a ``ReaderEnd`` or a ``ReaderError``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import TableSchema


class Op(enum.StrEnum):
    """A row change: also the ``_cdc_op`` value written to Delta."""

    INSERT = "c"
    UPDATE = "u"
    DELETE = "d"


@dataclass(frozen=True, slots=True)
class TableLayout:
    """A table's columns as its binlog table map gives them."""

    id: int
    schema: TableSchema

    @property
    def table(self) -> str:
        return self.schema.qualified_name


@dataclass(frozen=True, slots=True)
class RowsEvent:
    """One row event of a captured table. ``rows`` are value tuples in the layout's column
    order; for updates, ``(before, after)`` pairs (in the stream's reader process, until they
    cross the queue, they may be ``PackedRows``: cdc_core/binlog/row_images.py). ``size`` is the event's size in bytes;
    ``gtid`` its transaction's GTID (None on a server without GTIDs): MariaDB's ``d-s-n``,
    MySQL's ``uuid:n`` or ``uuid:tag:n``; ``timestamp`` its header's (whole seconds),
    ``commit_us`` its transaction's original commit time (MySQL 8's GTID event). A ``partial``
    event's images leave columns out: its rows are not decoded, and its table needs a backfill.
    ``first_row`` is the index of its first row among the rows at its position: 0, but where
    several row events share one position (the events of a ``PreparedCommit``) it counts on from
    the rows before it, so that ``_cdc_seq`` (``position.seq(first_row + i)``) orders and tells
    apart every row of the unit."""

    table: str
    op: Op
    position: BinlogPosition
    layout: int
    rows: list
    timestamp: int
    size: int
    gtid: str | None = None
    partial: bool = False  # its images leave columns out (binlog_row_image not FULL): ``rows`` is empty
    first_row: int = 0
    commit_us: int = 0  # its transaction's commit time in µs where the server writes one (MySQL 8), else 0

    @property
    def time_us(self) -> int:
        """The change's time on the source, µs since the epoch (UTC): the commit time where the
        server writes one, else the event header's second."""
        return self.commit_us or self.timestamp * 1_000_000


@dataclass(frozen=True, slots=True)
class TransactionStart:
    """A transaction's first event (a GTID event, BEGIN, XA START, or an XA outcome, which is
    a transaction of one statement), for the readers that look for transactions (the start
    scan, failover); the event loop yields it only to them, the engine never sees one.
    ``gtid`` is the GTID event's, None for the others."""

    position: BinlogPosition
    gtid: str | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    """A transaction committed (XID or COMMIT) at ``position``: a place to resume from."""

    position: BinlogPosition
    gtid: str | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class PreparedCommit:
    """A transaction's row events that share one position, ``end.position``, applied as one unit
    (no batch ends among them, so no checkpoint falls inside) and then ``end``: an XA transaction
    committed by its ``XA COMMIT`` (its rows, read at its XA PREPARE, were held until now:
    cdc_core/binlog/xa.py), or a transaction MySQL compressed into one TRANSACTION_PAYLOAD event
    (cdc_core/binlog/payload.py: every event inside ends where the payload ends). Each event's
    ``first_row`` counts on from the rows of the events before it."""

    events: tuple[RowsEvent, ...]
    end: TransactionEnd

    @property
    def position(self) -> BinlogPosition:
        return self.end.position


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement other than BEGIN/COMMIT (DDL, TRUNCATE): a transaction of its own.
    ``database`` is the session's default database when it ran."""

    database: str
    sql: str
    position: BinlogPosition
    gtid: str | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The reader is idle at ``position`` (the server's heartbeat)."""

    position: BinlogPosition


@dataclass(frozen=True, slots=True)
class ReaderEnd:
    """The requested end position was reached; nothing follows."""

    position: BinlogPosition


class ReadFailure(enum.StrEnum):
    """Why reading stopped: decides what the engine does next."""

    TRANSIENT = "transient"  # reconnect with backoff
    PURGED = "purged"  # the position is gone from the server: re-snapshot or backfill
    SERVER_ID = "server_id"  # another replica took over the server_id
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class ReaderError:
    """Reading stopped on an error; nothing follows."""

    kind: ReadFailure
    message: str


ReaderRecord = (TableLayout | RowsEvent | TransactionEnd | PreparedCommit | Statement | Heartbeat | ReaderEnd
                | ReaderError)
