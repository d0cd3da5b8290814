"""Delta tables of the lake: where each lives (``<sink.path>/<db>/<table>``), opening and
creating them, their schema and its evolution (the schema applier's in-place additions
and atomic rewrites), what every commit to them runs afterwards, and emptying a table
(a reset, a truncate). Every table is opened with the sink's storage options
(pipelines/lake/storage.py). The handle types (``DeltaTable``, ``CommitProperties``) are
named here for the modules that hold them and pass them back to the lake's functions.

Invariants:
- Commits run the log cleanup (which lists the whole ``_delta_log``) only at the commits
  that write a checkpoint, every ``delta.checkpointInterval`` commits
  (:func:`post_commit_hooks`; tests/test_object_store.py).
- A reset empties a table in one commit: a routed source's rows only (its sink keeps the
  other sources' rows), else all of them, the table taking the schema given
  (:func:`reset`; tests/test_schema_at_position.py, tests/test_routes.py).
- Commit metadata of versions this process committed through a handle is kept with the
  handle (:func:`own_commits`), so readers of commit metadata (pipelines/lake/files.py:
  ``snapshot_commits``) need not read those commits back (tests/test_lake_requests.py).
- A commit without data, a column addition and a rewrite leave their handle at the version they
  committed; the handle does not read the log back (tests/test_lake_requests.py).
- A handle opened here is :func:`worn` once it is ``RENEW_VERSIONS`` versions past the version it
  was opened at; the holders of long-lived handles (the stream's sinks, the control store, the
  maintainer) then open it afresh, which reads the same rows (tests/test_maintenance.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Schema, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.schema import Field

from cdc_core.retry import RetryPolicy, retrying
from cdc_core.schema.output import CDC_SOURCE

DEFAULT_CHECKPOINT_INTERVAL = 100  # delta.checkpointInterval when the table does not set it (delta-rs's)
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
# Properties of every table binlake creates (data, control and change-feed tables): a checkpoint every
# 10 commits (pipelines/lake/maintenance/layout.py says why).
BINLAKE_TABLE_PROPERTIES = {CHECKPOINT_INTERVAL: "10"}
# The log cleanup lists the whole _delta_log: run at checkpoint commits, at most once per this many versions.
CLEANUP_VERSIONS = 100
# Commits looked at for a write's token when the version it was made on is unknown: the one
# writer of a pipeline commits one at a time, other writers (a backfill request) rarely.
TOKEN_WINDOW = 20
# Commit metadata of binlake's maintenance commits (a compaction, a vacuum): what it did (docs/contracts.md).
MAINTENANCE_KEY = "binlake.maintenance"


# A handle kept while its table is committed to is opened afresh once it is this many versions past
# the version it was opened at: delta-rs's incremental update adds each new commit's file actions to
# the handle's state and never folds them into a checkpoint, so a handle kept for a stream's life
# grows with every commit it has seen, and the stream's memory with it (bench/maintenance.py --only
# rss). A fresh open reads the latest checkpoint (written every ``delta.checkpointInterval``
# commits) and the commits after it.
RENEW_VERSIONS = 100


def table_uri(sink_path: str, qualified_name: str) -> str:
    """``<sink.path>/<db>/<table>`` (docs/contracts.md)."""
    db, table = qualified_name.split(".", 1)
    return f"{sink_path.rstrip('/')}/{db}/{table}"


def open_table(uri: str, storage_options: dict | None = None) -> DeltaTable | None:
    """The Delta table at ``uri``, or None when there is none yet."""
    try:
        return _opened_now(DeltaTable(uri, storage_options=storage_options or None))
    except TableNotFoundError:
        return None


def require_table(uri: str, storage_options: dict | None = None) -> DeltaTable:
    """The Delta table at ``uri``; raises delta-rs's TableNotFoundError when there is none."""
    return _opened_now(DeltaTable(uri, storage_options=storage_options or None))


# The version each handle opened here was opened at: {id(handle): version}, dropped with the handle.
_opened_at: dict[int, int] = {}


def _opened_now(dt: DeltaTable) -> DeltaTable:
    weakref.finalize(dt, _opened_at.pop, id(dt), None)
    _opened_at[id(dt)] = dt.version()
    return dt


