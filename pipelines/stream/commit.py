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
- A commit that failed on a fault that passes is retried with backoff; before each
  retry the table's own offset is read again, and a commit that landed although its
  call failed is not repeated. A fault outlasting the retry budget, or any other
  error, stops the engine before the checkpoint moves past the batch.
- Values are conformed to the Delta table's current schema by column name
  (case-insensitively, as MySQL names columns); a value Delta's type cannot hold is
  NULL and logged, the rest of its column untouched.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from cdc_core.batch.micro_batch import MicroBatch
from cdc_core.batch.table_batch import TablePlan, plan_to_arrow
from cdc_core.batch.table_commit import RowsApplied, TableCommit
from cdc_core.errors import TerminalError, is_transient
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.retry import Retry
from cdc_core.routes import Router, sink_key
from cdc_core.schema.output import delta_name
from cdc_core.schema.table import TableSchema
from pipelines.lake.apply import apply_changes, apply_keyless
from pipelines.lake.conform import conform, conform_routed
from pipelines.lake.offsets import CHANGES_KEY, stream_commit_properties
from pipelines.lake.tables import commit_no_data, table_uri
from pipelines.stream.sinks import Sinks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Part:
    source: str
    schema: TableSchema
    plan: TablePlan
    changes: dict[str, int]  # binlog row changes by op (TableBatch.changes)


def _count(plan: TablePlan, op: str) -> int:
    return sum(1 for rows in (plan.append, plan.upsert, plan.delete) for r in rows if r[-2] == op)


class Committer:
    """Applies micro-batches to the Delta tables of ``sinks``."""

    def __init__(self, pipeline: str, router: Router, sinks: Sinks, retry: Retry | None = None):
        self.pipeline = pipeline
        self.router = router
        self.sinks = sinks
        self.retry = retry or Retry()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="apply")
        self.retries = 0  # table commits retried after a fault that passes (the metrics' count)
        self._retries_lock = threading.Lock()  # tables commit in parallel threads

    def close(self) -> None:
        self._pool.shutdown()

    def apply(self, batch: MicroBatch, offset: StreamOffset) -> list[TableCommit]:
        """Commit every table of ``batch`` with ``offset`` (see the module invariants)."""
        work: dict[str, list[_Part]] = {}  # by Delta table: a route's sources go into one commit
        for name, tb in batch.tables.items():
            if tb.rows_in:  # committed even when its plan is empty: the commit records the changes it covers
                work.setdefault(self.router.sink(name), []).append(_Part(name, tb.schema, tb.plan(), tb.changes))
        futures = [self._pool.submit(self._commit, sink, parts, offset) for sink, parts in work.items()]
        return [f.result() for f in futures]  # a failed table stops the engine before the checkpoint moves

    def _commit(self, sink: str, parts: list[_Part], offset: StreamOffset) -> TableCommit:
        retry = Retry(self.retry.policy)
        while True:
            try:
                rows = self._apply(sink, parts, offset)
                break
            except Exception as e:  # noqa: BLE001 - classified: faults that pass are retried
                if not is_transient(e):
                    raise
                delay = retry.next_delay()
                if delay is None:
                    raise TerminalError(f"writing {sink} to Delta kept failing for over "
                                        f"{retry.policy.budget_seconds:.0f} s: {type(e).__name__}: {e}") from e
                log.warning("writing %s to Delta failed (%s: %s); retrying in %.1f s", sink, type(e).__name__, e,
                            delay)
                with self._retries_lock:
                    self.retries += 1
                time.sleep(delay)
                self.sinks.refresh(sink)
                done = self.sinks.applied_key(sink)
                if done is not None and done >= offset.applied.key:
                    # The commit landed although the call failed: its metrics are lost, the changes are known.
                    rows = RowsApplied(*(sum(_count(p.plan, op) for p in parts) for op in ("c", "u", "d")))
                    break
        return TableCommit(sink, tuple(p.source for p in parts), offset, self.sinks.tables[sink].version(), rows)

    def _apply(self, sink: str, parts: list[_Part], offset: StreamOffset) -> RowsApplied:
        target = self.sinks.schemas[sink]
        routed = self.router.routed(parts[0].source)

        def rows(kind: str) -> pa.Table:
            if not routed:
                p = parts[0]
                return conform(plan_to_arrow(p.schema, getattr(p.plan, kind)), target, p.source, p.schema.row_key)
            return pa.concat_tables([conform_routed(plan_to_arrow(p.schema, getattr(p.plan, kind)), p.source, target)
                                     for p in parts])

        table = self.sinks.tables[sink]
        props = stream_commit_properties(self.pipeline, offset,
                                         {CHANGES_KEY: json.dumps({p.source: p.changes for p in parts})})
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
