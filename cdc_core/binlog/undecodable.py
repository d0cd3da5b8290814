"""Binlog events binlake cannot decode: reading stops at them, it never passes over them.

A reader that passed over an event it could not decode would lose the changes in it
without a word (MariaDB's compressed row events did: Delta held none of 50 rows). So the
event loop (cdc_core/binlog/event_loop.py) stops at each such event with an
``UndecodableEvent``, a ``TerminalError`` naming the event's type (number and name), its
end position, the server setting that writes it and what to do.

Invariants (tests/test_event_loop.py, tests/test_compressed_binlog.py):
- An event python-mysql-replication returns as ``NotImplementedEvent`` stops reading unless
  its type is in ``HARMLESS`` (types that carry no change: MySQL's anonymous GTID, ignorable,
  transaction-context, view-change and v2 heartbeat events) or the server flagged it
  ``LOG_EVENT_IGNORABLE_F`` (a replica that does not know it may pass over it). An unknown
  type stops with its number.
- Named with their setting: MariaDB's compressed events 0xA5-0xAB (``log_bin_compress``),
  MySQL's TRANSACTION_PAYLOAD (40, ``binlog_transaction_compression``) and
  PARTIAL_UPDATE_ROWS (39, ``binlog_row_value_options=PARTIAL_JSON``; the library reads it,
  binlake does not: the loop refuses it where it reads rows of its table).
- A loop that reads no rows (the start scan, the statement scan) passes over the types in
  ``ROW_CHANGES_ONLY``, which hide row changes and nothing else (no statement, no
  transaction's start or end); every other refused type hides more and stops every loop.
- The events the library does not map to a class of its own but that a binlog of a
  supported server may hold are in ``HARMLESS`` or refused here; none is passed over unnamed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.errors import TerminalError
from cdc_core.offset.position import BinlogPosition

LOG_EVENT_IGNORABLE_F = 0x80  # header flag: "a replica that does not know this event may ignore it"

# Event types the library returns as NotImplementedEvent that carry no change.
HARMLESS = {
    0x1C: "IGNORABLE_LOG_EVENT",
    0x22: "ANONYMOUS_GTID_LOG_EVENT",  # MySQL without GTIDs: a transaction's first event, no data
    0x24: "TRANSACTION_CONTEXT_EVENT",  # group replication's certification data
    0x25: "VIEW_CHANGE_EVENT",  # group replication's membership change
    0x29: "HEARTBEAT_LOG_EVENT_V2",  # MySQL 8.0.26+: an idle source's heartbeat
}

# What cannot be read any further once such an event is in the binlog: the events already written stay.
_CANNOT_PASS = ("binlake cannot read past such an event: re-snapshot the tables it may have written from a point "
                "after it (a new pipeline.name or an empty sink folder), or, once the server has purged the binlog "
                "holding it, run `binlake resync`")


@dataclass(frozen=True)
class _Cause:
    """A known event type binlake does not decode: what writes it and how to stop it."""

    name: str
    what: str
    setting: str


_COMPRESSED = "log_bin_compress is ON (SET GLOBAL log_bin_compress = OFF)"
KNOWN: dict[int, _Cause] = {
    0x27: _Cause("PARTIAL_UPDATE_ROWS_EVENT", "updates that carry only the changed parts of JSON values",
                 "binlog_row_value_options is PARTIAL_JSON (SET GLOBAL binlog_row_value_options = '')"),
    0x28: _Cause("TRANSACTION_PAYLOAD_EVENT", "a compressed transaction",
                 "binlog_transaction_compression is ON (SET GLOBAL binlog_transaction_compression = OFF)"),
    0xA5: _Cause("QUERY_COMPRESSED_EVENT", "a compressed statement", _COMPRESSED),
    **{t: _Cause(name, "compressed row changes", _COMPRESSED) for t, name in (
        (0xA6, "WRITE_ROWS_COMPRESSED_EVENT_V1"), (0xA7, "UPDATE_ROWS_COMPRESSED_EVENT_V1"),
        (0xA8, "DELETE_ROWS_COMPRESSED_EVENT_V1"), (0xA9, "WRITE_ROWS_COMPRESSED_EVENT"),
        (0xAA, "UPDATE_ROWS_COMPRESSED_EVENT"), (0xAB, "DELETE_ROWS_COMPRESSED_EVENT"))},
}
COMPRESSED_EVENTS = frozenset(range(0xA5, 0xAC))  # MariaDB's (log_bin_compress)
# Types that hold row changes and nothing else: MariaDB's compressed row events, MySQL's partial JSON updates.
ROW_CHANGES_ONLY = frozenset({0x27, *range(0xA6, 0xAC)})

# Other types the library does not decode, named in the message of an unknown type.
NAMES = {0x00: "UNKNOWN_EVENT", 0x01: "START_EVENT_V3", 0x06: "LOAD_EVENT", 0x07: "SLAVE_EVENT",
         0x08: "CREATE_FILE_EVENT", 0x09: "APPEND_BLOCK_EVENT", 0x0A: "EXEC_LOAD_EVENT", 0x0B: "DELETE_FILE_EVENT",
         0x0C: "NEW_LOAD_EVENT", 0x14: "PRE_GA_WRITE_ROWS_EVENT", 0x15: "PRE_GA_UPDATE_ROWS_EVENT",
         0x16: "PRE_GA_DELETE_ROWS_EVENT", 0x1A: "INCIDENT_EVENT", 0x2A: "GTID_TAGGED_LOG_EVENT"}


class UndecodableEvent(TerminalError):
    """The binlog holds an event binlake cannot decode, which may carry changes."""

    def __init__(self, message: str, event_type: int, position: BinlogPosition) -> None:
        super().__init__(message)
        self.event_type, self.position = event_type, position


class CompressedBinlog(UndecodableEvent):
    """An event MariaDB compressed (log_bin_compress=ON)."""


class CompressedTransaction(UndecodableEvent):
    """A transaction MySQL compressed (binlog_transaction_compression=ON)."""


class PartialJsonUpdate(UndecodableEvent):
    """An update MySQL wrote with partial JSON values (binlog_row_value_options=PARTIAL_JSON)."""


class UnknownEvent(UndecodableEvent):
    """An event type binlake does not know."""


_ERRORS = {0x27: PartialJsonUpdate, 0x28: CompressedTransaction, **{t: CompressedBinlog for t in COMPRESSED_EVENTS}}


def harmless(event) -> bool:
    """Whether a ``NotImplementedEvent`` may be passed over (see the module invariants)."""
    return event.event_type in HARMLESS or bool(event.packet.flags & LOG_EVENT_IGNORABLE_F)


def refusal(event_type: int, position: BinlogPosition) -> UndecodableEvent:
    """The error for an event of ``event_type`` ending at ``position`` that binlake cannot decode."""
    cause = KNOWN.get(event_type)
    if cause is None:
        name = NAMES.get(event_type, "not a type binlake knows")
        return UnknownEvent(f"the binlog event ending at {position} is of type {event_type} (0x{event_type:02X}, "
                            f"{name}), which binlake cannot decode and which may hold changes. {_CANNOT_PASS}",
                            event_type, position)
    return _ERRORS[event_type](
        f"the binlog event ending at {position} ({cause.name}, type {event_type}) holds {cause.what}, which binlake "
        f"cannot decode; the server writes such events while {cause.setting}: turn that off so no more are "
        f"written. {_CANNOT_PASS}", event_type, position)
