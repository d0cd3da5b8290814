"""The stream engine's one state object, the summary of a run, and the schema-history
recorder the parts share.

Invariants:
- ``position`` is the end of the last event read; ``resume`` the last transaction
  boundary read (``resume <= position``); ``offset`` the last checkpoint written.
- ``txn_rows`` counts the captured rows of the transaction being read up to
  ``position`` (also those a restart skipped: it starts from the checkpoint's count), so
  an offset inside a transaction can be found on another server (cdc_core/offset/failover.py).
- ``tables`` holds every source table the stream knows (cdc_core/schema/history.py:
  TableState); a table is applied to Delta only while ``streamed``.
- The recorder writes each (table, position, change, status) once, also across
  restarts (a change read again after a crash is not recorded twice); entries it defers
  are written, in order, with the next entry or flush, in one commit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from cdc_core.batch.micro_batch import MicroBatch
from cdc_core.binlog.events import Heartbeat, RowsEvent, TableLayout
from cdc_core.chunks.handoff import HandoffFilter
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import SkipFilter, StreamOffset
from cdc_core.schema.history import HistoryEntry, TableState
from cdc_core.schema.table import TableSchema
from pipelines.lake.control_store import ControlStore
from pipelines.schema.registry import PendingChange


@dataclass
class StreamSummary:
    """What one engine run did."""

    start: BinlogPosition | None = None
    end: BinlogPosition | None = None
    changes: int = 0  # row changes read (after skip and hand-off filtering)
    batches: int = 0
    commits: int = 0
    reconnects: int = 0
    seconds: float = 0.0
    stop_reason: str = ""
    tables: dict[str, int] = field(default_factory=dict)  # changes per table
    held_rows_peak: int = 0  # most rows of held tables kept in memory at once (external schema changes)

    def to_json(self, pipeline: str) -> dict:
        """The summary as ``binlake stream --json`` prints it (docs/contracts.md)."""
        return {"pipeline": pipeline, "start": str(self.start) if self.start else None,
                "end": str(self.end) if self.end else None, "changes": self.changes, "batches": self.batches,
                "commits": self.commits, "reconnects": self.reconnects, "seconds": round(self.seconds, 3),
                "stop_reason": self.stop_reason, "tables": dict(self.tables)}


@dataclass
class Hold:
    """A table waiting for its pending schema change to be applied by another process."""

    pending: PendingChange
    before: TableSchema  # the source schema before the DDL (restored when the DDL is read again)
    checkpoint: StreamOffset  # the pipeline offset before the DDL: the checkpoint stays here
    batch: MicroBatch = field(default_factory=MicroBatch)  # the table's rows after the DDL


@dataclass
class EngineState:
    """Everything the engine's parts read and change while streaming."""

    start: BinlogPosition
    position: BinlogPosition
    resume: BinlogPosition
    offset: StreamOffset
    decide_at: BinlogPosition
    gtid: str | None = None  # of the transaction that ended at ``resume``
    event_time: int = 0
    server_id: int | None = None  # the source's own
    txn_gtid: str | None = None  # of the transaction being read
    txn_rows: int = 0
    batch: MicroBatch = field(default_factory=MicroBatch)
    tables: dict[str, TableState] = field(default_factory=dict)  # by source table
    layouts: dict[int, TableLayout] = field(default_factory=dict)  # of the running reader process
    conversions: dict[tuple[str, int], TableSchema] = field(default_factory=dict)  # (table, layout) -> columns
    skip: SkipFilter = field(default_factory=lambda: SkipFilter(None, {}))
    filters: dict[str, HandoffFilter] = field(default_factory=dict)  # by source table, until past the hand-off
    holds: dict[str, Hold] = field(default_factory=dict)  # by Delta (sink) table
    undecided: set[str] = field(default_factory=set)
    summary: StreamSummary = field(default_factory=StreamSummary)

    def read(self, ev: RowsEvent) -> None:
        """Row event ``ev`` is read: the position moves past it, inside its transaction."""
        self.position, self.txn_gtid = ev.position, ev.gtid
        self.txn_rows += len(ev.rows)

    def boundary(self, position: BinlogPosition, gtid: str | None, timestamp: int) -> None:
        """A transaction (or statement) ended at ``position``: a place to resume from."""
        self.position = self.resume = position
        self.gtid, self.event_time = gtid or self.gtid, timestamp or self.event_time
        self.txn_gtid, self.txn_rows = None, 0

    def offset_here(self) -> StreamOffset:
        """The offset of everything read so far."""
        inside = self.position > self.resume
        return StreamOffset(min(self.resume, self.position), self.position, self.gtid, self.event_time,
                            self.server_id, self.txn_gtid if inside else None, self.txn_rows if inside else 0)

    def rewind(self) -> None:
        """Read again from the checkpoint (a reconnect): its transaction's rows counted."""
        self.resume, self.position = self.offset.resume, self.offset.applied
        self.txn_gtid, self.txn_rows = self.offset.txn_gtid, self.offset.txn_rows

    def streamed(self) -> dict[str, TableSchema]:
        """Schemas of the tables applied to Delta whose schema is known."""
        return {n: t.schema for n, t in self.tables.items() if t.streamed and t.schema is not None}

    def set_schema(self, table: str, schema: TableSchema | None) -> None:
        """A table's declared schema changed: forget its cached row conversions."""
        state = self.tables.setdefault(table, TableState(table))
        state.schema = schema
        for key in [k for k in self.conversions if k[0] == table]:
            del self.conversions[key]

    def passed(self, rec, position: BinlogPosition) -> bool:
        """Whether reader record ``rec`` shows every change up to ``position`` is read (and,
        handled before ``rec``, nothing after it): a later event, or a heartbeat at or past it
        between transactions."""
        if isinstance(rec, Heartbeat):
            return self.resume == self.position and rec.position >= position
        at = getattr(rec, "position", None)
        return at is not None and at > position

    def held_rows(self) -> int:
        return sum(h.batch.rows for h in self.holds.values())


