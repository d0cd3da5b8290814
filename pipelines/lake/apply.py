"""The stream's batches applied to Delta, one commit per table per batch carrying the
stream offset (pipelines/lake/offsets.py): rows new to a table appended; updates and
deletes by copy-on-write of only the files holding their keys, or one MERGE on the key
for a table whose files cannot be rewritten that way; a table without a row key by its
rows' values; duplicate keys (a hand-made copy) removed; an online backfill's merges.

Invariants:
- A batch applied to a table leaves it holding exactly the rows MySQL holds after the
  batch, in one commit with the batch's offset; the copy-on-write rewrites only the files
  holding the batch's keys (tests/test_delta_apply.py).
- A table without a row key loses exactly n of m equal rows when n are removed
  (:func:`apply_keyless`; tests/test_row_keys.py).
- Every column name is quoted in MERGE expressions, whatever it holds
  (tests/test_identifiers.py).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, QueryBuilder, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from cdc_core.batch.table_commit import RowsApplied
from cdc_core.schema.output import CDC_OP, CDC_SEQ
from pipelines.lake.files import write_parquet, writer_properties
from pipelines.lake.tables import delta_schema, post_commit_hooks, sql_ident


def apply_changes(dt: DeltaTable, key: tuple[str, ...], append: pa.Table, upsert: pa.Table, delete: pa.Table,
                  props: CommitProperties, uri: str | None = None,
                  storage_options: dict[str, str] | None = None) -> RowsApplied:
    """One Delta commit with a table's batch: rows new to the table are appended; when
    any row may already exist, only the files holding those keys are rewritten
    (:func:`_copy_on_write`), or on a table whose files cannot be rewritten that way
    (:func:`_rewritable`) one MERGE on the primary key deletes, updates and inserts.
    ``append``, ``upsert`` and ``delete`` share one schema, the Delta table's. ``uri`` and
    ``storage_options``: the table's location as the sink names it, where rewritten files go
    (default: the table's own URI, percent-encoded by delta-rs). Returns what the commit did."""
    hooks = post_commit_hooks(dt)
    if not upsert.num_rows and not delete.num_rows:
        write_deltalake(dt, append, mode="append", writer_properties=writer_properties(append.schema),
                        commit_properties=props, post_commithook_properties=hooks)
        return RowsApplied(inserted=append.num_rows)
    if _rewritable(dt) and all(_joinable(append.schema.field(k).type) for k in key):
        return _copy_on_write(dt, key, append, upsert, delete, props, hooks, uri or dt.table_uri, storage_options)
    source = pa.concat_tables([append, upsert, delete])
    on = " AND ".join(f"t.{sql_ident(k)} = s.{sql_ident(k)}" for k in key)
    # Every column named and quoted: delta-rs's update_all/insert_all do not quote column
    # names, so a name like "c`; x" or "a b" breaks them (tests/test_identifiers.py).
    columns = {sql_ident(c): f"s.{sql_ident(c)}" for c in source.schema.names}
    metrics = (dt.merge(source, on, source_alias="s", target_alias="t",
                        writer_properties=writer_properties(source.schema), commit_properties=props,
                        post_commithook_properties=hooks)
               .when_matched_delete("s._cdc_op = 'd'")
               .when_matched_update(columns, "s._cdc_op <> 'd'")
               .when_not_matched_insert(columns, "s._cdc_op <> 'd'")
               .execute())
    # No update_incremental(): write and merge leave ``dt`` at the version they committed (on an
    # object store that saves a LIST per commit, bench/object_store.py).
    return RowsApplied(metrics.get("num_target_rows_inserted", 0), metrics.get("num_target_rows_updated", 0),
                       metrics.get("num_target_rows_deleted", 0))


def rewritable_with(dt: DeltaTable, schema: pa.Schema, key: tuple[str, ...]) -> bool:
    """Whether batches of ``dt`` (of ``schema``, keyed by ``key``) are written by copy-on-write,
    never by a MERGE: what a table in a mode other than current needs (cdc_core/schema/modes.py)."""
    return _rewritable(dt) and all(_joinable(schema.field(k).type) for k in key)


def _rewritable(dt: DeltaTable) -> bool:
    """Whether the table's data files hold its rows as they are, so that rewriting a file without
    some rows removes exactly those: no partition columns (their values are not in the files), no
    column mapping (physical names differ), no deletion vectors (a file is not all live rows).
    Tables binlake created have none of these unless ``sink.layout`` partitions them; one another
    engine made may. A table whose change data feed is on gets MERGEs too: they write the change
    data its readers expect, which a copy-on-write commit has none of."""
    meta = dt.metadata()
    return (not meta.partition_columns
            and meta.configuration.get("delta.columnMapping.mode", "none") == "none"
            and meta.configuration.get("delta.enableChangeDataFeed", "false").lower() != "true"
            and "deletionVectors" not in (dt.protocol().reader_features or ()))


def _joinable(t: pa.DataType) -> bool:
    """Whether Arrow's hash join (the copy-on-write's key match) takes key columns of type ``t``:
    the types binlake gives keys, checked; any other key is left to a MERGE."""
    return any(f(t) for f in (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                              pa.types.is_large_binary, pa.types.is_fixed_size_binary, pa.types.is_decimal128,
                              pa.types.is_date, pa.types.is_timestamp, pa.types.is_time, pa.types.is_boolean))


FILE_ROW, _CHANGE = "_binlake_row", "_binlake_change"  # positions carried through the key joins


def _copy_on_write(dt: DeltaTable, key: tuple[str, ...], append: pa.Table, upsert: pa.Table, delete: pa.Table,
                   props: CommitProperties, hooks: PostCommitHookProperties, uri: str,
                   storage_options: dict[str, str] | None) -> RowsApplied:
    """The batch as one commit of file actions: each file holding a key of ``upsert`` or
    ``delete`` is replaced by a copy without those rows and with the upserted rows of its
    own keys (so a file keeps its key range and later batches still prune on it); the other
    files are not read again (those whose key statistics rule the keys out) or are read and
    left as they are. Upserts found in no file and ``append`` go into one new file.

    Why not a MERGE: delta-rs's MERGE on the key scans every file in the key range of the
    whole source and joins it in DataFusion; updates spread over a large table then read and
    rewrite most of it every batch (bench/stream.py --preload). A key Delta holds twice (a
    hand-made copy) loses both copies and is written once, where a MERGE updates both."""
    schema = append.schema
    changes = pa.concat_tables([upsert, delete])
    keys = changes.select(list(key)).append_column(_CHANGE, pa.array(np.arange(changes.num_rows)))
    written = np.zeros(changes.num_rows, dtype=bool)  # upserts already written back (each goes into one file)
    actions: list[AddAction | RemoveAction] = []
    now = int(time.time() * 1000)
    updated = deleted = 0
    for path, size, rows, hits in files_matching(dt, schema, key, keys):
        gone = hits.column(FILE_ROW).to_numpy()
        change = hits.column(_CHANGE).to_numpy()
        back = np.unique(change[(change < upsert.num_rows) & ~written[change]])
        updated += len(back)
        deleted += int(np.count_nonzero(change >= upsert.num_rows))
        written[back] = True
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[gone] = False
        rest = pa.concat_tables([rows.filter(pa.array(keep)), changes.take(pa.array(back, pa.int64()))])
        actions.append(RemoveAction(path, True, now, size, {}))
        if rest.num_rows:
            actions.append(write_parquet(uri, rest, storage_options, kind="stream").add_action())
    new = pa.concat_tables([append, upsert.filter(pa.array(~written[:upsert.num_rows]))])
    if new.num_rows:
        actions.append(write_parquet(uri, new, storage_options, kind="stream").add_action())
    dt.create_write_transaction(actions, mode="append", schema=schema, commit_properties=props,
                                post_commithook_properties=hooks)
    dt.update_incremental()  # a write transaction does not move ``dt`` to the version it committed
    return RowsApplied(new.num_rows, updated, deleted)


def files_matching(dt: DeltaTable, schema: pa.Schema, key: tuple[str, ...], keys: pa.Table
                   ) -> Iterator[tuple[str, int, pa.Table, pa.Table]]:
    """Each data file of ``dt`` holding a row whose ``key`` is in ``keys`` (the key columns and
    any others): its path, size, rows (in ``schema``) and ``keys``' rows joined to the file's rows
    they match (the file's row index in column ``FILE_ROW``). Only files the key's
    statistics may place them in are read (:func:`files_holding`)."""
    dataset = dt.to_pyarrow_dataset()
    prune = pruning_column(schema, key)
    candidates = files_holding(dt, prune, keys.column(prune))
    for fragment in dataset.get_fragments():
        size = candidates.get(fragment.path)
        if size is None:
            continue
        # The dataset's schema fills columns an older file lacks; the cast turns DataFusion's
        # string_view (files a MERGE wrote) back into the table's types.
        rows = fragment.to_table(schema=dataset.schema).cast(schema)
        ids = rows.select(list(key)).append_column(FILE_ROW, pa.array(np.arange(rows.num_rows)))
        hits = ids.join(keys, list(key), join_type="inner", use_threads=False)
        if hits.num_rows:
            yield fragment.path, size, rows, hits


def pruning_column(schema: pa.Schema, key: tuple[str, ...]) -> str:
    """The key column copy-on-write finds a batch's files by: an integer one if any (a route's key
    starts with the source's name, which statistics cannot prune on), see :func:`files_holding`.
    Compaction sorts by it first (pipelines/lake/maintenance/layout.py)."""
    return next((k for k in key if pa.types.is_integer(schema.field(k).type)), key[0])


def files_holding(dt: DeltaTable, column: str, values: pa.ChunkedArray) -> dict[str, int]:
    """Path -> size of each data file that may hold a row whose ``column`` is one of ``values``:
    those whose min/max statistics of an integer ``column`` bracket one of them, and every file
    without such statistics (or of a column of another type: its statistics may be truncated)."""
    files = pa.table(dt.get_add_actions(flatten=True))
    paths, sizes = files.column("path").to_pylist(), files.column("size_bytes").to_pylist()
    lo, hi = f"min.{column}", f"max.{column}"
    if not (pa.types.is_integer(values.type) and all(
            n in files.column_names and pa.types.is_integer(files.schema.field(n).type) for n in (lo, hi))):
        return dict(zip(paths, sizes))  # (a column no file has statistics of is of the null type)
    wanted = np.sort(values.to_numpy())
    known = pc.and_(files.column(lo).is_valid(), files.column(hi).is_valid()).to_numpy(zero_copy_only=False)
    mins = files.column(lo).fill_null(0).to_numpy().astype(wanted.dtype)
    maxs = files.column(hi).fill_null(0).to_numpy().astype(wanted.dtype)
    first = np.minimum(np.searchsorted(wanted, mins), len(wanted) - 1)  # the smallest value >= each min
    holds = ~known | ((wanted[first] >= mins) & (wanted[first] <= maxs))
    return {p: s for p, s, h in zip(paths, sizes, holds) if h}


def deletions(schema: pa.Schema, key: tuple[str, ...], keys: list[tuple]) -> pa.Table:
    """Rows in ``schema`` that delete ``keys`` in a MERGE on ``key``: the key columns set,
    ``_cdc_op`` 'd', every other column NULL."""
    return pa.Table.from_pylist([{**dict(zip(key, k)), CDC_OP: "d"} for k in keys], schema=schema)


def deduplicate(dt: DeltaTable, key: tuple[str, ...], keys: list[tuple], props: CommitProperties) -> int:
    """One commit leaving a single row (the latest ``_cdc_seq``) of each of ``keys``, which
    ``dt`` holds more than once (a hand-made copy): one MERGE deletes every copy and inserts
    the kept one (as :func:`apply_keyless` does). Returns the rows removed."""
    wanted = set(keys)
    table = dt.to_pyarrow_dataset().to_table(filter=pc.field(key[0]).isin([k[0] for k in wanted]))
    rows = table.to_pylist()
    best: dict[tuple, dict] = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        if k in wanted and (k not in best or r[CDC_SEQ] > best[k][CDC_SEQ]):
            best[k] = r
    target = table.schema
    removal = deletions(target, key, list(best))
    kept = pa.Table.from_pylist(list(best.values()), schema=target)
    same = " AND ".join(f"t.{sql_ident(c)} = s.{sql_ident(c)}" for c in key)
    names = {sql_ident(c): f"s.{sql_ident(c)}" for c in target.names}
    metrics = (dt.merge(pa.concat_tables([removal, kept]), f"s.{CDC_OP} = 'd' AND {same}", source_alias="s",
                        target_alias="t", writer_properties=writer_properties(target), commit_properties=props,
                        post_commithook_properties=post_commit_hooks(dt))
               .when_matched_delete()
               .when_not_matched_insert(names, f"s.{CDC_OP} <> 'd'")
               .execute())
    return metrics.get("num_target_rows_deleted", 0) - kept.num_rows


def apply_keyless(dt: DeltaTable, columns: tuple[str, ...], append: pa.Table, delete: pa.Table,
                  props: CommitProperties) -> RowsApplied:
    """One Delta commit with the batch of a table without a row key, whose rows are identified
    by their values in ``columns`` (cdc_core/batch/table_batch.py: KeylessBatch): ``append`` holds
    the copies to add, ``delete`` one row per copy to remove. Without removals it is an append.
    Otherwise the copies Delta holds of each value to remove are read (a join on every
    column, NULL equal to NULL), and one MERGE deletes every copy of those values and inserts
    the ones that stay, unchanged, with the appended rows: removing n of m equal rows needs m,
    which no MERGE condition can count. The cost: a scan of the table per batch with removals."""
    hooks = post_commit_hooks(dt)
    if not delete.num_rows:
        write_deltalake(dt, append, mode="append", writer_properties=writer_properties(append.schema),
                        commit_properties=props, post_commithook_properties=hooks)
        return RowsApplied(inserted=append.num_rows)
    target = delta_schema(dt)
    gone = delete.group_by(list(columns), use_threads=False).aggregate([([], "count_all"), (CDC_SEQ, "max")])
    remove = gone.column("count_all").to_pylist()
    matched = _copies(dt, gone.select(list(columns)))
    seen: dict[int, int] = {}
    stay = []
    for i, k in enumerate(matched.column(_VALUE_INDEX).to_pylist()):
        seen[k] = seen.get(k, 0) + 1
        if seen[k] > remove[k]:  # the first copies (oldest _cdc_seq) are the ones removed
            stay.append(i)
    # (cast first: DataFusion returns strings as string_view, which has no take kernel)
    kept = matched.drop_columns([_VALUE_INDEX]).cast(target).take(pa.array(stay, pa.int64()))
    removal = pa.Table.from_arrays(
        [gone.column(f.name) if f.name in columns else gone.column(f"{CDC_SEQ}_max") if f.name == CDC_SEQ else
         pa.repeat(pa.scalar("d"), gone.num_rows) if f.name == CDC_OP else pa.nulls(gone.num_rows, f.type)
         for f in target], schema=target)
    source = pa.concat_tables([removal, kept, append.cast(target)])
    same = " AND ".join(f"(t.{sql_ident(c)} IS NOT DISTINCT FROM s.{sql_ident(c)})" for c in columns)
    names = {sql_ident(c): f"s.{sql_ident(c)}" for c in target.names}
    metrics = (dt.merge(source, f"s.{CDC_OP} = 'd' AND {same}", source_alias="s", target_alias="t",
                        writer_properties=writer_properties(source.schema), commit_properties=props,
                        post_commithook_properties=hooks)
               .when_matched_delete()
               .when_not_matched_insert(names, f"s.{CDC_OP} <> 'd'")
               .execute())
    return RowsApplied(inserted=append.num_rows, deleted=metrics.get("num_target_rows_deleted", 0) - kept.num_rows)


_VALUE_INDEX = "_binlake_value"


def _copies(dt: DeltaTable, values: pa.Table) -> pa.Table:
    """Rows of ``dt`` equal (NULL equal to NULL) to a row of ``values`` on its columns, with
    ``_binlake_value``: that row's index; ordered by it, then by ``_cdc_seq``."""
    values = values.append_column(_VALUE_INDEX, pa.array(range(values.num_rows), pa.int64()))
    with tempfile.TemporaryDirectory(prefix="binlake-keyless-") as tmp:  # the join's other side, local and small
        write_deltalake(tmp, values)
        same = " AND ".join(f"(t.{sql_ident(c)} IS NOT DISTINCT FROM v.{sql_ident(c)})"
                            for c in values.column_names[:-1])
        out = QueryBuilder().register("t", dt).register("v", DeltaTable(tmp)).execute(
            f"SELECT t.*, v.{_VALUE_INDEX} FROM t JOIN v ON {same} ORDER BY v.{_VALUE_INDEX}, t.{CDC_SEQ}").read_all()
    return pa.table(out)
