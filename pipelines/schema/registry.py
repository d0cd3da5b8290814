"""Pending schema changes (Flink CDC's SchemaRegistry role): the stream engine records a
column change of a captured table as ``pending`` in ``_binlake/schema_history``;
``apply_pending`` applies it to the table's Delta table and records how it was resolved.
The engine calls it inline (``stream.schema_changes: inline``, the default); with
``external`` the engine holds the table and the Dagster job that the schema-change
sensor launches calls the same function, while the engine polls for the resolution.

Invariants (tests/test_schema_registry.py, tests/test_schema_evolution.py):
- A pending change is resolved by one history record with status applied, skipped or
  failed; ``pending_changes`` lists the unresolved ones in binlog order.
- Applying is idempotent (a sensor firing twice, a run retried after a crash between
  the Delta commit and the history record): an unrouted table whose own offset is past
  the DDL already has every change of it (a route's sink moves on with its other
  sources, so there the check below decides); otherwise each change checks Delta's schema first
  (an added column that is there, a dropped one that is gone, a type already in
  place) and commits nothing again. The offset alone cannot tell: the changes of one
  statement share its position.
- A failure (the behaviour is ``exception``, or ``evolve`` could not apply the change)
  is recorded as failed before ``SchemaChangeRejected`` is raised, so the engine that
  holds the table stops with the same message.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from cdc_core.config import BinlakeConfig
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.routes import Router
from cdc_core.schema.change import SchemaChange, UnparsedDDL, parse_ddl
from cdc_core.schema.history import RESOLVED, HistoryEntry, Status
from cdc_core.source.capture import captured_change
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import applied_position_key, stream_commit_properties
from pipelines.lake.tables import DeltaTable, open_table, table_uri
from pipelines.schema.applier import ApplyResult, SchemaChangeRejected, apply_schema_change

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingChange:
    """One column change of one table, at its DDL's binlog position, waiting to be applied."""

    table: str
    position: BinlogPosition
    index: int  # the change's place among the statement's changes
    kind: str
    ddl: str
    description: str
    schema: object  # the source table's TableSchema right after the change (None if unknown)
    recorded_at: dt.datetime

    @property
    def key(self) -> tuple[str, str, int, int]:
        """Identifies the change in the schema history."""
        return self.table, self.position.file, self.position.pos, self.index

    @property
    def run_key(self) -> str:
        """A stable name for the change (the Dagster run key of its application)."""
        return f"{self.table}@{self.position}#{self.index}"

    def change(self) -> SchemaChange:
        """The typed change, parsed again from the recorded DDL (unqualified names are the table's
        database); for a statement whose changes are known but not the values existing rows took
        (``UnparsedDDL.changes``), those changes."""
        try:
            return parse_ddl(self.ddl, self.table.split(".", 1)[0])[self.index]
        except UnparsedDDL as e:
            if e.changes:
                return e.changes[self.index]
            raise

    @classmethod
    def from_entry(cls, e: HistoryEntry) -> PendingChange:
        """The pending change of a schema-history entry."""
        return cls(e.table, e.position, e.index, e.kind, e.ddl, e.description, e.schema,
                   e.recorded_at or dt.datetime.now(dt.UTC))


def resolutions(store: ControlStore) -> dict[tuple[str, str, int, int], HistoryEntry]:
    """The entry resolving each resolved change, by change key."""
    return {e.key: e for e in store.schema_history() if e.status in RESOLVED}


def pending_changes(store: ControlStore, history: list[HistoryEntry] | None = None) -> list[PendingChange]:
    """Recorded but unresolved changes, in binlog order (from ``history`` when the caller has read it)."""
    history = store.schema_history() if history is None else history
    resolved = {e.key for e in history if e.status in RESOLVED}
    seen: set = set()
    out = []
    for e in history:
        if e.status == Status.PENDING and e.key not in resolved and e.key not in seen:
            seen.add(e.key)
            out.append(PendingChange.from_entry(e))
    return out


def apply_pending(cfg: BinlakeConfig, pending: PendingChange, *, store: ControlStore | None = None,
                  table: DeltaTable | None = None, held_since: dt.datetime | None = None) -> ApplyResult:
    """Apply ``pending`` to its Delta table under ``pipeline.schema_change_behavior`` and
    record the resolution (see the module invariants); raises SchemaChangeRejected on failure."""
    store = store or ControlStore.of(cfg)
    router = Router(cfg.routes)
    source = pending.table if router.routed(pending.table) else None  # its sink holds other sources' rows too
    if table is None:
        table = open_table(table_uri(cfg.sink.path, router.sink(pending.table)), cfg.sink.storage_options)
        if table is None:
            raise SchemaChangeRejected(f"{pending.table} has no Delta table to apply {pending.description} to")
    p = pending.position
    held_since = held_since or pending.recorded_at
    props = stream_commit_properties(cfg.pipeline.name, StreamOffset(p, p))

    def record(status: Status, detail: str) -> None:
        held_ms = (dt.datetime.now(dt.UTC) - held_since).total_seconds() * 1000
        store.record_schema(HistoryEntry(pending.table, p, pending.index, pending.kind, status,
                                         pending.description, pending.ddl, pending.schema, detail,
                                         held_ms if status != Status.FAILED else None))

    done = applied_position_key(table, cfg.pipeline.name)
    if source is None and done is not None and done > p.key:
        result = ApplyResult(f"already in Delta (the table's offset is past {p})", skipped=True)
        record(Status.APPLIED, result.action)
        return result
    change = captured_change(pending.change(), cfg.source)  # types: as it concerns the captured columns
    if change is None:
        result = ApplyResult("concerns excluded columns only (source.exclude_columns)", skipped=True)
        record("skipped", result.action)
        return result
    try:
        result = apply_schema_change(table, change, cfg.pipeline.schema_change_behavior, props, source=source)
    except SchemaChangeRejected as e:
        record(Status.FAILED, str(e))
        raise SchemaChangeRejected(f"{e} (DDL at {p}: {pending.ddl})") from None
    record(Status.SKIPPED if result.skipped else Status.APPLIED, result.action)
    log.info("schema change of %s at %s: %s → %s", pending.table, p, pending.description, result.action)
    return result
