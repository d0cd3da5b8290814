"""One table's share of a micro-batch: row events folded to the last change per key.

Invariants (tested in tests/test_table_batch.py):
- Applying ``plan()`` to the table as it was before the batch gives the table as it
  is after the batch's last event: for every key touched, the last image wins (an
  insert or update writes the row, a delete removes it), whatever happened before
  it in the batch; a key's changes are never reordered.
- A primary-key update is a delete of the old key and a write of the new one.
- A key whose first change in the batch is an insert is absent from Delta before
  the batch (Delta mirrors MySQL up to the batch's start, and MySQL just inserted
  it), so its final row is appended without a lookup; every other written key is
  upserted and every deleted key that may exist is deleted.
- ``drop(key_value, position)`` (the snapshot hand-off) is asked per image: a
  change already in the snapshot's chunk is skipped, the before and after images
  of a key move being judged by their own chunks.
- A table without a row key (KeylessBatch): equal rows are interchangeable, so the batch
  is a multiset difference. Per distinct row value, copies added minus copies removed
  (an update removes its before image and adds its after image, also when both are
  equal); a positive difference appends that many copies, a negative one removes that
  many of the copies Delta holds (pipelines/lake/apply.py: apply_keyless). The order of
  changes within the batch cannot matter: only the count per value is left.
- Every event of one TableBatch was written with the same columns (``schema``, the
  event's table map as cdc_core/schema/history.py: conversion_schema gives it): values
  arrive in schema order, so no column is ever matched by a name or position taken
  from elsewhere.
- ``changes`` counts the binlog row changes folded in, per op (an update is one change,
  whatever its images became): the changes the batch's commit covers, also those the
  hand-off dropped and those that fold to nothing (docs/contracts.md: binlake.stream.changes).
- Row events decoded into columns (cdc_core/binlog/row_images.py: ColumnarRows) are held as they
  are and folded in Arrow when the batch is planned (``_columnar_plan``): the plan's ``arrow`` rows
  are the rows the tuple path would plan of them, equal value for value and type for type. Their
  fold is the tuple path's: their actions in binlog order are each image written (an insert's, an
  update's after image), each image deleted (a delete's, and before its after image the before
  image of an update that changes its key); per key the last action gives the row and its op (a
  delete's row its before image), the first whether the key may exist in Delta (not when an insert
  came first).
- The held events come after every event the batch folded otherwise, but for inserts not held
  (another table map's, rows the columns do not read) while only inserts are held: any other event
  not held first folds the held events as tuples, in their order.
  Such an insert's key repeats no held insert's key (a key inserted twice is deleted between), so
  its order against them is of no account. When the held changes are fewer than
  ``COLUMNAR_MIN_ROWS``, a held key is one the batch folded otherwise, or a key column holds a NULL,
  the held events are folded as tuples after the others, which is their order too
  (tests/test_stream.py: test_columnar_changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.binlog.columnar import columns
from cdc_core.binlog.row_images import ColumnarRows, UndecodedRows
from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import TableSchema
from cdc_core.types.mapping import binlog_value, binlog_value_unchanged

Drop = Callable[[object, BinlogPosition], bool]

# A table's held changes of fewer rows in a batch (not counting those decoded as tuples already, the events of
# fewer than row_images.DECODED_BELOW rows) are folded as tuples (a live stream's small batches): the
# columns' cost per batch (numpy calls per column, null bitmap and segment) passes the tuples' below it. Measured
# on single-row events of a 7-column table, each decoded on use: about even at 256 changes, at 16 twice the
# tuples' CPU.
COLUMNAR_MIN_ROWS = 256


def _identity(v):
    return v


@dataclass
class TablePlan:
    """What to write: rows to append (keys new to Delta), rows to upsert, rows to delete.
    Each row is a tuple of canonical values in schema order, then _cdc_op and _cdc_seq."""

    append: list[tuple] = field(default_factory=list)
    upsert: list[tuple] = field(default_factory=list)
    delete: list[tuple] = field(default_factory=list)
    arrow: dict[str, pa.Table] = field(default_factory=dict)  # more rows by kind, as Arrow (changes read as columns)

    @property
    def empty(self) -> bool:
        return not (self.append or self.upsert or self.delete or self.arrow)

    def has(self, kind: str) -> bool:
        """Whether the plan has rows of ``kind`` (append, upsert, delete)."""
        return bool(getattr(self, kind)) or kind in self.arrow


class TableBatch:
    """Accumulates one table's row events of a batch, deduplicated per row key
    (TableSchema.row_key)."""

    def __init__(self, schema: TableSchema, drop: Drop | None = None, drop_column: str | None = None):
        if not schema.row_key:
            raise ValueError(f"{schema.qualified_name} has no row key: its changes are folded by KeylessBatch")
        self._setup(schema, drop, drop_column)
        # A row's key: its value (one key column) or a tuple of them, picked in C (every image passes here).
        self._key: Callable[[tuple], object] = itemgetter(*(self.names.index(k) for k in schema.row_key))
        self.final: dict[object, tuple] = {}  # key -> row + (op, seq)
        self.may_exist: dict[object, bool] = {}

    def _setup(self, schema: TableSchema, drop: Drop | None, drop_column: str | None) -> None:
        self.schema = schema
        self.names = tuple(c.name for c in schema.columns)
        # binlog_value's chain of checks runs only on the columns it changes (every row passes here,
        # an update's two images too): for most tables none.
        todo = tuple((i, partial(binlog_value, c)) for i, c in enumerate(schema.columns)
                     if not binlog_value_unchanged(c))
        # Columns (cdc_core/binlog/columnar.py) hold what binlog_value makes of the tuple path's values only
        # for the columns it leaves unchanged, TIMESTAMP (the epoch NULL) and BIGINT UNSIGNED (a Decimal of
        # the integer, decimal(20,0) in Arrow alike): a table with another column is folded as tuples.
        self._columnar = all(schema.columns[i].data_type in ("timestamp", "bigint") for i, _ in todo)
        self._target: pa.Schema | None = None
        if not todo:
            self._convert: Callable[[tuple], tuple] = _identity  # values are already tuples
        else:
            def convert(values: tuple) -> tuple:
                out = list(values)
                for i, f in todo:
                    out[i] = f(out[i])
                return tuple(out)

            self._convert = convert
        self.drop = drop
        self.drop_idx = self.names.index(drop_column) if drop_column else None
        self.held: list[tuple[ColumnarRows, BinlogPosition, int]] = []  # changes read as columns, not folded yet
        self._held_changes = False  # whether an update or a delete is among them
        self.events = 0
        self.rows_in = 0
        self.changes = {"c": 0, "u": 0, "d": 0}  # binlog row changes by op (see the module invariants)
        self.dropped = 0

    def _dropped(self, row: tuple, pos: BinlogPosition) -> bool:
        # No drop column: a table snapshotted as one chunk, whose filter asks for no key.
        if self.drop is not None and self.drop(None if self.drop_idx is None else row[self.drop_idx], pos):
            self.dropped += 1
            return True
        return False

    def _write(self, row: tuple, op: str, seq: int, may_exist: bool) -> None:
        k = self._key(row)
        self.may_exist.setdefault(k, may_exist)
        self.final[k] = (*row, op, seq)

    def _delete(self, row: tuple, seq: int) -> None:
        k = self._key(row)
        self.may_exist.setdefault(k, True)
        self.final[k] = (*row, "d", seq)

    def add_event(self, op: str, rows: list, pos: BinlogPosition, time_us: int = 0, gtid: str | None = None,
                  first_row: int = 0) -> None:
        """Fold one row event (op c/u/d; value tuples in schema order, updates as (before,
        after) pairs) into the batch; its rows are numbered from ``first_row`` in ``_cdc_seq``
        (cdc_core/binlog/events.py: RowsEvent); its time (µs, ``RowsEvent.time_us``) and ``gtid``
        are for the tables that keep them (cdc_core/batch/mode_batch.py)."""
        self.events += 1
        self.rows_in += len(rows)
        self.changes[op] += len(rows)
        if self.drop is None and type(self) is TableBatch and self._takes(rows):
            self.held.append((rows, pos, first_row))
            self._held_changes = self._held_changes or op != "c"
            return
        if op != "c" or self._held_changes:
            self._fold_held()
        self._fold(op, rows, pos, first_row)

    def _fold(self, op: str, rows: list, pos: BinlogPosition, first_row: int) -> None:
        """Fold one row event's value tuples (``add_event``'s arguments)."""
        conv = self._convert
        base = pos.seq(0)
        if op == "c" and self.drop is None and type(self)._write is TableBatch._write:
            self._insert(rows, base, first_row)
            return
        for i, r in enumerate(rows):
            seq = base | min(first_row + i, 4095)
            if op == "c":
                after = conv(r)
                if not self._dropped(after, pos):
                    self._write(after, "c", seq, False)
            elif op == "d":
                before = conv(r)
                if not self._dropped(before, pos):
                    self._delete(before, seq)
            else:
                self._update(r[0], r[1], seq, pos)

    def _takes(self, rows) -> bool:
        """Whether ``rows`` are columns this batch holds as they are (see the module invariants)."""
        if type(rows) is not ColumnarRows or not self._columnar:
            return False
        layout = rows.images.columnar
        if self.held:
            return layout is self.held[0][0].images.columnar  # one table map's events are read together
        if self._target is None:
            self._target = output_schema(self.schema)
        key = {self.names.index(k) for k in self.schema.row_key}
        kept = range(len(layout.kinds)) if layout.keep is None else layout.keep
        for i, (c, f) in enumerate(zip(kept, self._target)):
            t = layout.arrow_type(c)
            if i in key and pa.types.is_floating(t):
                return False  # 0.0 and -0.0 are one key to the tuple path, two to Arrow's grouping
            if t != f.type and not (pa.types.is_integer(t) and (pa.types.is_integer(f.type)
                                                                or pa.types.is_decimal(f.type))):
                return False
        return True

    def _fold_held(self) -> None:
        """Fold the held events as tuples, in their order (before anything later)."""
        held, self.held, self._held_changes = self.held, [], False
        for rows, pos, first_row in held:
            try:
                tuples = rows.tuples()
            except UndecodedRows as e:
                raise UndecodedRows(f"{e} (decoding {self.schema.qualified_name}'s rows at {pos})") from e
            self._fold(rows.op, tuples, pos, first_row)

    def _columnar_plan(self) -> dict[str, pa.Table] | None:
        """The held events' rows to append, upsert and delete, as the Arrow rows the tuple path would
        plan of them (see the module invariants), or None when the tuple path must fold them: a key
        the batch folded otherwise, a NULL in a key column, or values it must decode."""
        held, target = self.held, self._target
        read = columns(held[0][0].images.columnar, [rows.scan for rows, _, _ in held])
        if read is None:
            return None
        arrays = [a if a.type == f.type else a.cast(f.type) for a, f in zip(read, target)]
        key = [arrays[self.names.index(k)] for k in self.schema.row_key]
        if any(a.null_count for a in key):
            return None
        # Per image: whether it is a before image (an update's first, a delete's), whether an insert's, its
        # change's _cdc_seq (the event position's seq with the change's index from the event's first_row, at
        # most 4095).
        images = np.array([rows.scan.rows for rows, _, _ in held], dtype=np.int64)
        ops = np.repeat(np.frombuffer("".join(rows.op for rows, _, _ in held).encode(), dtype=np.uint8), images)
        step = np.where(ops == ord("u"), 2, 1)
        within = np.arange(int(images.sum()), dtype=np.int64) - np.repeat(np.cumsum(images) - images, images)
        update_before = (ops == ord("u")) & (within % 2 == 0)
        before = update_before | (ops == ord("d"))
        inserted = ops == ord("c")
        change = within // step + np.repeat([first for _, _, first in held], images)
        seq = np.repeat(np.array([pos.seq(0) for _, pos, _ in held], dtype=np.int64), images) | np.minimum(change, 4095)
        # The actions in order: every after image, every delete, and an update's before image when it changes its key.
        acts = ~update_before
        b = np.flatnonzero(update_before)
        for a in key:
            acts[b] |= ~np.asarray(pc.equal(a.take(b), a.take(b + 1)))
        idx = np.flatnonzero(acts)
        keys = [a.take(idx) for a in key]
        order = pa.array(idx)
        if self.final:  # the keys the batch folded otherwise: none of them may be a held one's
            folded = list(self.final)
            by_column = [folded] if len(key) == 1 else [list(c) for c in zip(*folded)]
            keys = [pa.concat_arrays([a, pa.array(c, a.type)]) for a, c in zip(keys, by_column)]
            order = pa.concat_arrays([order, pa.array(np.full(len(folded), -1, dtype=np.int64))])
        names = [f"k{j}" for j in range(len(keys))]
        groups = pa.Table.from_arrays([*keys, order], names=[*names, "i"]).group_by(names).aggregate(
            [("i", "min"), ("i", "max")])
        first, last = (np.asarray(groups.column(c)) for c in ("i_min", "i_max"))
        if ((first < 0) & (last >= 0)).any():
            return None
        first, last = first[last >= 0], last[last >= 0]  # (the keys folded otherwise are in ``final``)
        may_exist = ~inserted[first]  # an insert's key is new to Delta when the insert came first
        deleted = before[last]
        op = np.where(deleted, ord("d"), np.where(inserted[last], ord("c"), ord("u"))).astype(np.uint8)
        out = {}
        for kind, rows in (("append", ~deleted & ~may_exist), ("upsert", ~deleted & may_exist),
                           ("delete", deleted & may_exist)):
            at = last[rows]
            if len(at):
                op_column = pa.Array.from_buffers(pa.string(), len(at), [
                    None, pa.py_buffer(np.arange(len(at) + 1, dtype=np.int32)), pa.py_buffer(op[rows].tobytes())])
                out[kind] = pa.Table.from_arrays([*(a.take(at) for a in arrays), op_column,
                                                  pa.array(seq[at], pa.int64())], schema=target)
        return out

    def _insert(self, rows: list, base: int, first_row: int) -> None:
        """``add_event``'s inserts without a hand-off filter, folded by ``_write``'s steps inline
        (most rows of a catch-up pass here: a call per row less)."""
        conv, key, final, may_exist = self._convert, self._key, self.final, self.may_exist
        for i, r in enumerate(rows, first_row):
            row = conv(r)
            k = key(row)
            may_exist.setdefault(k, False)
            final[k] = (*row, "c", base | (i if i < 4095 else 4095))

    def _update(self, before: tuple, after: tuple, seq: int, pos: BinlogPosition) -> None:
        """An update's images as decoded: the before image is converted only when the update
        removes it (an update of a keyed table that keeps its key needs nothing of it)."""
        if self._removes(before, after):
            before = self._convert(before)
            if not self._dropped(before, pos):
                self._delete(before, seq)
        after = self._convert(after)
        if not self._dropped(after, pos):
            self._write(after, "u", seq, True)

    def _removes(self, before: tuple, after: tuple) -> bool:
        """Whether an update removes its before image (a key update: the row moves), from the
        decoded values: a conversion gives equal values equal results, and a key it would make
        equal is removed and then written again, which leaves the same plan."""
        return self._key(before) != self._key(after)

    # Where _cdc_op is in a plan row, and whether a deleted key's row is deleted (a subclass that
    # keeps tombstones upserts it: cdc_core/batch/mode_batch.py).
    _op_at = -2
    _deletes_rows = True

    def plan(self) -> TablePlan:
        """The batch's net effect (see the module invariants)."""
        # (rows decoded as tuples already are folded as tuples, unless few beside others)
        pending = sum(len(rows) for rows, _, _ in self.held if not rows.decoded)
        arrow = self._columnar_plan() if pending >= COLUMNAR_MIN_ROWS else None
        if arrow is None:
            self._fold_held()
        else:
            self.held, self._held_changes = [], False
        out, at, deletes = TablePlan(arrow=arrow or {}), self._op_at, self._deletes_rows
        for k, row in self.final.items():
            if row[at] == "d" and deletes:
                if self.may_exist[k]:
                    out.delete.append(row)
            elif self.may_exist[k]:
                out.upsert.append(row)
            else:
                out.append.append(row)
        return out


