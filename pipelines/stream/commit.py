"""Table commits: a micro-batch applied to Delta, one commit per Delta table carrying the
stream offset, tables in parallel, retried while the fault passes.

Invariants (tests/test_stream_crash.py, tests/test_table_batch.py):
- Each Delta table gets at most one commit per batch (a route's sources together), and
  that commit carries the batch's offset atomically (a Delta transaction identifier
  whose version is the applied position's ``_cdc_seq``, plus the commit metadata).
- Every table the batch read a row change of is committed, also when its changes fold to
  nothing (an insert deleted again, every change already in the snapshot): a commit
  without files then. Each commit records the binlog row changes it covers per source
  table and op (``binlake.stream.changes``), so the sum over a table's commits equals the
  binlog's changes of the table from the stream's start: a batch applied twice adds
  them again, a lost one leaves them out (tests/change_count.py).
- A commit that failed on a fault that passes (the source's or the object store's,
  cdc_core/errors.py) is retried with backoff; before each retry the table's own offset is
  read again, and a commit that landed although its call failed is not repeated (a lost
  answer: delta-rs, retrying the put of the log entry, finds it taken by the very commit
  it makes, and the transaction identifier makes it refuse to commit the batch again at the
  next version; tests/test_lake_faults.py). A fault outlasting the retry budget, or any
  other error, stops the engine before the checkpoint moves past the batch.
- Values are conformed to the Delta table's current schema by column name
  (case-insensitively, as MySQL names columns); a value Delta's type cannot hold is
  NULL and logged, the rest of its column untouched.
- A table that is not in the default layout (cdc_core/schema/modes.py) is written by its
  mode: stamped rows and tombstones by the same copy-on-write, a history table's versions
  by pipelines/lake/versions.py; its changelog, if any, is appended first
  (pipelines/lake/feed.py). The default layout's path is the one above, unchanged.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from cdc_core.batch.micro_batch import MicroBatch
from cdc_core.batch.mode_batch import HistoryPlan, StampedBatch, Stamps, mode_arrow
from cdc_core.batch.table_batch import TablePlan, plan_arrow
from cdc_core.batch.table_commit import RowsApplied, TableCommit
from cdc_core.errors import TerminalError
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.retry import RetryPolicy, retrying
from cdc_core.routes import Router, sink_key
from cdc_core.schema.modes import FEED_COLUMNS, SinkColumns
from cdc_core.schema.output import delta_name, output_schema
from cdc_core.schema.table import TableSchema
from pipelines.lake.apply import apply_changes, apply_keyless, rewritable_with
from pipelines.lake.conform import conform, conform_routed
from pipelines.lake.feed import append_changes
from pipelines.lake.offsets import CHANGES_KEY, stream_commit_properties
from pipelines.lake.tables import commit_no_data, table_uri
from pipelines.lake.versions import apply_history, key_table
from pipelines.stream.sinks import Sinks

# Tables committed at once. delta-rs releases the GIL during a commit, which waits on the file
# system on a busy disk (20-80 ms of wall time for a one-row append) and is otherwise its own
# CPU (about 3 ms): 16 threads keep both cores busy and cost no more CPU per commit than 4; 2
# cost about 10% more (bench/table_commits.py --threads; bench/many_tables.py).
COMMIT_THREADS = 16


@dataclass(frozen=True)
class _Part:
    source: str
    schema: TableSchema
    plan: TablePlan | HistoryPlan
    changes: dict[str, int]  # binlog row changes by op (TableBatch.changes)
    log: list[tuple]  # every change, for a changelog (StampedBatch.log)
    stamps: Stamps  # each row event's time and position (StampedBatch.stamps; none in the default layout)


def _rows(part: _Part) -> RowsApplied:
    """What a part's plan writes, counted from the plan (when Delta's own metrics are lost)."""
    p, at = part.plan, len(part.schema.columns)
    if isinstance(p, HistoryPlan):
        return RowsApplied(inserted=len(p.versions), updated=sum(1 for k in p.keys if k[-1]))
    ops = Counter(r[at] for rows in (p.append, p.upsert, p.delete) for r in rows)
    for rows in p.arrow.values():
        ops.update(rows.column(at).to_pylist())
    return RowsApplied(ops["c"], ops["u"], ops["d"])


def _built_for(cache: dict, key: str, source, build):
    """``build(source)``, kept under ``key`` while ``source`` is the very object it was built from
    (a schema change makes new schema objects)."""
    cached = cache.get(key)
    if cached is None or cached[0] is not source:
        cached = cache[key] = (source, build(source))
    return cached[1]


class Committer:
    """Applies micro-batches to the Delta tables of ``sinks``."""

    def __init__(self, pipeline: str, router: Router, sinks: Sinks, retry: RetryPolicy | None = None):
        self.pipeline = pipeline
        self.router = router
        self.sinks = sinks
        self.retry = retry or RetryPolicy()
        self._pool = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="apply")
        self.retries = 0  # table commits retried after a fault that passes (the metrics' count)
        self._retries_lock = threading.Lock()  # tables commit in parallel threads
        # Built once per schema rather than per commit (a batch touching many tables pays them per
        # table, on the GIL: bench/many_tables.py); a schema change makes new schema objects, so
        # each entry is kept with the object it was built from and used only for that object.
        # Threads write distinct keys: a source and its sink are committed by one thread a batch.
        self._outputs: dict[str, tuple[TableSchema, pa.Schema]] = {}  # source -> its schema, its rows' Arrow schema
        self._empty: dict[str, tuple[pa.Schema, pa.Table]] = {}  # sink -> its Delta schema, an empty table of it

    def close(self) -> None:
        self._pool.shutdown()

    def apply(self, batch: MicroBatch, offset: StreamOffset) -> list[TableCommit]:
        """Commit every table of ``batch`` with ``offset`` (see the module invariants)."""
        work: dict[str, list[_Part]] = {}  # by Delta table: a route's sources go into one commit
        for name, tb in batch.tables.items():
            if tb.rows_in:  # committed even when its plan is empty: the commit records the changes it covers
                stamped = isinstance(tb, StampedBatch)
                work.setdefault(self.router.sink(name), []).append(
                    _Part(name, tb.schema, tb.plan(), tb.changes, tb.log if stamped else [],
                          tb.stamps if stamped else Stamps()))
        futures = [self._pool.submit(self._commit, sink, parts, offset) for sink, parts in work.items()]
        return [f.result() for f in futures]  # a failed table stops the engine before the checkpoint moves

    def _commit(self, sink: str, parts: list[_Part], offset: StreamOffset) -> TableCommit:
        def landed() -> RowsApplied | None:
            # The commit landed although its call failed (the store did it, its answer was lost; or
            # delta-rs, retrying it, found its own commit in the way): its metrics are lost, the changes are known.
            with self._retries_lock:
                self.retries += 1  # asked before each new attempt
            self.sinks.refresh(sink)
            done = self.sinks.applied_key(sink)
            if done is None or done < offset.applied.key:
                return None
            counts = [_rows(p) for p in parts]
            return RowsApplied(*(sum(getattr(c, f) for c in counts) for f in ("inserted", "updated", "deleted")))

        rows = retrying(f"writing {sink} to Delta", lambda: self._apply(sink, parts, offset), self.retry,
                        landed=landed)
        version = self.sinks.tables[sink].version()
        self.sinks.committed(sink)
        return TableCommit(sink, tuple(p.source for p in parts), offset, version, rows)

    def _apply(self, sink: str, parts: list[_Part], offset: StreamOffset) -> RowsApplied:
        target = self.sinks.schemas[sink]
        routed = self.router.routed(parts[0].source)
        # Each part's Arrow schema, and a kind no part has rows of as the empty table of the
        # target: most batches touching many tables only insert (bench/many_tables.py).
        outputs = [_built_for(self._outputs, p.source, p.schema, output_schema) for p in parts]

        def rows(kind: str) -> pa.Table:
            if not any(p.plan.has(kind) for p in parts):
                return _built_for(self._empty, sink, target, pa.Schema.empty_table)
            if not routed:
                p = parts[0]
                return conform(plan_arrow(p.schema, p.plan, kind, outputs[0]), target, p.source,
                               p.schema.row_key)
            return pa.concat_tables([conform_routed(plan_arrow(p.schema, p.plan, kind, out), p.source,
                                                    target) for p, out in zip(parts, outputs)])

        table = self.sinks.tables[sink]
        props = stream_commit_properties(self.pipeline, offset,
                                         {CHANGES_KEY: json.dumps({p.source: p.changes for p in parts})})
        columns = self.sinks.columns(sink)
        if not columns.plain:  # one part: a mode needs a table of its own (cdc_core/schema/modes.py: mode_problem)
            return self._apply_mode(sink, parts[0], offset, props, columns)
        if all(p.plan.empty for p in parts):
            commit_no_data(table, props)
            return RowsApplied()
        if not routed and not parts[0].schema.row_key:  # rows identified by all their values (routes need a key)
            # The source's columns that Delta holds (one a behaviour kept out of Delta cannot tell rows apart there).
            columns = tuple(n for n in (delta_name(target.names, c.name) for c in parts[0].schema.columns) if n)
            return apply_keyless(table, columns, rows("append"), rows("delete"), props)
        key = sink_key(parts[0].schema) if routed else parts[0].schema.row_key
        key = tuple(delta_name(target.names, k) or k for k in key)
        sink_cfg = self.sinks.cfg.sink
        return apply_changes(table, key, rows("append"), rows("upsert"), rows("delete"), props,
                             table_uri(sink_cfg.path, sink), sink_cfg.storage_options)

    def _apply_mode(self, sink: str, part: _Part, offset: StreamOffset, props, columns: SinkColumns) -> RowsApplied:
        """A table laid out by its mode (see the module invariants): its changelog first, then
        one commit of the table."""
        if columns.feed and part.log:
            changes = mode_arrow(part.schema, part.log, FEED_COLUMNS, part.stamps)
            append_changes(self.sinks.feed(sink, part.schema), changes, self.pipeline, offset, part.source)
        table, target = self.sinks.tables[sink], self.sinks.schemas[sink]
        if part.plan.empty:
            commit_no_data(table, props)
            return RowsApplied()
        key = tuple(delta_name(target.names, k) or k for k in part.schema.row_key)
        if not rewritable_with(table, target, key):
            raise TerminalError(f"{sink} is in {columns.mode} mode and its Delta table cannot be rewritten file by "
                                "file (partitions, column mapping, deletion vectors, or a key type binlake does not "
                                "join on): such a table stays in current mode")
        uri, options = table_uri(self.sinks.cfg.sink.path, sink), self.sinks.cfg.sink.storage_options
        p, src, pk = part.plan, part.source, part.schema.row_key
        if isinstance(p, HistoryPlan):
            versions = conform(mode_arrow(part.schema, p.versions, columns, part.stamps), target, src, pk)
            return apply_history(table, key, key_table(key, versions.schema, p.keys), versions, props, uri, options)

        def rows(kind: str) -> pa.Table:
            return conform(mode_arrow(part.schema, getattr(p, kind), columns, part.stamps), target, src, pk)

        return apply_changes(table, key, rows("append"), rows("upsert"), rows("delete"), props, uri, options)