def worn(dt: DeltaTable) -> bool:
    """Whether ``dt`` is ``RENEW_VERSIONS`` or more versions past the version it was opened at (see
    ``RENEW_VERSIONS``) and near a checkpoint: its holder should open the table afresh. False for a
    handle not opened here.

    A fresh open reads the latest checkpoint and every commit after it, as many at once: each read
    a thread of delta-rs's pool, which then stays while the stream keeps the pool busy (with
    its allocator's cache). So a worn handle waits for a checkpoint version, one more commit after
    it allowed per version it has waited: renewed within ``delta.checkpointInterval`` versions,
    replaying few commits."""
    opened = _opened_at.get(id(dt))
    if opened is None:
        return False
    waited = dt.version() - opened - RENEW_VERSIONS
    return waited >= 0 and (dt.version() + 1) % checkpoint_interval(dt) <= waited


def ensure_table(uri: str, schema: pa.Schema, storage_options: dict | None = None,
                 retry: RetryPolicy | None = None, *, configuration: dict[str, str] | None = None,
                 partition_by: tuple[str, ...] = ()) -> DeltaTable:
    """Open the table at ``uri``, creating it empty with ``schema`` if it does not exist (with the
    table properties ``configuration`` and the partition columns ``partition_by``:
    pipelines/lake/maintenance/layout.py); a fault that passes is retried under ``retry`` (a
    creation that landed although its call failed is found by opening the table)."""
    def attempt() -> DeltaTable:
        dt = open_table(uri, storage_options)
        if dt is not None:
            return dt
        try:
            dt = _opened_now(DeltaTable.create(uri, schema=schema, mode="error",
                                               storage_options=storage_options or None,
                                               configuration=configuration or None,
                                               partition_by=list(partition_by) or None))
        except DeltaError:
            dt = open_table(uri, storage_options)  # another writer created it meanwhile
            if dt is None:
                raise
            return dt
        record_own_commit(dt, 0, {})  # its creation: no commit metadata (snapshot_commits need not read it back)
        return dt

    return retrying(f"creating the Delta table {uri}", attempt, retry or RetryPolicy(),
                    landed=lambda: open_table(uri, storage_options))


def refresh(dt: DeltaTable) -> None:
    """Move ``dt`` to the table's latest version (after another process or handle committed)."""
    dt.update_incremental()


# Commit metadata of versions this process committed through a handle (ensure_table, and
# pipelines/lake/files.py: commit_files): {id(handle): {version: metadata}}, dropped with the
# handle. snapshot_commits takes them from here instead of reading those commits back (on an
# object store, a request per commit).
_own_commits: dict[int, dict[int, dict[str, str]]] = {}


def record_own_commit(dt: DeltaTable, version: int, metadata: dict[str, str]) -> None:
    """Note that this process committed ``version`` of ``dt`` through ``dt`` with ``metadata``."""
    if id(dt) not in _own_commits:
        weakref.finalize(dt, _own_commits.pop, id(dt), None)
    _own_commits.setdefault(id(dt), {})[version] = metadata


def own_commits(dt: DeltaTable) -> dict[int, dict[str, str]]:
    """Version -> commit metadata of the commits this process made through ``dt``."""
    return _own_commits.get(id(dt), {})


def commit_with_token(dt: DeltaTable | None, key: str, token: str, after: int | None) -> int | None:
    """The version of ``dt``'s commit after version ``after`` whose metadata holds ``token`` under
    ``key``, or None: a write that failed on a fault, found to have landed anyway. With
    ``after`` unknown, the newest ``TOKEN_WINDOW`` commits are looked at."""
    if dt is None:
        return None
    limit = TOKEN_WINDOW if after is None else dt.version() - after
    if limit <= 0:
        return None
    return next((c["version"] for c in dt.history(limit=limit) if c.get(key) == token), None)


def post_commit_hooks(dt: DeltaTable) -> PostCommitHookProperties:
    """Post-commit work of the next commit to ``dt``: a checkpoint every ``delta.checkpointInterval``
    commits, as delta-rs does, but expired log entries cleaned up only at those commits, and at
    most once per ``CLEANUP_VERSIONS`` versions (the first checkpoint at or after each multiple of
    it). The cleanup lists the whole ``_delta_log``; a table committed every micro-batch (or every
    chunk group) keeps days of commits there (the log retention), so listing it at every commit
    would cost one more request per 1,000 entries each time (bench/object_store.py)."""
    interval = checkpoint_interval(dt)
    checkpoint = dt.version() + 2  # the next commit's version + 1: a multiple of the interval writes one
    cleanup_every = interval * -(-CLEANUP_VERSIONS // interval)  # a multiple of the interval, >= CLEANUP_VERSIONS
    return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=checkpoint % cleanup_every == 0)