class KeylessBatch(TableBatch):
    """A table's row events when it has no row key: counted per distinct row value (see the
    module invariants)."""

    def __init__(self, schema: TableSchema, drop: Drop | None = None, drop_column: str | None = None):
        self._setup(schema, drop, drop_column)
        self.counts: dict[tuple, int] = {}  # row value -> copies added minus copies removed
        self.written: dict[tuple, tuple[str, int]] = {}  # row value -> (op, seq) of its last write
        self.removed: dict[tuple, int] = {}  # row value -> seq of its last removal

    def _write(self, row: tuple, op: str, seq: int, may_exist: bool) -> None:
        self.counts[row] = self.counts.get(row, 0) + 1
        self.written[row] = (op, seq)

    def _delete(self, row: tuple, seq: int) -> None:
        self.counts[row] = self.counts.get(row, 0) - 1
        self.removed[row] = seq

    def _removes(self, before: tuple, after: tuple) -> bool:
        return True  # the before image is one copy less, also when the after image is equal

    def plan(self) -> TablePlan:
        """Copies to append and copies to remove, one plan row per copy (see the module invariants)."""
        out = TablePlan()
        for row, n in self.counts.items():
            if n > 0:  # copies written (a later removal of another copy does not make them deletes)
                out.append += [(*row, *self.written[row])] * n
            elif n < 0:
                out.delete += [(*row, "d", self.removed[row])] * -n
        return out