class HistoryRecorder:
    """Writes schema-history entries once each (see the module invariants); entries deferred
    with :meth:`defer` are written with the next one recorded, or by :meth:`flush`, in one commit."""

    def __init__(self, store: ControlStore, history: list[HistoryEntry]):
        self.store = store
        self.keys = {(*e.key, e.status) for e in history}
        self._deferred: list[HistoryEntry] = []

    def record(self, *entries: HistoryEntry) -> bool:
        """Record ``entries`` (with any deferred before them) in one commit, leaving out those recorded
        before; whether any was written now."""
        fresh = self._unrecorded(entries)
        self._deferred += fresh  # kept until written: after a failed write, the next one makes it again
        if not self._deferred:
            return False
        self.store.record_schema(*self._deferred)
        self._deferred = []
        return bool(fresh)

    def defer(self, entry: HistoryEntry) -> None:
        """Record ``entry`` with the next commit to the schema history (a table's first table map:
        the batch commit writes every one of them at once, before the batch's data)."""
        self._deferred.extend(self._unrecorded((entry,)))

    def flush(self) -> None:
        """Write the deferred entries, if any, in one commit."""
        self.record()

    def _unrecorded(self, entries) -> list[HistoryEntry]:
        fresh = []
        for entry in entries:
            key = (*entry.key, entry.status)
            if key not in self.keys:
                self.keys.add(key)
                fresh.append(entry)
        return fresh

    def entry(self, table: str, position: BinlogPosition, index: int, kind: str, status, **fields) -> bool:
        """Record a new entry built from its fields."""
        return self.record(HistoryEntry(table, position, index, kind, status, **fields))


def with_status(entry: HistoryEntry, **changes) -> HistoryEntry:
    """A copy of ``entry`` with ``changes``."""
    return dataclasses.replace(entry, **changes)
