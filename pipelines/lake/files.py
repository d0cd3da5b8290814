"""Parquet files of the lake and the snapshot's commits of them: a file written into a
table's folder (by a Spark task, a snapshot thread or the stream's copy-on-write) is
invisible until a commit adds it; the snapshot's driver commits a group's files together
with the group's chunk records (commit metadata), and reads snapshot progress back from
those commits.

Invariants:
- A chunk record is committed in the same commit as the chunk's rows, so a chunk with a
  record has its rows in Delta, and files of a group never committed are never read
  (tests/test_snapshot_resume.py). The first commit to a table not created yet creates it
  with its files (tests/test_lake_requests.py). A commit is made once: after a fault its token is looked
  for before it is made again; delta-rs, retrying the put of a log entry whose answer was
  lost, may commit it again at the next version, which adds the same files (a Delta table
  holds a file once) and records the same chunks (tests/test_lake_faults.py).
- :func:`snapshot_commits` returns what a fresh read of the table's whole log would: the
  commits this process made through the same handle are taken from memory, any other
  commit is read from the log (tests/test_lake_requests.py).
- A data file is written in one request where the store allows
  (pipelines/lake/storage.py: ``write_file``; tests/test_lake_requests.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
import uuid
from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    PostCommitHookProperties,
    Schema,
    WriterProperties,
)
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, create_table_with_add_actions

from cdc_core.chunks.record import ChunkRecord
from cdc_core.retry import RetryPolicy, retrying
from cdc_core.schema.modes import CDC_POSITION
from cdc_core.schema.output import CDC_OP
from pipelines.lake.storage import write_file
from pipelines.lake.tables import (
    commit_with_token,
    metadata_properties,
    open_table,
    own_commits,
    post_commit_hooks,
    record_own_commit,
    refresh,
    require_table,
)

SNAPSHOT_CHUNKS_KEY = "binlake.snapshot.chunks"
# A snapshot commit that removed a source table's rows to read it again (a DDL ran during its
# snapshot): chunk records of that table in earlier versions no longer count.
SNAPSHOT_RESET_KEY = "binlake.snapshot.reset"
# No DDL changed these source tables between their baseline and their last chunk (their
# snapshot is consistent), checked once: a commit without files after the last chunk, or the
# commit of a table's chunks when their read windows held no binlog event
# (pipelines/snapshot/driver.py).
SNAPSHOT_VERIFIED_KEY = "binlake.snapshot.verified"
# Every snapshot commit's own token: a commit whose answer was lost is found again by it.
COMMIT_KEY = "binlake.commit"


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file written into a table's folder, not yet committed."""

    path: str  # relative to the table root
    size: int
    num_rows: int
    stats: str
    partition_values: dict[str, str | None] = field(default_factory=dict)  # of a partitioned table's file

    def add_action(self) -> AddAction:
        return AddAction(self.path, self.size, self.partition_values, int(time.time() * 1000), True, self.stats)


