"""A history table's batch (cdc_core/batch/mode_batch.py: ``HistoryPlan``) as one Delta commit:
the versions Delta holds as current are closed where the batch's changes end them, and the new
versions are appended, by copy-on-write of only the files holding those current versions.

Invariants (tests/test_history_modes.py, tests/test_delta_apply.py):
- After a commit each key has at most one current version (``_is_current``, ``_valid_to``
  NULL): the one the batch's last change of the key opened, else the one Delta held (when the
  batch did not end it), else none (the key is deleted).
- A closed version gets ``_valid_to`` = the closing change's time and ``_valid_to_seq`` = its
  ``_cdc_seq``; times never step back along a key: a new version's ``_valid_from`` (and its
  ``_valid_to``) is at least the key's latest time in Delta (its current version's start, or
  the end of its last version: also across a delete and a re-insert).
- A key's new versions go into the file that held its current version (a file keeps its key
  range, so later batches still prune on key statistics), the other new versions into one
  new file; files without such a version are not rewritten.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from cdc_core.batch.table_commit import RowsApplied
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
)
from cdc_core.schema.output import CDC_OP, CDC_SEQ
from pipelines.lake.apply import FILE_ROW, files_matching
from pipelines.lake.files import write_parquet, writer_properties
from pipelines.lake.tables import delta_schema, post_commit_hooks

_KEY, _VERSION = "_binlake_key", "_binlake_version"
# In ``keys``: the time and _cdc_seq of the key's first change in the batch, and whether it ends the
# version Delta holds as current.
_AT, _SEQ, _CLOSES = "_binlake_at", "_binlake_seq", "_binlake_closes"
_MIN = np.iinfo(np.int64).min


def key_table(key: tuple[str, ...], key_types: pa.Schema, keys: list[tuple]) -> pa.Table:
    """``HistoryPlan.keys`` rows as a table: the key columns, the first change's time and seq,
    whether it closes Delta's current version."""
    cols = list(zip(*keys)) or [()] * (len(key) + 3)
    n = len(key)
    arrays = [pa.array(c, key_types.field(k).type) for c, k in zip(cols, key)]
    arrays += [pa.array(cols[n], pa.int64()), pa.array(cols[n + 1], pa.int64()), pa.array(cols[n + 2], pa.bool_())]
    return pa.Table.from_arrays(arrays, names=[*key, _AT, _SEQ, _CLOSES])


