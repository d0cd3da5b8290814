"""Delta tables of the lake: locations, creation, and committing Parquet files that
Spark tasks wrote (add actions) atomically with their chunk records. Every table is
opened with the sink's storage options (pipelines/lake/storage.py)."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
import weakref
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, QueryBuilder, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from cdc_core.batch.table_commit import RowsApplied
from cdc_core.chunks.reader import CDC_OP, CDC_SEQ
from cdc_core.chunks.record import ChunkRecord
from cdc_core.offset.stream_offset import OFFSET_KEY, StreamOffset, app_id, position_key_of_version
from cdc_core.routes import CDC_SOURCE
from pipelines.lake.storage import write_file
from pipelines.schema.applier import delta_schema

SNAPSHOT_CHUNKS_KEY = "binlake.snapshot.chunks"
# A snapshot commit that removed a source table's rows to read it again (a DDL ran during its
# snapshot): chunk records of that table in earlier versions no longer count.
SNAPSHOT_RESET_KEY = "binlake.snapshot.reset"
# A commit without files: no DDL changed these source tables between their baseline and their
# last chunk (their snapshot is consistent), checked once.
SNAPSHOT_VERIFIED_KEY = "binlake.snapshot.verified"
# A stream commit's binlog row changes per source table and op, {"db.t": {"c": n, "u": n, "d": n}}:
# those of its range that the batch folded in, applied or already in the snapshot (docs/contracts.md).
CHANGES_KEY = "binlake.stream.changes"
DEFAULT_CHECKPOINT_INTERVAL = 100  # delta.checkpointInterval when the table does not set it


def table_uri(sink_path: str, qualified_name: str) -> str:
    """``<sink.path>/<db>/<table>`` (docs/contracts.md)."""
    db, table = qualified_name.split(".", 1)
    return f"{sink_path.rstrip('/')}/{db}/{table}"


def open_table(uri: str, storage_options: dict | None = None) -> DeltaTable | None:
    """The Delta table at ``uri``, or None when there is none yet."""
    try:
        return DeltaTable(uri, storage_options=storage_options or None)
    except TableNotFoundError:
        return None


def ensure_table(uri: str, schema: pa.Schema, storage_options: dict | None = None) -> DeltaTable:
    """Open the table at ``uri``, creating it empty with ``schema`` if it does not exist."""
    dt = open_table(uri, storage_options)
    if dt is not None:
        return dt
    try:
        dt = DeltaTable.create(uri, schema=schema, mode="error", storage_options=storage_options or None)
    except DeltaError:
        dt = open_table(uri, storage_options)  # another writer created it meanwhile
        if dt is None:
            raise
        return dt
    _own_commit(dt, 0, {})  # its creation: no commit metadata (snapshot_commits need not read it back)
    return dt


# Commit metadata of versions this process committed through a handle (ensure_table, commit_files):
# {id(handle): {version: metadata}}, dropped with the handle. snapshot_commits takes them from here
# instead of reading those commits back (on an object store, a request per commit).
_own_commits: dict[int, dict[int, dict[str, str]]] = {}


def _own_commit(dt: DeltaTable, version: int, metadata: dict[str, str]) -> None:
    if id(dt) not in _own_commits:
        weakref.finalize(dt, _own_commits.pop, id(dt), None)
    _own_commits.setdefault(id(dt), {})[version] = metadata


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file written into a table's folder, not yet committed."""

    path: str  # relative to the table root
    size: int
    num_rows: int
    stats: str

    def add_action(self) -> AddAction:
        return AddAction(self.path, self.size, {}, int(time.time() * 1000), True, self.stats)


def write_parquet(uri: str, table: pa.Table, storage_options: dict[str, str] | None = None,
                  kind: str = "snapshot") -> WrittenFile:
    """Write ``table`` as one Parquet file into the table folder ``uri`` (a local folder or an
    object-store URI reached with ``storage_options``); the file is not committed. ``kind``
    names the writer in the file name (snapshot, stream)."""
    name = f"part-{kind}-{uuid.uuid4().hex}.parquet"
    # Dictionary encoding only for the op column: on high-cardinality columns it costs
    # about twice the write time for larger files (measured in bench/snapshot.py --profile).
    dictionary = [n for n in table.column_names if n == "_cdc_op"]
    size = write_file(uri, name, storage_options, lambda out: pq.write_table(
        table, out, compression="snappy", write_statistics=True, use_dictionary=dictionary))
    return WrittenFile(name, size, table.num_rows, file_stats(table))