def write_parquet(uri: str, table: pa.Table, storage_options: dict[str, str] | None = None,
                  kind: str = "snapshot", folder: str = "") -> WrittenFile:
    """Write ``table`` as one Parquet file into the table folder ``uri`` (a local folder or an
    object-store URI reached with ``storage_options``), in its sub-folder ``folder`` if given
    (the returned path is then relative to that sub-folder); the file is not committed.
    ``kind`` names the writer in the file name (snapshot, stream, compact)."""
    name = f"part-{kind}-{uuid.uuid4().hex}.parquet"
    dictionary = dictionary_columns(table.schema)
    root = f"{uri.rstrip('/')}/{folder}" if folder else uri
    size = write_file(root, name, storage_options, lambda out: pq.write_table(
        table, out, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL, write_statistics=True,
        use_dictionary=dictionary, column_encoding=delta_encoded(table.schema, dictionary) or None))
    return WrittenFile(name, size, table.num_rows, file_stats(table))


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` written dictionary-encoded: only the op column (and the position,
    one value per transaction: cdc_core/schema/modes.py); on high-cardinality columns a dictionary
    costs about twice the write time for larger files (measured in bench/snapshot.py --profile)."""
    return [n for n in schema.names if n in (CDC_OP, CDC_POSITION)]


@functools.lru_cache(maxsize=256)
def writer_properties(schema: pa.Schema) -> WriterProperties:
    """delta-rs's Parquet settings for rows of ``schema`` (its appends, MERGEs and updates): the
    choices :func:`write_parquet` gives pyarrow. delta-rs's own defaults (snappy, a dictionary
    on every column) took 2.7x the CPU (100,000 rows of bench/stream.py's columns: 73 ms against
    27 ms) and made a 1M-insert catch-up's files 4x larger (70.0 MiB against 17.3 MiB)."""
    dictionary = dictionary_columns(schema)
    columns = {n: ColumnProperties(dictionary_enabled=False, encoding=e)  # type: ignore[arg-type]
               for n, e in delta_encoded(schema, dictionary).items()}
    columns.update({n: ColumnProperties(dictionary_enabled=True) for n in dictionary})
    return WriterProperties(compression=COMPRESSION.upper(), compression_level=COMPRESSION_LEVEL,  # type: ignore[arg-type]
                            default_column_properties=ColumnProperties(dictionary_enabled=False),
                            column_properties=columns)


# zstd level 1 with integer columns delta-encoded: a snapshot group of bench/snapshot.py's
# table is 65% smaller than with snappy and plain encoding (4.6 MB against 13.3 MB for 243,000
# rows), for the same write CPU (0.075 s against 0.078 s), and pyarrow and DuckDB read it no
# slower.
COMPRESSION, COMPRESSION_LEVEL = "zstd", 1


def delta_encoded(schema: pa.Schema, dictionary: list[str]) -> dict[str, str]:
    """``DELTA_BINARY_PACKED`` for the integer-backed columns (integers, dates, times,
    timestamps) not dictionary-encoded: keys, sequence numbers and times mostly grow, so their
    deltas pack into few bits."""
    def integral(t: pa.DataType) -> bool:
        return pa.types.is_integer(t) or pa.types.is_temporal(t) and not pa.types.is_interval(t)

    return {f.name: "DELTA_BINARY_PACKED" for f in schema if integral(f.type) and f.name not in dictionary}


def write_files(uri: str, table: pa.Table, storage_options: dict[str, str] | None = None, kind: str = "snapshot",
                partition_by: tuple[str, ...] = ()) -> tuple[WrittenFile, ...]:
    """Write ``table`` into the table folder ``uri``: one Parquet file (:func:`write_parquet`), or for
    a table partitioned by ``partition_by`` one file per partition value, in the folder
    ``col=value/…`` without the partition columns, its add action carrying their values."""
    if not partition_by:
        return (write_parquet(uri, table, storage_options, kind),)
    keys = table.select(list(partition_by)).to_pylist()
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(tuple(partition_value(k[c]) for c in partition_by), []).append(i)
    rest = table.drop_columns(list(partition_by))
    out = []
    for values, rows in groups.items():
        folder = "/".join(f"{c}={quote(HIVE_NULL if v is None else v, safe='')}" for c, v in zip(partition_by, values))
        f = write_parquet(uri, rest.take(pa.array(rows, pa.int64())), storage_options, kind, folder=unquote(folder))
        out.append(WrittenFile(f"{folder}/{f.path}", f.size, f.num_rows, f.stats, dict(zip(partition_by, values))))
    return tuple(out)


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the folder name of a NULL partition value


def partition_value(value: object) -> str | None:
    """A partition column's value as Delta's ``partitionValues`` write it (None for NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


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


@dataclass(frozen=True)
class NewTable:
    """A data table not created yet, as it is to be created: the first :func:`commit_files` to it
    creates it with its files, in one commit (not a creation, then an append)."""

    uri: str
    schema: pa.Schema
    configuration: dict[str, str] = field(default_factory=dict)  # its table properties
    partition_by: tuple[str, ...] = ()
    storage_options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Committed:
    """A commit made by :func:`commit_files`: its version, and the table's handle at it (for a
    table the commit created, a new handle)."""

    table: DeltaTable
    version: int


def commit_files(dt: DeltaTable | NewTable, files: list[WrittenFile], schema: pa.Schema, metadata: dict,
                 retry: RetryPolicy | None = None) -> Committed:
    """Append ``files`` to ``dt`` in one Delta commit carrying ``metadata``; for a :class:`NewTable`
    the commit creates it (version 0, with its schema, properties and partition columns; another
    writer's creation found first is appended to instead). A write transaction, unlike write and
    merge, does not move ``dt`` to the version it committed: the handle returned is moved there.
    A fault that passes is retried under ``retry``; a commit that landed although its call failed
    (its answer lost) is found by its token (``binlake.commit``) and not made again."""
    token = uuid.uuid4().hex
    custom = {**{k: json.dumps(v) for k, v in metadata.items()}, COMMIT_KEY: token}
    if isinstance(dt, NewTable):
        created = _create_with_files(dt, files, custom, token, retry or RetryPolicy())
        if created is not None:
            return Committed(created, 0)
        dt = require_table(dt.uri, dt.storage_options)  # created by another writer meanwhile
    before = dt.version()

    def attempt() -> int:
        dt.create_write_transaction(
            [f.add_action() for f in files], mode="append", schema=schema,
            partition_by=list(dt.metadata().partition_columns) or None, commit_properties=metadata_properties(custom),
            post_commithook_properties=post_commit_hooks(dt),
        )
        dt.update_incremental()
        return dt.version()

    def landed() -> int | None:
        refresh(dt)
        return commit_with_token(dt, COMMIT_KEY, token, before)

    version = retrying(f"committing {len(files)} files to {dt.table_uri}", attempt, retry or RetryPolicy(),
                       landed=landed)
    if version == before + 1:  # no other commit came between the handle's version and this one's: it is this one
        record_own_commit(dt, version, custom)
    return Committed(dt, version)


def _create_with_files(new: NewTable, files: list[WrittenFile], custom: dict[str, str], token: str,
                       retry: RetryPolicy) -> DeltaTable | None:
    """The table ``new`` created with ``files`` in one commit carrying ``custom`` (holding ``token``),
    opened; None when another writer created it first. A creation that landed although its call
    failed is found by its token."""
    def ours() -> DeltaTable | None:
        """The table, if its creation is the commit holding ``token``; else None."""
        dt = open_table(new.uri, new.storage_options)
        return dt if dt is not None and commit_with_token(dt, COMMIT_KEY, token, None) is not None else None

    def attempt() -> DeltaTable | bool:
        try:
            # No log cleanup: a new log has nothing to clean up, and listing it is a request more.
            create_table_with_add_actions(
                new.uri, Schema.from_arrow(new.schema), [f.add_action() for f in files], mode="error",
                partition_by=list(new.partition_by) or None, configuration=new.configuration or None,
                storage_options=new.storage_options or None, commit_properties=metadata_properties(custom),
                post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                    cleanup_expired_logs=False))
        except DeltaError:
            if open_table(new.uri, new.storage_options) is None:
                raise
            return ours() or False  # it exists: by this creation (an answer lost within delta-rs) or another's
        return require_table(new.uri, new.storage_options)

    found = retrying(f"creating {new.uri} with {len(files)} files", attempt, retry, landed=ours)
    if found is False:
        return None
    record_own_commit(found, 0, custom)  # snapshot_commits need not read it back
    return found


def snapshot_reset_properties(tables: list[str]) -> CommitProperties:
    """Properties of the commit that empties source ``tables`` to read them again: their chunk
    records in earlier versions no longer count (:data:`SNAPSHOT_RESET_KEY`)."""
    return metadata_properties({SNAPSHOT_RESET_KEY: json.dumps(tables)})


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
        """Whether ``table``'s snapshot was checked after its last chunk and reset: by a later
        commit, or by the commit of its last chunks itself (a table read in a window without
        binlog events: pipelines/snapshot/driver.py, ``_quiet_tables``)."""
        verified = self.verified.get(table)
        if verified is None:
            return False
        last_chunk = max((r.delta_version for r in self.records if r.table == table), default=-1)
        return verified > self.resets.get(table, -1) and verified >= last_chunk


def snapshot_commits(dt: DeltaTable, known: SnapshotCommits | None = None) -> SnapshotCommits:
    """Chunk records and resets carried by the table's commits (the durable source of
    snapshot progress). ``known``: what an earlier call returned for the same table; only the
    commits after its version are read (on an object store, one request per commit), and not
    even those when this process made them all through ``dt``
    (pipelines/lake/tables.py: ``ensure_table``, :func:`commit_files`)."""
    version = dt.version()
    if known is not None and known.version == version:
        return known
    read_all = known is None or known.version > version
    if read_all:
        known = SnapshotCommits([], {}, {})
    own = own_commits(dt)
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
