"""The schema of every captured table at every binlog position.

Two sources, checked against each other:
- the **schema history** (``_binlake/schema_history``): a baseline per table (the schema
  at a known position — recorded by the snapshot before it reads a chunk, or by the
  stream's first start), then every DDL on the table, parsed into typed changes
  (cdc_core/schema/change.py). It carries intent the binlog's rows cannot: a rename
  is not a drop and an add, an added column's DEFAULT fills existing rows, and types
  the binlog stores alike are told apart (MariaDB's INET6/UUID are BINARY(16) there).
- the **table map** of every row event (``binlog_row_metadata=FULL``): the exact
  columns the row was written with (cdc_core/binlog/decoder.py).

Invariants (tests/test_schema_history.py):
- A row is decoded with the columns of its own table map, in their order and
  spelling (``conversion_schema``), refined by the history's declared column of the
  same name when both store values alike: never with names or positions taken from
  the live table.
- A table's history folds to the schema in force at a position: the last baseline at
  or before it, evolved by every change recorded after that baseline up to it. A
  baseline *after* the position (a snapshot taken since) supersedes everything before
  it: DDL at or before a baseline is already in the baseline's schema and in Delta
  (``TableState.reflects``).
- When a table map and the declared schema disagree on the set of columns or on how
  a column's values are stored, the history missed or misread a change
  (``Divergence``): the table map wins for decoding, and the caller records it and
  decides, by behaviour, how Delta follows; it is never silent.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import Column, TableSchema
from cdc_core.types.codec import UnsupportedType
from cdc_core.types.registry import codec_for


class Status(enum.StrEnum):
    """What a schema-history entry says about its change."""

    BASELINE = "baseline"  # the table's schema at this position; Delta reflects the table up to here
    PENDING = "pending"  # recorded, waiting to be applied to Delta
    APPLIED = "applied"
    SKIPPED = "skipped"  # the behaviour left Delta as it was
    FAILED = "failed"
    RECORDED = "recorded"  # known but not applied: the table left the capture, or is not streamed
    UNPARSED = "unparsed"  # a DDL binlake could not turn into changes
    DIVERGED = "diverged"  # the binlog's table map differed from the history: adopted from the table map


RESOLVED = (Status.APPLIED, Status.SKIPPED, Status.FAILED)
# Entries whose schema is the table's schema from their position on.
_DEFINING = (Status.BASELINE, Status.APPLIED, Status.SKIPPED, Status.DIVERGED)


@dataclass(frozen=True)
class HistoryEntry:
    """One schema-history record: a change of ``table`` at the DDL's binlog position
    (``index``: its place among the statement's changes)."""

    table: str
    position: BinlogPosition
    index: int
    kind: str
    status: Status
    description: str = ""
    ddl: str = ""
    schema: TableSchema | None = None  # the table's schema right after the change
    detail: str = ""
    held_ms: float | None = None
    needs_backfill: bool = False  # Delta may differ from MySQL for this table until it is backfilled
    recorded_at: dt.datetime | None = None

    @property
    def key(self) -> tuple[str, str, int, int]:
        """Identifies the change (one change may have several entries: pending, then applied)."""
        return self.table, self.position.file, self.position.pos, self.index

    @property
    def order(self) -> tuple:
        return self.position.key, self.index, self.recorded_at or dt.datetime.min.replace(tzinfo=dt.UTC)


# --- columns as the binlog stores them ------------------------------------------------------------

def storage_class(col: Column) -> str:
    """How a column's values are stored in a row image: equal for a declared column and
    the table map's column of the same column exactly when they decode alike (its codec's
    ``storage_class``: types the table map reports as another type, such as INET6 as
    BINARY(16), share that type's)."""
    try:
        return codec_for(col).storage_class(col)
    except UnsupportedType:
        return f"unmapped {col.column_type}"


@dataclass(frozen=True)
class Divergence:
    """A table map that disagrees with the declared schema."""

    table: str
    position: BinlogPosition
    added: tuple[str, ...]  # in the table map, not declared
    removed: tuple[str, ...]  # declared, not in the table map
    retyped: tuple[str, ...]  # in both, stored differently

    def describe(self) -> str:
        parts = [f"{label} {', '.join(names)}" for label, names in
                 (("new columns", self.added), ("missing columns", self.removed), ("changed types", self.retyped))
                 if names]
        return (f"{self.table}: the binlog's table map at {self.position} differs from the schema history "
                f"({'; '.join(parts)})")


def conversion_schema(declared: TableSchema | None, layout: TableSchema,
                      position: BinlogPosition) -> tuple[TableSchema, Divergence | None]:
    """The schema to decode rows written with ``layout`` (their table map): the layout's
    columns in its order and spelling, each the declared column of the same name
    (case-insensitive, as MySQL's) when both store values alike; and the divergence, if
    any (see the module invariants). The primary key is the table map's, the unique key the
    declared one's."""
    if declared is None:
        return layout, None
    by_name = {c.name.lower(): c for c in declared.columns}
    columns, added, retyped = [], [], []
    for col in layout.columns:
        mine = by_name.get(col.name.lower())
        if mine is None:
            added.append(col.name)
            columns.append(col)
        elif storage_class(mine) != storage_class(col):
            retyped.append(col.name)
            columns.append(col)
        elif mine.data_type in ("enum", "set"):
            columns.append(col)  # the table map's members are exact (information_schema's may hold '?')
        else:
            columns.append(mine if mine.name == col.name else dataclasses.replace(mine, name=col.name))
    present = {c.name.lower() for c in layout.columns}
    removed = [c.name for c in declared.columns if c.name.lower() not in present]
    spelled = {c.name.lower(): c.name for c in columns}
    # The table map has no unique keys: the declared one holds while its columns are all there.
    unique = () if any(k.lower() not in spelled for k in declared.unique_key) else \
        tuple(spelled[k.lower()] for k in declared.unique_key)
    schema = TableSchema(layout.database, layout.table, tuple(columns), layout.primary_key or declared.primary_key,
                         unique)
    diverged = Divergence(layout.qualified_name, position, tuple(added), tuple(removed), tuple(retyped)) \
        if added or removed or retyped else None
    return schema, diverged


# --- a table's state folded from its history ---------------------------------------------------------


@dataclass
class TableState:
    """What the stream knows of one source table."""

    name: str
    schema: TableSchema | None = None  # declared schema in force; None: not known yet (a table map defines it)
    baseline: BinlogPosition | None = None  # DDL at or before it is already in ``schema`` and in Delta
    streamed: bool = True  # False: left the capture, or waits for a backfill
    needs_backfill: bool = False
    history: list[HistoryEntry] = field(default_factory=list, repr=False)

    def reflects(self, position: BinlogPosition) -> bool:
        """Whether a DDL at ``position`` is already in the baseline (and so in Delta)."""
        return self.baseline is not None and position <= self.baseline


def fold(table: str, entries: Iterable[HistoryEntry], upto: BinlogPosition) -> TableState:
    """The state of ``table`` for a stream resuming after ``upto`` (see the module invariants)."""
    entries = sorted((e for e in entries if e.table == table), key=lambda e: e.order)
    state = TableState(table, history=entries)
    baselines = [e for e in entries if e.status == Status.BASELINE]
    last = baselines[-1] if baselines else None
    if last is not None and last.position > upto:
        # A snapshot taken after the resume point: everything on the table up to it is in Delta.
        state.schema, state.baseline = last.schema, last.position
        return state
    start = entries.index(last) if last is not None else 0
    if last is not None:
        state.baseline = last.position
    for e in entries[start:]:
        if e.position > upto:
            break
        if e.status in _DEFINING and e.schema is not None:
            state.schema = e.schema
            state.streamed = True
        elif e.status == Status.RECORDED:
            state.streamed = False
        if e.needs_backfill:
            state.needs_backfill = True  # until a later baseline (a backfill or re-snapshot) clears it
    return state