def table_batch(schema: TableSchema, drop: Drop | None = None, drop_column: str | None = None) -> TableBatch:
    """The batch that folds ``schema``'s row events: by row key, or by whole rows without one."""
    return (TableBatch if schema.row_key else KeylessBatch)(schema, drop, drop_column)


def keyless_problem(schema: TableSchema) -> str | None:
    """Why a table without a row key cannot be streamed by its whole rows, or None (it can,
    or it has a row key)."""
    if schema.row_key:
        return None
    nested = [f.name for f in output_schema(schema) if pa.types.is_nested(f.type)]
    if nested:
        return (f"{schema.qualified_name} has no primary key or NOT NULL unique key and its rows cannot be "
                f"compared whole ({', '.join(nested)}: spatial values); name its identifying columns in "
                "source.key_columns or exclude it")
    return None


def plan_arrow(schema: TableSchema, plan: TablePlan, kind: str, target: pa.Schema | None = None) -> pa.Table:
    """A plan's rows of ``kind`` (append, upsert, delete) as Arrow: its tuples, then its ``arrow`` rows."""
    rows = plan_to_arrow(schema, getattr(plan, kind), target)
    more = plan.arrow.get(kind)
    if more is None:
        return rows
    return pa.concat_tables([rows, more]) if rows.num_rows else more


def plan_to_arrow(schema: TableSchema, rows: list[tuple], target: pa.Schema | None = None) -> pa.Table:
    """Arrow table (source columns + _cdc_op + _cdc_seq) of plan rows."""
    target = target or output_schema(schema)
    if not rows:
        return target.empty_table()
    # one column at a time (zip(*rows) would build an iterator per row and tuples as long as the batch)
    return pa.Table.from_arrays([pa.array(list(map(itemgetter(i), rows)), type=f.type) for i, f in enumerate(target)],
                                schema=target)
