"""Table layout a user chooses (``sink.table_properties``, ``sink.layout``): the Delta
properties of every data table, the columns compaction sorts a table's rows by, and the
partition columns of tables created from now on.

- Properties: ``sink.table_properties`` as given, plus binlake's own defaults where the user
  sets none: ``delta.deletedFileRetentionDuration`` equal to ``sink.maintenance.retention_hours``
  (a checkpoint keeps a removed file's record that long, so a vacuum never takes a file a
  version within the retention needs for one never committed: vacuum.py) and
  ``delta.logRetentionDuration`` of the same length, but at least Delta's 7 days (log entries
  older than the retention describe versions whose files are gone; a shorter log keeps
  ``_delta_log`` and every listing of it small), and ``delta.checkpointInterval`` 10, Delta's own
  default (delta-rs's is 100): a table committed every batch is opened, and its commits made,
  from a checkpoint at most 10 commits old. delta-rs reads the commits after the checkpoint at
  once, a thread each, and a commit replays them: at 100, a one-row commit cost 11.6 ms of CPU on
  average against 6.2 ms at 10, and an open or a checkpoint of a table 60 commits past its last
  checkpoint took 50-60 threads into delta-rs's pool, where a stream's steady use keeps them
  (bench/commit_growth.py, bench/maintenance.py --only rss). Set when binlake creates a table
  (:func:`new_table`), and on an existing table the first time maintenance sees it, where
  delta-rs allows (:func:`apply_properties`: one commit without data; a property it refuses
  is logged and left).
- Sort columns (:func:`sort_columns`): a table's ``cluster_by`` columns, then its row key with
  the column copy-on-write prunes on first (pipelines/lake/apply.py: ``pruning_column``).
  Clustering lets readers skip files on those columns; the stream's batches then find their
  keys in more files.
- Partition columns (``partition_by``, new tables only): a partitioned table's updates and
  deletes are one MERGE on the row key per batch (delta-rs prunes partitions and files on the
  batch's values), not copy-on-write; compaction works partition by partition.

Invariants (tests/test_maintenance.py): a table binlake creates has the configured and
default properties; an existing table gains them at its first maintenance.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from cdc_core.config import DEFAULT_RETENTION_HOURS, ConfigError, SinkConfig
from cdc_core.retry import RetryPolicy
from cdc_core.schema.output import delta_name
from pipelines.lake.apply import pruning_column
from pipelines.lake.files import NewTable
from pipelines.lake.tables import BINLAKE_TABLE_PROPERTIES, DeltaTable, ensure_table

log = logging.getLogger(__name__)

DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"


def table_properties(sink: SinkConfig) -> dict[str, str]:
    """The properties every data table of the lake has (see the module)."""
    hours = sink.maintenance.retention_hours
    defaults = {DELETED_FILE_RETENTION: f"interval {hours} hours",
                LOG_RETENTION: f"interval {max(hours, DEFAULT_RETENTION_HOURS)} hours", **BINLAKE_TABLE_PROPERTIES}
    given = {k.lower() for k in sink.table_properties}
    return {**{k: v for k, v in defaults.items() if k.lower() not in given}, **sink.table_properties}


def new_table(sink: SinkConfig, uri: str, name: str, schema: pa.Schema) -> NewTable:
    """The data table ``name`` (``db.table``) at ``uri`` as binlake creates it with ``schema``: its
    properties and partition columns (a partition column it lacks is an error naming it). Created
    by its first commit of files (pipelines/lake/files.py) or empty (:func:`create_empty`)."""
    partition_by = tuple(sink.layout_of(name).partition_by)
    missing = [c for c in partition_by if c not in schema.names]
    if missing:
        raise ConfigError(f"sink.layout: {name} has no column {', '.join(missing)} to partition by")
    return NewTable(uri, schema, table_properties(sink), partition_by, sink.storage_options)


def create_empty(new: NewTable, retry: RetryPolicy | None = None) -> DeltaTable:
    """The table ``new``, created empty if it does not exist yet (a fault that passes retried under
    ``retry``)."""
    return ensure_table(new.uri, new.schema, new.storage_options, retry, configuration=new.configuration,
                        partition_by=new.partition_by)


def create_table(sink: SinkConfig, uri: str, name: str, schema: pa.Schema,
                 retry: RetryPolicy | None = None) -> DeltaTable:
    """The data table ``name`` at ``uri``, created empty with ``schema``, its properties and partition
    columns (:func:`new_table`) if it does not exist yet (a fault that passes retried under ``retry``)."""
    return create_empty(new_table(sink, uri, name, schema), retry)


def apply_properties(dt: DeltaTable, wanted: dict[str, str], name: str) -> dict[str, str]:
    """Set on the existing table ``dt`` those of ``wanted`` it lacks or holds otherwise, in one
    commit without data where delta-rs allows; the ones set. A property delta-rs refuses (one
    needing a table feature it cannot add, say) is logged and left."""
    current = dt.metadata().configuration
    differ = {k: v for k, v in wanted.items() if current.get(k) != v}
    if not differ:
        return {}
    try:
        dt.alter.set_table_properties(differ, raise_if_not_exists=False)
    except Exception as e:  # noqa: BLE001 - delta-rs's refusal of one property: try them one by one
        done = {}
        for k, v in differ.items():
            try:
                dt.alter.set_table_properties({k: v}, raise_if_not_exists=False)
                done[k] = v
            except Exception as one:  # noqa: BLE001 - named in the log, the table left as it is
                log.warning("%s: table property %s=%s not set: %s", name, k, v, one)
        if not done:
            log.debug("%s: no table property set (%s)", name, e)
        return done
    return differ


def sort_columns(sink: SinkConfig, name: str, schema: pa.Schema, key: tuple[str, ...] | None) -> tuple[str, ...]:
    """The columns compaction sorts ``name``'s rows by: its ``cluster_by`` columns, then its row key
    ``key`` (None: unknown) with copy-on-write's pruning column first (see the module)."""
    cluster = tuple(sink.layout_of(name).cluster_by)
    if not key:
        return cluster
    key = tuple(delta_name(schema.names, k) or k for k in key)  # MySQL's names match Delta's case-insensitively
    first = pruning_column(schema, key)
    return tuple(dict.fromkeys((*cluster, first, *key)))
