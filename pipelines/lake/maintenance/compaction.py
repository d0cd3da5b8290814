"""Compaction: a table's small (and oversized) files rewritten into files of about the
effective target size (policy.py), rows sorted by the table's sort columns (its
``cluster_by`` columns, then its row key with copy-on-write's pruning column first) and
cut in that order, so each new file holds one key range and a later batch reads and
rewrites only the files of its keys (pipelines/lake/apply.py). In three steps, so that the
expensive one runs off the writer's thread:

1. :func:`plan` (the writer's thread, from the open handle's log, no I/O): which files, how
   to sort, where to write; the files' dataset fragments are taken at that version;
2. :func:`rewrite` (any thread): read those files, sort, write the new files, uncommitted;
3. :func:`commit` (the writer's thread, between batches): one commit removing the inputs and
   adding the new files, every action with ``dataChange=false`` (readers of changes skip it)
   and no stream offset (the table's transaction identifier and offsets stay what they were:
   pipelines/lake/offsets.py reads them from the stream's own commits) — only if every input
   is still live; otherwise nothing is committed, the new files are deleted and the table is
   compacted again later (:func:`discard`).

Partitioned tables are compacted partition by partition, the new files written into their
inputs' folder with their partition values.

Invariants (tests/test_maintenance.py, tests/test_maintenance_stream.py):
- A compaction changes no row: the table reads the same before and after, at every key.
- A compaction commit carries no stream transaction and no ``binlake.stream.offset``; the
  table's stream offset and transaction version are those before it.
- The files one compaction writes hold disjoint, ordered ranges of the sort columns; a
  one-key batch after it rewrites one of them at most.
- A compaction whose inputs a commit removed meanwhile commits nothing.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake.transaction import AddAction, RemoveAction

from pipelines.lake.files import WrittenFile, partition_value, write_parquet
from pipelines.lake.maintenance.policy import DataFile, TableFiles, Trigger
from pipelines.lake.storage import delete_files
from pipelines.lake.tables import MAINTENANCE_KEY, DeltaTable, delta_schema, metadata_properties, post_commit_hooks

log = logging.getLogger(__name__)

# The most bytes of input files one compaction rewrites (when the target is smaller): it holds
# their rows in memory, a few times their Parquet size.
JOB_BYTES = 128 << 20


def table_files(dt: DeltaTable) -> TableFiles:
    """The live files of ``dt`` at its version, from its log (no data file is read)."""
    actions = pa.table(dt.get_add_actions(flatten=False))
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else [None] * len(paths)
    if "partition" in actions.column_names and dt.metadata().partition_columns:
        # (typed values here; the log and new add actions spell them as strings)
        parts = [tuple(sorted((k, partition_value(x)) for k, x in (v or {}).items()))
                 for v in actions.column("partition").to_pylist()]
    else:
        parts = [()] * len(paths)
    return TableFiles(dt.version(), tuple(DataFile(p, s, r, part) for p, s, r, part in zip(paths, sizes, rows, parts)))


@dataclass(frozen=True)
class CompactionJob:
    """A compaction planned at ``version`` of the table at ``uri``."""

    sink: str
    uri: str
    storage_options: dict[str, str]
    version: int
    reason: str
    target: int  # bytes per new file
    sort_by: tuple[str, ...]
    schema: pa.Schema  # the table's, without its partition columns (what a file holds)
    groups: tuple[tuple[DataFile, ...], ...]  # inputs, one group per partition
    fragments: dict[str, ds.Fragment] = field(repr=False, compare=False, default_factory=dict)

    @property
    def inputs(self) -> tuple[DataFile, ...]:
        return tuple(f for g in self.groups for f in g)


@dataclass(frozen=True)
class Rewritten:
    """A job's new files, written and not committed."""

    job: CompactionJob
    written: tuple[WrittenFile, ...]
    seconds: float


@dataclass(frozen=True)
class CompactionResult:
    """What one committed compaction did (recorded in its commit and in ``_binlake/maintenance_runs``)."""

    sink: str
    version: int  # the commit's
    reason: str
    files_before: int
    files_after: int
    files_removed: int
    files_added: int
    bytes_removed: int
    bytes_added: int
    seconds: float

    def describe(self) -> str:
        return (f"{self.sink}: {self.files_removed} files ({self.bytes_removed:,} bytes) compacted into "
                f"{self.files_added} ({self.bytes_added:,} bytes), {self.files_before} → {self.files_after} live files "
                f"({self.reason})")


def plan(dt: DeltaTable, sink: str, uri: str, storage_options: dict[str, str] | None, trigger: Trigger,
         target: int, sort_by: tuple[str, ...]) -> CompactionJob | None:
    """The compaction of ``trigger``'s files of ``dt`` at its version (see the module), or None when
    no partition has two files to merge or one to split. ``sort_by``: the columns rows are
    sorted by (those the table has)."""
    partition_columns = list(dt.metadata().partition_columns)
    full = delta_schema(dt)
    schema = pa.schema([f for f in full if f.name not in partition_columns])
    sort_by = tuple(c for c in sort_by if c in schema.names)
    by_partition: dict[tuple, list[DataFile]] = {}
    for f in _within_budget(dt, trigger.inputs, sort_by[0] if sort_by else None, max(target, JOB_BYTES)):
        by_partition.setdefault(f.partition, []).append(f)
    groups = tuple(tuple(g) for g in by_partition.values()
                   if len(g) >= 2 or any(f.size > target for f in g))
    if not groups:
        return None
    wanted = {f.path for g in groups for f in g}
    # A fragment's path is its add action's (percent-decoded where a partition value needed encoding).
    decoded = {unquote(p): p for p in wanted}
    fragments = {decoded[f.path]: f for f in dt.to_pyarrow_dataset().get_fragments() if f.path in decoded}
    if len(fragments) != len(wanted):  # a path spelled otherwise than the log's: leave the table as it is
        log.warning("%s: %d of %d files to compact not found in its dataset; not compacted", sink,
                    len(wanted) - len(fragments), len(wanted))
        return None
    return CompactionJob(sink, uri, dict(storage_options or {}), dt.version(), trigger.reason, target, sort_by, schema,
                         groups, fragments)