def checkpoint_interval(dt: DeltaTable) -> int:
    """``delta.checkpointInterval`` of ``dt``: delta-rs writes a checkpoint with each commit whose
    version + 1 is a multiple of it (versions 99, 199, ... by default)."""
    return int(dt.metadata().configuration.get(CHECKPOINT_INTERVAL, DEFAULT_CHECKPOINT_INTERVAL))


def metadata_properties(metadata: dict[str, str]) -> CommitProperties:
    """Properties of a commit carrying ``metadata`` (commit metadata, no transaction identifier)."""
    return CommitProperties(custom_metadata=metadata)


def commit_no_data(dt: DeltaTable, props: CommitProperties) -> None:
    """One commit of ``dt`` without files, carrying only ``props`` (an offset and its metadata).
    An append of no rows: delta-rs writes no file, and a write (unlike a write transaction) leaves
    ``dt`` at the version it committed, so the handle need not read that commit back (on an object
    store a LIST and two GETs, bench/object_store.py)."""
    write_deltalake(dt, delta_schema(dt).empty_table(), mode="append", commit_properties=props,
                    post_commithook_properties=post_commit_hooks(dt))


# --- schema ---------------------------------------------------------------------------------


def delta_schema(dt: DeltaTable) -> pa.Schema:
    """The Delta table's schema as a pyarrow schema."""
    return pa.schema(dt.schema().to_arrow())


@dataclass(frozen=True)
class DeltaColumn:
    """A column as Delta names its type."""

    name: str
    delta_type: str  # Delta's type name: integer, long, decimal(10,2), timestamp_ntz...
    nullable: bool


def delta_columns(schema: pa.Schema) -> list[DeltaColumn]:
    """The columns of ``schema`` with Delta's names of their types."""
    return [DeltaColumn(f.name, str(f.type.type) if hasattr(f.type, "type") else str(f.type), f.nullable)
            for f in Schema.from_arrow(schema).fields]


def add_columns(dt: DeltaTable, fields: list[pa.Field], props: CommitProperties | None) -> None:
    """Add ``fields`` (nullable) to ``dt`` in place, in one commit: existing rows hold NULL."""
    dt.alter.add_columns([Field.from_arrow(f) for f in fields], commit_properties=props)  # leaves dt at its commit


def rewrite(dt: DeltaTable, transform: Callable[[pa.Table], pa.Table], props: CommitProperties | None) -> None:
    """Replace every row and the schema of ``dt`` by ``transform`` of its rows, in one atomic
    overwrite commit (the schema changes delta-rs cannot make in place: drop, rename, retype)."""
    table = transform(dt.to_pyarrow_table())
    _overwrite(dt, table, props)  # a write leaves dt at the version it committed


def _overwrite(dt: DeltaTable, table: pa.Table, props: CommitProperties | None) -> None:
    write_deltalake(dt, table, mode="overwrite", schema_mode="overwrite", commit_properties=props,
                    partition_by=list(dt.metadata().partition_columns) or None)


# --- emptying a table ------------------------------------------------------------------------


def reset(dt: DeltaTable, props: CommitProperties, *, source: str | None = None,
          schema: pa.Schema | None = None) -> None:
    """Empty ``dt`` in one commit carrying ``props`` (TRUNCATE TABLE, a table created anew in
    MySQL, a snapshot that reads a table again): with ``source`` (a routed source table) only
    that source's rows, its sink keeping the other sources'; else every row, the table taking
    ``schema`` when given (the new table's columns), else keeping its own."""
    if source is None and schema is not None:
        _overwrite(dt, schema.empty_table(), props)
        return
    predicate = None if source is None else f"{sql_ident(CDC_SOURCE)} = '{source.replace(chr(39), chr(39) * 2)}'"
    # delete leaves dt at the version it committed
    dt.delete(predicate, commit_properties=props, post_commithook_properties=post_commit_hooks(dt))


def sql_ident(name: str) -> str:
    """``name`` quoted as a SQL identifier (delta-rs's predicates and MERGE expressions)."""
    return '"' + name.replace('"', '""') + '"'