def apply_history(dt: DeltaTable, key: tuple[str, ...], keys: pa.Table, versions: pa.Table,
                  props: CommitProperties, uri: str, storage_options: dict[str, str] | None = None) -> RowsApplied:
    """One commit closing the current versions that ``keys`` (:func:`key_table`, one row per key
    the batch touches) end, and adding ``versions`` (in the Delta table's schema); see the
    module invariants. Files that may hold a version of one of ``keys`` are read (their key
    statistics rule the others out): a key's latest time there is the floor of its new ones."""
    hooks = post_commit_hooks(dt)
    if not keys.num_rows:
        write_deltalake(dt, versions, mode="append", writer_properties=writer_properties(versions.schema),
                        commit_properties=props, post_commithook_properties=hooks)
        return RowsApplied(inserted=versions.num_rows)
    schema = versions.schema
    touched = keys.select(list(key)).append_column(_KEY, pa.array(np.arange(keys.num_rows)))
    closes = keys.column(_CLOSES).to_numpy(zero_copy_only=False)
    hit_file = np.full(keys.num_rows, -1)  # the file holding each key's current version, if the batch ends it
    floor = np.full(keys.num_rows, _MIN)  # each key's latest time in Delta: its versions' end, or the current's start
    files: list[tuple[str, int, pa.Table, np.ndarray, np.ndarray]] = []
    for path, size, rows, hits in files_matching(dt, schema, key, touched):
        at, which = hits.column(FILE_ROW).to_numpy(), hits.column(_KEY).to_numpy()
        ends = pc.coalesce(rows.column(VALID_TO), rows.column(VALID_FROM)).cast(pa.int64()).to_numpy()
        np.maximum.at(floor, which, ends[at])
        current = pc.fill_null(rows.column(IS_CURRENT), False).to_numpy(zero_copy_only=False)[at] & closes[which]
        if current.any():
            hit_file[which[current]] = len(files)
            files.append((path, size, rows, at[current], which[current]))
    versions = _clamped(versions, key, touched, floor)
    placed = _placement(versions, key, touched, hit_file)
    actions: list[AddAction | RemoveAction] = []
    now = int(time.time() * 1000)
    first_at, first_seq = keys.column(_AT).to_numpy(), keys.column(_SEQ).to_numpy()
    for i, (path, size, rows, at, which) in enumerate(files):
        rows = _closed(rows, at, np.maximum(first_at[which], floor[which]), first_seq[which])
        mine = versions.filter(pa.array(placed == i))
        actions.append(RemoveAction(path, True, now, size, {}))
        actions.append(write_parquet(uri, pa.concat_tables([rows, mine]), storage_options, kind="stream").add_action())
    rest = versions.filter(pa.array(placed < 0))
    if rest.num_rows:
        actions.append(write_parquet(uri, rest, storage_options, kind="stream").add_action())
    dt.create_write_transaction(actions, mode="append", schema=schema, commit_properties=props,
                                post_commithook_properties=hooks)
    dt.update_incremental()
    return RowsApplied(inserted=versions.num_rows, updated=int(np.count_nonzero(hit_file >= 0)))


def _version_key(versions: pa.Table, key: tuple[str, ...], touched: pa.Table) -> np.ndarray:
    """For each version, the index of its key in ``touched``, -1 for none."""
    ids = versions.select(list(key)).append_column(_VERSION, pa.array(np.arange(versions.num_rows)))
    joined = ids.join(touched, list(key), join_type="inner", use_threads=False)
    out = np.full(versions.num_rows, -1)
    out[joined.column(_VERSION).to_numpy()] = joined.column(_KEY).to_numpy()
    return out


def _clamped(versions: pa.Table, key: tuple[str, ...], touched: pa.Table, floors: np.ndarray) -> pa.Table:
    """``versions`` whose ``_valid_from``/``_valid_to`` are at least their key's latest time in
    Delta (see the module invariants)."""
    if not versions.num_rows:
        return versions
    which = _version_key(versions, key, touched)
    floor = np.where(which >= 0, floors[np.maximum(which, 0)], _MIN)
    for name in (VALID_FROM, VALID_TO):
        col = versions.column(name).cast(pa.int64())
        lifted = pc.max_element_wise(col, pa.array(floor))
        lifted = pc.if_else(col.is_null(), pa.nulls(versions.num_rows, pa.int64()), lifted)
        versions = versions.set_column(versions.schema.get_field_index(name), versions.schema.field(name),
                                       lifted.cast(UTC_MICROS))
    return versions


def _placement(versions: pa.Table, key: tuple[str, ...], touched: pa.Table, hit_file: np.ndarray) -> np.ndarray:
    """For each version, the rewritten file it goes into (its key's current version's), -1 for
    the new file."""
    which = _version_key(versions, key, touched)
    return np.where(which >= 0, hit_file[np.maximum(which, 0)], -1) if versions.num_rows else which


def _closed(rows: pa.Table, at: np.ndarray, valid_to: np.ndarray, seq: np.ndarray) -> pa.Table:
    """``rows`` with the versions at ``at`` closed at ``valid_to`` (µs) by change ``seq``."""
    n = rows.num_rows
    mask = np.zeros(n, dtype=bool)
    mask[at] = True
    to = np.zeros(n, dtype=np.int64)
    to[at] = valid_to
    by = np.zeros(n, dtype=np.int64)
    by[at] = seq
    m = pa.array(mask)
    for name, value in ((VALID_TO, pa.array(to).cast(UTC_MICROS)), (VALID_TO_SEQ, pa.array(by)),
                        (IS_CURRENT, pa.array(np.zeros(n, dtype=bool)))):
        i = rows.schema.get_field_index(name)
        rows = rows.set_column(i, rows.schema.field(name), pc.if_else(m, value, rows.column(name)))
    return rows


