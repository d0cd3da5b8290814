"""One keyed table's share of a micro-batch when the table is not in the default layout
(cdc_core/schema/modes.py): rows stamped with their change's time and position, tombstones
of a ``soft_delete`` table, every version of a ``history`` table, and the changelog of a table
with a change feed.

Invariants (tests/test_history_modes.py, tests/test_history_stream.py):
- ``StampedBatch`` folds as ``TableBatch`` does (the last change per key wins), each row carrying
  its own change's time and position: kept once per row event (``Stamps``, by position) and
  spread over the rows in Arrow by their ``_cdc_seq``, so the fold's rows are the default's.
  In ``soft_delete`` mode a deleted key's last row is written as a tombstone (its before
  image, op 'd') instead of being removed, and every key is upserted (a tombstone of it may
  be in Delta, where an insert must replace it).
- ``HistoryBatch`` folds nothing: each key keeps its changes in binlog order, and its plan has
  one version per insert or update (several changes to a key in one batch are several
  versions); version i is valid from its change to change i+1 (``_valid_to_seq`` that change's
  ``_cdc_seq``), the last one is current unless a delete closed it. A key whose first change in
  the batch is not an insert closes the version Delta holds as current at that first change.
- Validity times never step back along a key's versions: a change's time is the later of its
  event's and the previous change's (binlog header times are the second a statement started,
  and one that started earlier may commit later); Delta's current version is taken into
  account when it is closed (pipelines/lake/versions.py).
- With a change feed, ``log`` holds every change applied, in binlog order: an insert's and an
  update's after image, a delete's before image; an update that moves the row key is a delete
  of the old key and an update of the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.batch.table_batch import Drop, TableBatch
from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.modes import (
    CDC_DELETED,
    CDC_POSITION,
    CDC_TS,
    IS_CURRENT,
    UTC_MICROS,
    VALID_FROM,
    VALID_TO,
    VALID_TO_SEQ,
    SinkColumns,
    position_text,
)
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import TableSchema

# Where each of a history version's columns is in its plan row, after the source values: op, seq, then these.
_AT = {VALID_FROM: 2, VALID_TO: 3, VALID_TO_SEQ: 4, IS_CURRENT: 5}


@dataclass
class Stamps:
    """The time (µs) and position text of each row event of a batch, by its position: the
    ``_cdc_seq`` of its rows shifted past the row index (``seq >> 12``,
    cdc_core/offset/position.py). Events that share a position (a ``PreparedCommit``'s,
    cdc_core/binlog/event_loop.py) share their transaction's end, GTID and times, so one stamp
    per position is each row's own. Plan rows carry no stamp: ``_cdc_ts`` and ``_cdc_position``
    are built per event, then spread over the rows in Arrow (:meth:`columns`)."""

    at: dict[int, tuple[int, str]] = field(default_factory=dict)

    def add(self, pos: BinlogPosition, time_us: int, gtid: str | None) -> None:
        self.at[pos.seq(0) >> 12] = (time_us, position_text(pos, gtid))

    def columns(self, seq: pa.Array) -> dict[str, pa.Array]:
        """``_cdc_ts`` and ``_cdc_position`` of the rows whose ``_cdc_seq`` are ``seq``: each
        row's event found by its position, its values taken from the events'."""
        events = pc.index_in(pc.shift_right(seq, 12), value_set=pa.array(list(self.at), pa.int64()))
        times, texts = zip(*self.at.values()) if self.at else ((), ())
        return {CDC_TS: pa.array(times, UTC_MICROS).take(events),
                CDC_POSITION: pa.DictionaryArray.from_arrays(events, pa.array(texts, pa.string())).dictionary_decode()}


class StampedBatch(TableBatch):
    """The last change per key, stamped (see the module invariants). Plan rows: the values in
    schema order, then ``_cdc_op`` and ``_cdc_seq``, as a TableBatch's; each row event's time and
    position are in ``stamps``."""

    def __init__(self, schema: TableSchema, columns: SinkColumns, drop: Drop | None = None,
                 drop_column: str | None = None):
        super().__init__(schema, drop, drop_column)
        self.columns = columns
        self.stamps = Stamps()
        self.log: list[tuple] = []  # every change, when the table has a change feed
        self._feed = columns.feed
        self._soft = columns.soft
        self._op = self._op_at = len(self.names)  # where _cdc_op is in a plan row
        self._deletes_rows = not self._soft  # a soft_delete table's deletions are upserted tombstones
        self._one_key = len(schema.row_key) == 1  # the fold's key is the value itself, else a tuple

    def add_event(self, op: str, rows: list, pos: BinlogPosition, time_us: int = 0, gtid: str | None = None,
                  first_row: int = 0) -> None:
        self.stamps.add(pos, time_us, gtid)
        super().add_event(op, rows, pos, first_row=first_row)

    def _write(self, row: tuple, op: str, seq: int, may_exist: bool) -> None:
        k = self._key(row)
        self.may_exist.setdefault(k, may_exist or self._soft)
        self.final[k] = full = (*row, op, seq)
        if self._feed:
            self.log.append(full)

    def _delete(self, row: tuple, seq: int) -> None:
        k = self._key(row)
        self.may_exist.setdefault(k, True)
        self.final[k] = full = (*row, "d", seq)
        if self._feed:
            self.log.append(full)


class CurrentStampedBatch(StampedBatch):
    """A ``current`` table's batch with metadata columns and no change feed: folded by
    ``TableBatch``'s own steps (its rows need nothing more than the default's)."""

    _write = TableBatch._write
    _delete = TableBatch._delete


@dataclass
class HistoryPlan:
    """A history table's batch: ``keys``, one per key the batch changes: the key's values, the
    time (µs) and ``_cdc_seq`` of its first change, and whether that change ends the version
    Delta holds as current (it is not an insert); ``versions``: the new versions, as
    StampedBatch rows followed by ``_valid_from``, ``_valid_to``, ``_valid_to_seq`` and
    ``_is_current`` (their changes' times in the batch's ``stamps``)."""

    keys: list[tuple] = field(default_factory=list)
    versions: list[tuple] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.keys or self.versions)


class HistoryBatch(StampedBatch):
    """Every change per key, in binlog order (see the module invariants)."""

    def __init__(self, schema: TableSchema, columns: SinkColumns, drop: Drop | None = None,
                 drop_column: str | None = None):
        super().__init__(schema, columns, drop, drop_column)
        self.changes_of: dict[object, list[tuple]] = {}

    def _write(self, row: tuple, op: str, seq: int, may_exist: bool) -> None:
        k = self._key(row)
        self.may_exist.setdefault(k, may_exist)
        full = (*row, op, seq)
        self.changes_of.setdefault(k, []).append(full)
        if self._feed:
            self.log.append(full)

    def _delete(self, row: tuple, seq: int) -> None:
        k = self._key(row)
        self.may_exist.setdefault(k, True)
        full = (*row, "d", seq)
        self.changes_of.setdefault(k, []).append(full)
        if self._feed:
            self.log.append(full)

    def plan(self) -> HistoryPlan:  # type: ignore[override]
        """Versions and closings (see the module invariants)."""
        out, at, one = HistoryPlan(), self._op, self._one_key
        keys, versions, may_exist, stamps = out.keys, out.versions, self.may_exist, self.stamps.at
        seq = at + 1
        for k, changes in self.changes_of.items():
            first = changes[0]
            first_at = stamps[first[seq] >> 12][0]  # the change's time: its event's (Stamps)
            keys.append(((k,) if one else k) + (first_at, first[seq], may_exist[k]))
            if len(changes) == 1:  # most keys: one change, no running time
                if first[at] != "d":
                    versions.append((*first, first_at, None, None, True))
                continue
            times, t = [], first_at
            for ch in changes:
                t = max(t, stamps[ch[seq] >> 12][0])
                times.append(t)
            last = len(changes) - 1
            for i, ch in enumerate(changes):
                if ch[at] == "d":
                    continue
                if i < last:
                    versions.append((*ch, times[i], times[i + 1], changes[i + 1][at + 1], False))
                else:
                    versions.append((*ch, times[i], None, None, True))
        return out


def mode_batch(schema: TableSchema, columns: SinkColumns, drop: Drop | None = None,
               drop_column: str | None = None) -> StampedBatch:
    """The batch of a keyed table laid out as ``columns`` says (not plain)."""
    if columns.history:
        return HistoryBatch(schema, columns, drop, drop_column)
    plain_fold = not (columns.soft or columns.feed)
    return (CurrentStampedBatch if plain_fold else StampedBatch)(schema, columns, drop, drop_column)


def mode_arrow(schema: TableSchema, rows: list[tuple], columns: SinkColumns, stamps: Stamps) -> pa.Table:
    """Plan rows of a StampedBatch or HistoryPlan versions as an Arrow table with ``columns``'
    layout (cdc_core/schema/output.py: ``output_schema``), their times and positions from the
    batch's ``stamps``; ``_cdc_deleted`` is true for 'd'."""
    target = output_schema(schema, columns.fields())
    if not rows:
        return target.empty_table()
    values = list(zip(*rows))
    n = len(schema.columns)
    arrays = [pa.array(values[i], f.type) for i, f in enumerate(target) if i < n + 2]
    stamped = stamps.columns(arrays[n + 1]) if columns.ts or columns.position else {}
    for f in list(target)[n + 2:]:
        if f.name == CDC_DELETED:
            arrays.append(pc.equal(arrays[n], "d"))
        elif f.name in stamped:
            arrays.append(stamped[f.name])
        else:
            arrays.append(pa.array(values[n + _AT[f.name]], f.type))
    return pa.Table.from_arrays(arrays, schema=target)