def file_stats(table: pa.Table) -> str:
    """Delta add-action statistics: row count, null counts, min/max of integer columns."""
    stats: dict = {"numRecords": table.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_nested(col.type):
            continue  # a struct's statistics are per field (spatial columns): none rather than a wrong shape
        stats["nullCount"][name] = col.null_count
        if pa.types.is_integer(col.type) and table.num_rows > col.null_count:
            mm = pc.min_max(col)
            stats["minValues"][name] = mm["min"].as_py()
            stats["maxValues"][name] = mm["max"].as_py()
    return json.dumps(stats)


def commit_files(dt: DeltaTable, files: list[WrittenFile], schema: pa.Schema, metadata: dict) -> int:
    """Append ``files`` to ``dt`` in one Delta commit carrying ``metadata``; returns the new version
    (a write transaction, unlike write and merge, does not move ``dt`` to the version it committed)."""
    before = dt.version()
    custom = {k: json.dumps(v) for k, v in metadata.items()}
    dt.create_write_transaction(
        [f.add_action() for f in files], mode="append", schema=schema,
        commit_properties=CommitProperties(custom_metadata=custom), post_commithook_properties=post_commit_hooks(dt),
    )
    dt.update_incremental()
    version = dt.version()
    if version == before + 1:  # no other commit came between the handle's version and this one's: it is this one
        _own_commit(dt, version, custom)
    return version


@dataclass(frozen=True)
class SnapshotCommits:
    """What the table's commits through ``version`` say of snapshot progress: chunk records
    (each with the ``delta_version`` of the commit carrying it, newest first) and, per source
    table, the version of its last reset and of its last verification."""

    records: list[ChunkRecord]
    resets: dict[str, int]
    verified: dict[str, int]
    version: int = -1

    def is_verified(self, table: str) -> bool:
        """Whether ``table``'s snapshot was checked after its last chunk and reset."""
        last = max([self.resets.get(table, -1)] + [r.delta_version for r in self.records if r.table == table])
        return self.verified.get(table, -1) > last


def snapshot_commits(dt: DeltaTable, known: SnapshotCommits | None = None) -> SnapshotCommits:
    """Chunk records and resets carried by the table's commits (the durable source of
    snapshot progress). ``known``: what an earlier call returned for the same table; only the
    commits after its version are read (on an object store, one request per commit), and not
    even those when this process made them all through ``dt`` (:func:`ensure_table`,
    :func:`commit_files`)."""
    version = dt.version()
    if known is not None and known.version == version:
        return known
    read_all = known is None or known.version > version
    if read_all:
        known = SnapshotCommits([], {}, {})
    own = _own_commits.get(id(dt), {})
    if all(v in own for v in range(known.version + 1, version + 1)):  # each new commit is one this process made
        history = [{"version": v, **own[v]} for v in range(version, known.version, -1)]
    else:
        history = dt.history() if read_all else dt.history(limit=version - known.version)
    records, resets, verified = [], dict(known.resets), dict(known.verified)
    for commit in history:  # newest first, as the records already known
        raw = commit.get(SNAPSHOT_CHUNKS_KEY)
        if raw:
            for r in json.loads(raw) if isinstance(raw, str) else raw:
                records.append(replace(ChunkRecord.from_row(r), delta_version=commit["version"]))
        for key, latest in ((SNAPSHOT_RESET_KEY, resets), (SNAPSHOT_VERIFIED_KEY, verified)):
            raw = commit.get(key)
            for table in (json.loads(raw) if isinstance(raw, str) else raw) if raw else ():
                latest[table] = max(latest.get(table, -1), commit["version"])
    return SnapshotCommits(records + known.records, resets, verified, version)


def _sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def stream_commit_properties(pipeline: str, offset: StreamOffset, extra: dict[str, str] | None = None
                             ) -> CommitProperties:
    """A stream commit's offset, atomic with its data: a Delta transaction identifier
    (version = the applied position's seq) and the offset in the commit metadata (with
    ``extra`` metadata, e.g. the backfill chunk a merge carries)."""
    return CommitProperties(custom_metadata={OFFSET_KEY: offset.to_json(), **(extra or {})},
                            app_transactions=[Transaction(app_id(pipeline), offset.applied.seq())])


def post_commit_hooks(dt: DeltaTable) -> PostCommitHookProperties:
    """Post-commit work of the next commit to ``dt``: a checkpoint every ``delta.checkpointInterval``
    commits, as delta-rs does, but expired log entries cleaned up only at those commits. The
    cleanup lists the whole ``_delta_log``; a table committed every micro-batch (or every chunk
    group) keeps 30 days of commits there (the default log retention), so listing it at every
    commit would cost one more request per 1,000 entries each time (bench/object_store.py)."""
    interval = int(dt.metadata().configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
    return PostCommitHookProperties(create_checkpoint=True,
                                    cleanup_expired_logs=(dt.version() + 2) % interval == 0)


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
        write_deltalake(dt, append, mode="append", commit_properties=props, post_commithook_properties=hooks)
        return RowsApplied(inserted=append.num_rows)
    if _rewritable(dt) and all(_joinable(append.schema.field(k).type) for k in key):
        return _copy_on_write(dt, key, append, upsert, delete, props, hooks, uri or dt.table_uri, storage_options)
    source = pa.concat_tables([append, upsert, delete])
    on = " AND ".join(f"t.{_sql_ident(k)} = s.{_sql_ident(k)}" for k in key)
    # Every column named and quoted: delta-rs's update_all/insert_all do not quote column
    # names, so a name like "c`; x" or "a b" breaks them (tests/test_identifiers.py).
    columns = {_sql_ident(c): f"s.{_sql_ident(c)}" for c in source.schema.names}
    metrics = (dt.merge(source, on, source_alias="s", target_alias="t", commit_properties=props,
                        post_commithook_properties=hooks)
               .when_matched_delete("s._cdc_op = 'd'")
               .when_matched_update(columns, "s._cdc_op <> 'd'")
               .when_not_matched_insert(columns, "s._cdc_op <> 'd'")
               .execute())
    # No update_incremental(): write and merge leave ``dt`` at the version they committed (on an
    # object store that saves a LIST per commit, bench/object_store.py).
    return RowsApplied(metrics.get("num_target_rows_inserted", 0), metrics.get("num_target_rows_updated", 0),
                       metrics.get("num_target_rows_deleted", 0))


def _rewritable(dt: DeltaTable) -> bool:
    """Whether the table's data files hold its rows as they are, so that rewriting a file without
    some rows removes exactly those: no partition columns (their values are not in the files), no
    column mapping (physical names differ), no deletion vectors (a file is not all live rows).
    Tables binlake created have none of these; one another engine made may."""
    meta = dt.metadata()
    return (not meta.partition_columns
            and meta.configuration.get("delta.columnMapping.mode", "none") == "none"
            and "deletionVectors" not in (dt.protocol().reader_features or ()))


def _joinable(t: pa.DataType) -> bool:
    """Whether Arrow's hash join (the copy-on-write's key match) takes key columns of type ``t``:
    the types binlake gives keys, checked; any other key is left to a MERGE."""
    return any(f(t) for f in (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                              pa.types.is_large_binary, pa.types.is_fixed_size_binary, pa.types.is_decimal128,
                              pa.types.is_date, pa.types.is_timestamp, pa.types.is_time, pa.types.is_boolean))


_ROW, _CHANGE = "_binlake_row", "_binlake_change"  # positions carried through the key joins


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
    dataset = dt.to_pyarrow_dataset()
    # Files are pruned on one key column: an integer one if any (a route's key starts with the
    # source's name, which statistics cannot prune on), see _files_holding.
    prune = next((k for k in key if pa.types.is_integer(schema.field(k).type)), key[0])
    candidates = _files_holding(dt, prune, changes.column(prune))
    for fragment in dataset.get_fragments():
        size = candidates.get(fragment.path)
        if size is None:
            continue
        # The dataset's schema fills columns an older file lacks; the cast turns DataFusion's
        # string_view (files a MERGE wrote) back into the table's types.
        rows = fragment.to_table(schema=dataset.schema).cast(schema)
        ids = rows.select(list(key)).append_column(_ROW, pa.array(np.arange(rows.num_rows)))
        hits = ids.join(keys, list(key), join_type="inner", use_threads=False)
        if not hits.num_rows:
            continue
        gone = hits.column(_ROW).to_numpy()
        change = hits.column(_CHANGE).to_numpy()
        back = np.unique(change[(change < upsert.num_rows) & ~written[change]])
        updated += len(back)
        deleted += int(np.count_nonzero(change >= upsert.num_rows))
        written[back] = True
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[gone] = False
        rest = pa.concat_tables([rows.filter(pa.array(keep)), changes.take(pa.array(back, pa.int64()))])
        actions.append(RemoveAction(fragment.path, True, now, size, {}))
        if rest.num_rows:
            actions.append(write_parquet(uri, rest, storage_options, kind="stream").add_action())
    new = pa.concat_tables([append, upsert.filter(pa.array(~written[:upsert.num_rows]))])
    if new.num_rows:
        actions.append(write_parquet(uri, new, storage_options, kind="stream").add_action())
    dt.create_write_transaction(actions, mode="append", schema=schema, commit_properties=props,
                                post_commithook_properties=hooks)
    dt.update_incremental()  # a write transaction does not move ``dt`` to the version it committed
    return RowsApplied(new.num_rows, updated, deleted)


def _files_holding(dt: DeltaTable, column: str, values: pa.ChunkedArray) -> dict[str, int]:
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
    same = " AND ".join(f"t.{_sql_ident(c)} = s.{_sql_ident(c)}" for c in key)
    names = {_sql_ident(c): f"s.{_sql_ident(c)}" for c in target.names}
    metrics = (dt.merge(pa.concat_tables([removal, kept]), f"s.{CDC_OP} = 'd' AND {same}", source_alias="s",
                        target_alias="t", commit_properties=props, post_commithook_properties=post_commit_hooks(dt))
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
        write_deltalake(dt, append, mode="append", commit_properties=props, post_commithook_properties=hooks)
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
    same = " AND ".join(f"(t.{_sql_ident(c)} IS NOT DISTINCT FROM s.{_sql_ident(c)})" for c in columns)
    names = {_sql_ident(c): f"s.{_sql_ident(c)}" for c in target.names}
    metrics = (dt.merge(source, f"s.{CDC_OP} = 'd' AND {same}", source_alias="s", target_alias="t",
                        commit_properties=props, post_commithook_properties=hooks)
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
        same = " AND ".join(f"(t.{_sql_ident(c)} IS NOT DISTINCT FROM v.{_sql_ident(c)})"
                            for c in values.column_names[:-1])
        out = QueryBuilder().register("t", dt).register("v", DeltaTable(tmp)).execute(
            f"SELECT t.*, v.{_VALUE_INDEX} FROM t JOIN v ON {same} ORDER BY v.{_VALUE_INDEX}, t.{CDC_SEQ}").read_all()
    return pa.table(out)


def truncate(dt: DeltaTable, props: CommitProperties, predicate: str | None = None) -> None:
    """Remove every row (TRUNCATE TABLE), or only those matching ``predicate`` (a routed
    source's, :func:`source_predicate`), in one commit carrying the stream offset."""
    # delete leaves dt at the version it committed
    dt.delete(predicate, commit_properties=props, post_commithook_properties=post_commit_hooks(dt))


def source_predicate(source: str) -> str:
    """SQL predicate on the rows of routed source ``source`` ("db.table") in its sink table."""
    return f"{_sql_ident(CDC_SOURCE)} = '{source.replace(chr(39), chr(39) * 2)}'"


def source_filter(source: str) -> ds.Expression:
    """Dataset filter on the rows of routed source ``source`` in its sink table."""
    # Cast first: files written by delta-rs's MERGE store strings as string_view, and Arrow has
    # no equal kernel for (string, string_view), so a plain comparison fails on such files.
    return ds.field(CDC_SOURCE).cast(pa.string()) == source


def count_rows(dt: DeltaTable, source: str | None = None) -> int:
    """Rows of ``dt``; with ``source``, only that routed source's rows. A whole table's rows come
    from the log's per-file counts when every file has one: no data file is opened (on an object
    store, a request or more per file)."""
    if source is None and "deletionVectors" not in (dt.protocol().reader_features or ()):
        counts = pa.table(dt.get_add_actions(flatten=True)).column("num_records")
        if counts.null_count == 0:
            return pc.sum(counts).as_py() or 0
    return dt.to_pyarrow_dataset().count_rows(filter=None if source is None else source_filter(source))


def last_stream_offset(dt: DeltaTable, pipeline: str) -> StreamOffset | None:
    """The offset of the commit that set ``dt``'s stream transaction version (its own last
    applied position), or None if the stream never committed to it."""
    version = dt.transaction_version(app_id(pipeline))
    if version is None:
        return None
    for commit in dt.history():  # newest first
        text = commit.get(OFFSET_KEY)
        if text:
            offset = StreamOffset.from_json(text)
            if offset.applied.seq() == version:
                return offset
    return None


def commit_no_data(dt: DeltaTable, props: CommitProperties) -> None:
    """One commit of ``dt`` without files, carrying only ``props`` (an offset and its metadata)."""
    dt.create_write_transaction([], mode="append", schema=delta_schema(dt), commit_properties=props,
                                post_commithook_properties=post_commit_hooks(dt))
    dt.update_incremental()


def restamp(dt: DeltaTable, pipeline: str, offset: StreamOffset) -> None:
    """Commit no data, only ``offset`` as ``dt``'s own stream offset (a failover's translation)."""
    commit_no_data(dt, stream_commit_properties(pipeline, offset))


def applied_position_key(dt: DeltaTable, pipeline: str) -> tuple[int, int] | None:
    """(file number, offset) of the last binlog event the stream applied to ``dt``, or None."""
    version = dt.transaction_version(app_id(pipeline))
    return None if version is None else position_key_of_version(version)