def end_all(dt: DeltaTable, columns: SinkColumns, props: CommitProperties, at_us: int, seq: int,
            position: str) -> None:
    """Every live row of a ``soft_delete`` table made a tombstone, every current version of a
    ``history`` table closed, at ``at_us`` by the statement at ``seq`` (``position``: its
    ``_cdc_position``), as a TRUNCATE or a table created again in MySQL does, in one commit
    carrying ``props``: the table's past stays."""
    at = f"arrow_cast({int(at_us)}, 'Timestamp(Microsecond, Some(\"UTC\"))')"
    if columns.history:
        predicate, updates = f"{IS_CURRENT} = true", {
            VALID_TO: f"CASE WHEN {VALID_FROM} > {at} THEN {VALID_FROM} ELSE {at} END",
            VALID_TO_SEQ: f"arrow_cast({int(seq)}, 'Int64')", IS_CURRENT: "false"}
    else:
        predicate, updates = f"{CDC_DELETED} = false", {CDC_DELETED: "true", CDC_OP: "'d'",
                                                         CDC_SEQ: f"arrow_cast({int(seq)}, 'Int64')"}
        if columns.ts:
            updates[CDC_TS] = at
        if columns.position:
            updates[CDC_POSITION] = "'" + position.replace("'", "''") + "'"
    dt.update(updates=updates, predicate=predicate, commit_properties=props,
              post_commithook_properties=post_commit_hooks(dt))


def kept_rows(dt: DeltaTable, key: tuple[str, ...], keys: pa.Table, columns: SinkColumns) -> pa.Table:
    """Delta's rows of ``keys`` (a table of the ``key`` columns), in Delta's schema: every row of
    a ``soft_delete`` table (tombstones too), the current versions of a ``history`` table."""
    schema = delta_schema(dt)
    if not keys.num_rows:
        return schema.empty_table()
    cond = pc.field(key[0]).isin(pc.unique(keys.column(key[0])))
    if columns.history:
        cond = cond & pc.field(IS_CURRENT)  # (not ``== True``: see pipelines/lake/reads.py: live_filter)
    rows = dt.to_pyarrow_dataset().to_table(filter=cond).cast(schema)
    if len(key) > 1:
        rows = rows.join(keys.group_by(list(key)).aggregate([]), list(key), join_type="left semi")
    return rows


def tombstones(rows: pa.Table, schema: pa.Schema, high_watermark: BinlogPosition, read_at_us: int) -> pa.Table:
    """``rows`` (live rows of a ``soft_delete`` table, in ``schema``) as the tombstones a backfill
    writes for keys MySQL no longer holds: ``_cdc_op`` 'd', ``_cdc_deleted`` true, ``_cdc_seq`` the
    chunk's high watermark, ``_cdc_ts``/``_cdc_position`` the chunk's read time and high watermark."""
    n = rows.num_rows
    values = {CDC_OP: pa.array(["d"] * n, pa.string()), CDC_DELETED: pa.array([True] * n),
              CDC_SEQ: pa.array([high_watermark.seq()] * n, pa.int64()),
              CDC_TS: pa.array([read_at_us] * n, UTC_MICROS),
              CDC_POSITION: pa.array([str(high_watermark)] * n, pa.string())}
    for name, array in values.items():
        i = schema.get_field_index(name)
        if i >= 0:
            rows = rows.set_column(i, schema.field(name), array.cast(schema.field(name).type))
    return rows.select(schema.names)