def _within_budget(dt: DeltaTable, inputs: tuple[DataFile, ...], first: str | None, budget: int) -> list[DataFile]:
    """Of ``inputs``, those one job rewrites: all of them if they hold at most ``budget`` bytes, else
    the first ones in the order of their smallest value of the sort column ``first`` (log order
    without statistics) up to the budget, at least two (the rest next time): a job holds its
    rows in memory, and files next to each other in key order make outputs of one key range."""
    if sum(f.size for f in inputs) <= budget:
        return list(inputs)
    order: dict[str, object] = {}
    if first is not None:
        stats = pa.table(dt.get_add_actions(flatten=True))
        if f"min.{first}" in stats.column_names:
            order = dict(zip(stats.column("path").to_pylist(), stats.column(f"min.{first}").to_pylist()))
    ranked = sorted(inputs, key=lambda f: (order.get(f.path) is None, order.get(f.path) or 0))
    taken, total = [], 0
    for f in ranked:
        if len(taken) >= 2 and total + f.size > budget:
            break
        taken.append(f)
        total += f.size
    return taken


def rewrite(job: CompactionJob) -> Rewritten:
    """Read the job's files, sort their rows and write them as new files of about ``job.target``
    bytes each (not committed). Runs in any thread: it touches no table handle."""
    started = time.monotonic()
    written: list[WrittenFile] = []
    try:
        for group in job.groups:
            # In this thread only (its priority is the caller's: maintainer.py lowers it), not Arrow's pool.
            rows = pa.concat_tables([job.fragments[f.path].to_table(schema=job.schema, use_threads=False)
                                     for f in group])
            if job.sort_by:
                rows = rows.sort_by([(c, "ascending") for c in job.sort_by])
            size = sum(f.size for f in group)
            pieces = max(1, size // job.target)  # each at most twice the target, none below it
            step = -(-rows.num_rows // pieces) if rows.num_rows else 0
            folder = posixpath.dirname(group[0].path)
            partition = dict(group[0].partition)
            for start in range(0, rows.num_rows, step or 1):
                f = write_parquet(job.uri, rows.slice(start, step), job.storage_options, kind="compact",
                                  folder=unquote(folder))
                written.append(WrittenFile(posixpath.join(folder, f.path) if folder else f.path, f.size, f.num_rows,
                                           f.stats, partition))
    except BaseException:
        discard(Rewritten(job, tuple(written), 0.0))
        raise
    return Rewritten(job, tuple(written), time.monotonic() - started)


def commit(dt: DeltaTable, done: Rewritten) -> CompactionResult | None:
    """Commit ``done`` to ``dt`` (the writer's handle, at its latest version) if every input is still
    live: one commit of remove and add actions, all ``dataChange=false``, carrying no stream offset.
    Otherwise nothing is committed and the new files are deleted; returns None then."""
    job = done.job
    before = table_files(dt)
    live = {f.path for f in before.files}
    if not all(f.path in live for f in job.inputs):
        log.info("%s: a commit replaced files of the compaction planned at version %d; compacted again later",
                 job.sink, job.version)
        discard(done)
        return None
    now = int(time.time() * 1000)  # the removal's time: vacuum keeps the files for the retention from here
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(f.path, False, now, f.size, dict(f.partition) or None) for f in job.inputs]
    actions += [AddAction(w.path, w.size, w.partition_values, now, False, w.stats) for w in done.written]
    removed, added = sum(f.size for f in job.inputs), sum(w.size for w in done.written)
    what = {"kind": "compaction", "reason": job.reason, "files_removed": len(job.inputs),
            "files_added": len(done.written), "bytes_removed": removed, "bytes_added": added,
            "planned_at_version": job.version, "seconds": round(done.seconds, 3)}
    dt.create_write_transaction(actions, mode="append", schema=delta_schema(dt),
                                partition_by=list(dt.metadata().partition_columns) or None,
                                commit_properties=metadata_properties({MAINTENANCE_KEY: json.dumps(what)}),
                                post_commithook_properties=post_commit_hooks(dt))
    dt.update_incremental()  # a write transaction does not move ``dt`` to the version it committed
    return CompactionResult(job.sink, dt.version(), job.reason, len(before.files),
                            len(before.files) - len(job.inputs) + len(done.written), len(job.inputs),
                            len(done.written), removed, added, done.seconds)


def discard(done: Rewritten) -> None:
    """Delete the new files of a compaction that is not committed (no commit references them)."""
    if done.written:
        delete_files(done.job.uri, [unquote(w.path) for w in done.written], done.job.storage_options)
