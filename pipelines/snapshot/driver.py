"""The snapshot's driver: one run's passes over the captured tables — plan what has no plan
(pipelines/snapshot/plan.py), run the pending chunk groups (pipelines/snapshot/runner.py),
commit each finished group's file to Delta together with its chunk records, report
progress — then check that no DDL changed a table while it was read (a table it changed is
reset and read again in another pass), mark the tables verified and count their rows
(pipelines/snapshot/verify.py).

Invariants:
- A chunk counts as done only once its rows are in a Delta commit that also carries its
  record; files of an interrupted group are never committed (no duplicates), and a re-run
  reads only chunks without a record. After success a re-run is a no-op
  (tests/test_snapshot_resume.py).
- A table of one source that does not exist yet is created by the commit of its first
  files (its properties and partition columns as ``create_table`` gives them); one none of
  whose chunks a run read is created empty at the end of its pass (tests/test_lake_requests.py,
  tests/test_snapshot_resume.py).
- A table's verification (``SNAPSHOT_VERIFIED_KEY``) follows the DDL check after its last
  chunk is committed, in a commit without files; a commit holding every chunk of a table's
  plan, each read in a window ending at or before the table's baseline (no binlog event after
  it, so no DDL), carries the mark itself (tests/test_snapshot_resume.py).
- Only the driver commits, one commit per sink table at a time (different sink tables in
  parallel threads, ``each_sink``), so commits never race, also those of several routed
  sources into one sink table (cdc_core/routes.py: each source's chunks go to its route's
  sink table, first widened to hold every source; chunk plans and records stay per source
  table) (tests/test_routes.py).
- Before any work the sink must pass ``lake_storage.commit_problem``; a local sink whose
  files the driver cannot see (executors on other hosts) stops the run before a commit
  points at them (tests/test_object_store.py).
- Groups that finish together go into one commit per sink table; on an object store, those
  finishing within ``OBJECT_STORE_COMMIT_INTERVAL`` of the last commit wait for the next
  (tests/test_snapshot_resume.py, tests/test_object_store.py). A failed group is raised once
  the others finished with it are committed.
- A DDL that changed a table between its baseline and its last chunk's high watermark makes
  the table read again, from a new baseline and plan, at most ``MAX_PASSES`` times
  (tests/test_schema_at_position.py).
- Faults (tests/test_snapshot_faults.py, tests/test_lake_faults.py): a run whose groups, or
  whose commits to the lake, outlast the retry budget stops (exit 1) and a re-run resumes; a
  commit whose answer was lost is found by its token, never made twice; any other fault that
  passes runs it again from what is committed; a resumed run groups only consecutive pending
  chunks.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pymysql

from cdc_core.binlog.range_reads import read_statements
from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.record import ChunkRecord
from cdc_core.config import BinlakeConfig
from cdc_core.errors import TerminalError, is_transient, transient_cause
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.retry import Retry, RetryBudgetExceeded, RetryPolicy, fault_line, retrying
from cdc_core.routes import Router, sink_schema
from cdc_core.schema.change import UnparsedDDL, parse_ddl
from cdc_core.schema.history import Status
from cdc_core.schema.modes import SinkColumns
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import TableSchema, describe_table
from cdc_core.source.capture import captured_schema
from cdc_core.source.connection import captured_tables, connect, connection_settings, describe_captured
from pipelines.lake.control_store import ControlStore
from pipelines.lake.files import (
    SNAPSHOT_CHUNKS_KEY,
    SNAPSHOT_VERIFIED_KEY,
    NewTable,
    SnapshotCommits,
    commit_files,
    snapshot_commits,
    snapshot_reset_properties,
)
from pipelines.lake.maintenance.layout import create_empty, create_table, new_table
from pipelines.lake.storage import UnsafeSink, is_local, local_folder, require_safe_commits
from pipelines.lake.tables import DeltaTable, delta_schema, open_table, reset, table_uri
from pipelines.schema.applier import widen_to
from pipelines.snapshot.plan import chunk_groups, group_size, plan_tables, streamed_already
from pipelines.snapshot.runner import GroupRunner, next_attempt_in
from pipelines.snapshot.task import GroupTask, GroupWritten, run_group
from pipelines.snapshot.verify import SnapshotSummary, TableSummary, counted

if TYPE_CHECKING:  # Spark is imported where it starts (pipelines/spark/session.py)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_PASSES = 5  # a table a DDL changed while it was read is read again, at most this often
MIRROR_BATCH_RECORDS = 256
# On an object store a Delta commit is about 9 requests (list, conditional put, reading it back
# twice): groups finishing within this many seconds of the last commit wait for the next one,
# which holds them all (a local commit costs little and is made at once). A crash re-reads
# what was waiting, as it does a group still running.
OBJECT_STORE_COMMIT_INTERVAL = 1.0
SINK_THREADS = 16  # sink tables created or committed at once (each_sink; see stream/commit.py's COMMIT_THREADS)


class SnapshotJob:
    """Driver of one snapshot run."""

    group_fn = staticmethod(run_group)  # what reads a group (bench/snapshot.py --profile times it)

    def __init__(self, cfg: BinlakeConfig, spark: SparkSession | SparkContext | None = None, progress=None,
                 only: set[str] | None = None, chunks: set[int] | None = None, on_commit=None,
                 retry: RetryPolicy | None = None):
        self.cfg = cfg
        self.only = only  # restrict to these "db.table" names (Dagster asset subsets)
        self.chunks = chunks  # restrict to these chunk indexes of the planned tables (Dagster partitions)
        self.on_commit = on_commit  # callable(table, chunk records) after each group's Delta commit, or None
        self.progress = progress  # callable(chunks_done, chunks_total, rows) or None
        self.retry = retry or RetryPolicy()  # transient source faults: backoff, budget, stall timeout
        # Where groups run (source.snapshot.runner): Spark tasks, or threads of this process.
        self.runner = GroupRunner(cfg, spark, self.retry, self.group_fn)
        self.slots = self.runner.slots
        self.conn = connection_settings(cfg)
        # Executors do not share the driver's working directory: a local sink goes to them absolute.
        self.sink = cfg.sink.path if urlparse(cfg.sink.path).scheme else os.path.abspath(cfg.sink.path)
        self.router = Router(cfg.routes)
        self.store = ControlStore.of(cfg, self.retry)
        self.base = 0  # of the pipeline's positions on the source (read at the run's start)
        self._unmirrored: list[ChunkRecord] = []
        self._reconnects = 0  # the driver's own connects (and runs) repeated after a transient fault
        self._committed = 0  # group commits made
        # Snapshot commits of each sink table read so far (by table URI): later reads only read
        # the commits made since.
        self._commits: dict[str, SnapshotCommits] = {}
        # The current pass's chunk plans and the tables' baseline positions (_quiet_tables).
        self._plans: dict[str, list[Chunk]] = {}
        self._baselines: dict[str, BinlogPosition] = {}

    @property
    def retries(self) -> int:
        """Attempts repeated after a transient source fault: groups' and the driver's connects."""
        return self.runner.retries + self._reconnects

    def run(self) -> SnapshotSummary:
        """Snapshot every captured table; resumes where an earlier run stopped. A fault that passes
        and that no step retried itself (a read of the lake after delta-rs's own retries) runs it
        again from what is committed, with backoff, until it outlasts the retry budget with no
        commit in between."""
        retry = Retry(self.retry)
        try:
            while True:
                committed = self._committed
                try:
                    return self._run()
                except Exception as e:
                    if not is_transient(e):
                        raise
                    if self._committed > committed:
                        retry.succeeded()  # it went on between the faults: a new one
                    time.sleep(next_attempt_in(retry, "snapshot", fault_line(e)))
                    self._reconnects += 1
        except BaseException:
            self._flush_mirror()  # records committed and not mirrored yet (a run that ends well mirrors them all)
            raise

    def _run(self) -> SnapshotSummary:
        start = time.monotonic()
        summary = SnapshotSummary()
        # The lake's first reads and its commit check do not depend on the source: they run while
        # the driver connects to it and lists its tables (on an object store, about 7 requests).
        lake = _sink_pool().submit(self._lake_at_start)
        try:
            with self._connect() as control, control.cursor() as cur:
                captured = captured_tables(self.cfg, cur)
        finally:
            plans = lake.result()  # an unsafe sink stops the run before any work, as before
        names = [n for n in captured if self.only is None or n in self.only]
        # Only a table without a plan can be the stream's: planned ones are not opened here.
        streamed = {n for n in names if n not in plans and streamed_already(self.router, n, plans, open_table(
            table_uri(self.sink, self.router.sink(n)), self.cfg.sink.storage_options))}
        for n in sorted(streamed):
            log.warning("snapshot: %s is streamed already (Delta holds its rows, no snapshot planned it): not read "
                        "again; `binlake backfill --table %s` re-reads it online", n, n)
        summary.tables = [TableSummary(n, 0, streamed=n in streamed) for n in names]
        by_table = {s.table: s for s in summary.tables}
        names = [n for n in names if n not in streamed]
        for _ in range(MAX_PASSES):
            tables: dict[str, DeltaTable] = {}
            # A connection per pass and per reset: a fault during the reads may have dropped the last one.
            with self._connect() as control, control.cursor() as cur:
                try:
                    self._pass(cur, captured, names, tables, by_table, summary, plans)
                    failure = None
                except RetryBudgetExceeded:
                    raise  # the source is unreachable: whether a DDL ran cannot be read either
                except Exception as e:  # noqa: BLE001 - a chunk read may fail because a DDL changed its table
                    failure = e
            plans = self.store.load_plans()  # with this pass's new plans; the same until the run ends if clean
            dirty, completed = self._changed_during_snapshot(names, tables, plans)
            if failure is not None and not dirty:
                raise failure
            if not dirty:
                break
            with self._connect() as control, control.cursor() as cur:
                for name in dirty:
                    self._reset(cur, name, tables, by_table[name])
            plans = self.store.load_plans()
        else:
            raise TerminalError(f"DDL kept changing {', '.join(sorted(dirty))} while it was being snapshotted "
                                f"({MAX_PASSES} attempts): run the snapshot again when no DDL runs on it")
        # The last lake writes (chunk records mirrored, verification commits) are made while MySQL
        # counts the tables' rows; Delta's rows are counted once they are made (a commit without
        # files: the handles' rows stay the same). The last pass's handles are current: no need
        # to read their logs again.
        verifying = _verify_pool().submit(self._finish_in_lake, self._verified(completed, plans), tables)
        try:
            summary = counted(self.cfg, summary, tables, start, plans, self._connect, source_counted=verifying.result)
        finally:
            verifying.result()  # made (or its failure raised) before the run returns
        summary.retries = self.retries  # also the driver's own reconnects after the reads
        return summary

    def _lake_at_start(self) -> dict[str, list[Chunk]]:
        """The pipeline's position base (kept), the commit check of the sink, and the stored
        chunk plans (returned)."""
        self.base = self.store.position_base()
        require_safe_commits(self.cfg.sink.path, self.cfg.sink.storage_options)
        return self.store.load_plans()

    def _pass(self, cur, captured: list[str], names: list[str], tables: dict, by_table: dict[str, TableSummary],
              summary: SnapshotSummary, plans: dict[str, list[Chunk]]) -> None:
        """Plan what has no plan in ``plans`` (the stored plans; recording its baseline schema
        first, the new plans added to ``plans``), then read every chunk of ``names`` that has no record."""
        at = master_position(cur, self.base)  # before describing: a DDL after it is found by _changed_during_snapshot
        # A routed sink is shaped by all its sources, also those outside an `only` subset.
        sinks = {self.router.sink(n) for n in names}
        routed = [n for n in captured if self.router.routed(n) and self.router.sink(n) in sinks]
        schemas = describe_captured(cur, sorted({*names, *routed}), self.cfg.source)
        self.router.check(schemas)
        names = [n for n in names if n in schemas]  # a table dropped since it was listed is not read
        plans.update(plan_tables(self.cfg, self.store, cur, [schemas[n] for n in names if n not in plans], at))
        self._plans, self._baselines = plans, self._baselines_of(names)
        work: list[tuple] = []
        targets: dict[str, pa.Schema | None] = {}
        opening = sorted({self.router.sink(n) for n in names} - tables.keys())
        opened = each_sink(lambda sink: self._open_sink(table_uri(self.sink, sink), sink, schemas), opening)
        for sink, (dt_, target) in zip(opening, opened):
            tables[sink], targets[sink] = dt_, target
        completed = self.store.completed_of({n: self._commits_of(tables[self.router.sink(n)]) for n in names})
        for name in names:
            schema = schemas[name]
            sink = self.router.sink(name)
            uri = table_uri(self.sink, sink)
            done = completed[name]
            pending = [c for c in plans[name]
                       if c.index not in done and (self.chunks is None or c.index in self.chunks)]
            by_table[name].chunks = len(plans[name])
            by_table[name].chunks_read += len(pending)
            work.append((schema, uri, pending, targets[sink], _partition_columns(tables[sink])))
        total_pending = sum(len(w[2]) for w in work)
        per_group = group_size(total_pending, self.slots, self.cfg.source.snapshot)
        task_conn = replace(self.conn, read_timeout=self.retry.read_timeout)  # a stalled read fails, then retries
        options = tuple(sorted(self.cfg.sink.storage_options.items()))
        tasks = [GroupTask(task_conn, 0, schema, tuple(g), uri, self.cfg.pipeline.name, target, options, self.base,
                           self._columns(schema), partitions)
                 for schema, uri, pending, target, partitions in work for g in chunk_groups(pending, per_group)]
        log.info("snapshot: %d tables, %d chunks to read in %d tasks", len(names), total_pending, len(tasks))
        self._execute(tasks, tables, by_table, summary, total_pending)
        # A new table none of whose chunks this run read (``chunks`` left them out) is created empty.
        unread = [sink for sink, t in tables.items() if isinstance(t, NewTable)]
        for sink, dt_ in zip(unread, each_sink(lambda sink: create_empty(tables[sink], self.retry), unread)):
            tables[sink] = dt_

    def _connect(self) -> pymysql.connections.Connection:
        """A driver connection to the source, again with backoff while the source refuses or
        drops it (a restarting server) until the retry budget is spent."""
        retry = Retry(self.retry)
        while True:
            try:
                return connect(self.conn)
            except Exception as e:
                cause = transient_cause(e)
                if cause is None:
                    raise
                delay = next_attempt_in(retry, "snapshot: connecting to the source", cause)
                self._reconnects += 1
                time.sleep(delay)

    # --- running and committing ------------------------------------------------------------------

    def _execute(self, tasks: list[GroupTask], tables: dict, by_table: dict[str, TableSummary],
                 summary: SnapshotSummary, total: int) -> None:
        """Run ``tasks`` and commit each batch of finished groups as it comes (see the module
        invariants); progress after each batch."""
        done_chunks = 0
        if self.progress:
            self.progress(0, total, 0)
        try:
            with self.runner.running(tasks) as futures:
                for batch in self._batches(set(futures)):
                    done_chunks += self._commit_batch([(futures[f], f) for f in batch], tables, by_table, summary)
                    if self.progress:
                        self.progress(done_chunks, total, summary.rows_read)
        finally:
            summary.retries = self.retries

    def _batches(self, running: set[Future]) -> Iterator[list[Future]]:
        """Finished groups in the batches they are committed in: those that finished together,
        and on an object store those finishing within ``OBJECT_STORE_COMMIT_INTERVAL`` of the
        last commit; a batch holding a failure at once."""
        interval = 0.0 if is_local(self.sink) else OBJECT_STORE_COMMIT_INTERVAL
        held: list[Future] = []  # finished groups waiting for the next commit
        last_commit = -math.inf
        while running:
            wait_for = max(0.0, last_commit + interval - time.monotonic()) if held else None
            finished, running = wait(running, timeout=wait_for, return_when=FIRST_COMPLETED)
            held.extend(finished)
            failed = any(f.exception() is not None for f in finished)
            if not held or (running and not failed and time.monotonic() - last_commit < interval):
                continue
            batch, held, last_commit = held, [], time.monotonic()
            yield batch

    def _commit_batch(self, batch: list[tuple[GroupTask, Future]], tables: dict, by_table: dict[str, TableSummary],
                      summary: SnapshotSummary) -> int:
        """Commit the finished groups of ``batch``, one commit per sink table; the chunks
        committed. A failed group is raised after the others are committed."""
        ready: dict[str, list[tuple[GroupTask, GroupWritten]]] = {}
        failure = None
        for task, fut in batch:
            try:
                result = fut.result()
            except BaseException as e:  # noqa: BLE001 - raised below, once the others are committed
                failure = failure or e
                continue
            ready.setdefault(self.router.sink(task.schema.qualified_name), []).append((task, result))
        done = 0
        sinks = list(ready)

        def commit(sink: str) -> list[ChunkRecord] | BaseException:
            first = ready[sink][0][0]
            try:
                # A new table is created by this commit: from then on the handle is the table's.
                tables[sink], records = self._commit(
                    tables[sink], first.target or output_schema(first.schema, first.columns.fields()),
                    [result for _, result in ready[sink]])
                return records
            except BaseException as e:  # noqa: BLE001 - raised below, once the others are recorded
                return e

        for sink, records in zip(sinks, each_sink(commit, sinks)):
            if isinstance(records, BaseException):
                failure = failure or records
                continue
            group = ready[sink]
            self._mirror(records)
            committed = iter(records)
            for task, result in group:
                name = task.schema.qualified_name
                if self.on_commit:
                    self.on_commit(name, [next(committed) for _ in result.records])
                by_table[name].rows_written += result.rows
                summary.rows_read += result.rows
                summary.task_peak_rss_mb = max(summary.task_peak_rss_mb, result.task_peak_rss_mb)
                done += len(task.chunks)
        if failure is not None:
            raise failure
        return done

    def _commit(self, table: DeltaTable | NewTable, schema: pa.Schema, results: list[GroupWritten]
                ) -> tuple[DeltaTable, list[ChunkRecord]]:
        """Commit the files of groups of one sink table with their chunk records, in one commit
        (creating a :class:`NewTable`); returns the table's handle and the records as committed,
        in the groups' order."""
        # Called by the driver only, one call per sink table at a time (each_sink): commits
        # never race each other (also those of several routed sources into one sink table).
        records = [r for result in results for r in result.records]
        files = [f for result in results for f in result.files]
        metadata: dict[str, list] = {SNAPSHOT_CHUNKS_KEY: [r.to_json_row() for r in records]}
        quiet = self._quiet_tables(records)
        if quiet:
            metadata[SNAPSHOT_VERIFIED_KEY] = quiet
        # A new table's URI is the sink's path as configured (a plain path may hold ';' or '#');
        # delta-rs's table_uri is a %-encoded URL.
        folder = local_folder(table.uri) if isinstance(table, NewTable) else unquote(urlparse(table.table_uri).path)
        missing = [f for f in files if is_local(self.sink) and not os.path.exists(os.path.join(folder, f.path))]
        if missing:
            # Written on another host: a commit would point the table at a file it cannot read.
            raise UnsafeSink(f"sink.path {self.cfg.sink.path} is a local folder the Spark executors do not share "
                             f"with the driver ({missing[0].path} written by an executor is missing here); use an "
                             "object-store URI, or a folder mounted at the same path on every host")
        done = commit_files(table, files, schema, metadata, self.retry)
        self._committed += 1
        return done.table, [replace(r, delta_version=done.version) for r in records]

    def _quiet_tables(self, records: list[ChunkRecord]) -> list[str]:
        """The source tables of one commit's ``records`` that it verifies itself: it holds every
        chunk of the table's plan, each read in a window ending at or before the table's baseline
        position (no binlog event came after the baseline, so no DDL can have changed the table
        while it was read: the check :meth:`_changed_during_snapshot` makes after the commit would
        read an empty binlog range). A quiet source's small tables then cost one commit each,
        not two (bench/many_tables.py)."""
        by_table: dict[str, list[ChunkRecord]] = {}
        for r in records:
            by_table.setdefault(r.table, []).append(r)
        quiet = []
        for name, rs in by_table.items():
            baseline = self._baselines.get(name)
            if baseline is not None and {r.chunk_index for r in rs} == {c.index for c in self._plans.get(name, ())} \
                    and all(r.high_watermark <= baseline for r in rs):
                quiet.append(name)
        return quiet

    def _mirror(self, records: list[ChunkRecord]) -> None:
        """The data commit already holds these records; the mirror table is appended in
        batches (recovery unites both, see pipelines/lake/control_store.py)."""
        self._unmirrored.extend(records)
        if len(self._unmirrored) >= MIRROR_BATCH_RECORDS:
            self._flush_mirror()

    def _flush_mirror(self) -> None:
        if self._unmirrored:
            self.store.record_chunks(self._unmirrored)
            self._unmirrored = []

    # --- sinks, checks and resets ------------------------------------------------------------------

    def _columns(self, schema: TableSchema) -> SinkColumns:
        """The mode and metadata columns of source ``schema``'s Delta table (cdc_core/schema/modes.py)."""
        name = schema.qualified_name
        return SinkColumns.of(self.cfg.sink, name).applied(schema, self.router.routed(name))

    def _open_sink(self, uri: str, sink: str, schemas: dict[str, TableSchema]
                   ) -> tuple[DeltaTable | NewTable, pa.Schema | None]:
        """The Delta table ``sink`` and, for a route's sink, the schema its rows are written with:
        the widest of all its sources, the table widened to it first. A missing route's sink is
        created now; a missing table of one source is a :class:`NewTable`, created by its first
        commit with the first files (one commit per table less: bench/many_tables.py)."""
        sources = self.router.sources(sink, schemas)
        if not sources:  # not routed: the source's own table, with its mode's columns
            schema = output_schema(schemas[sink], self._columns(schemas[sink]).fields())
            dt_ = open_table(uri, self.cfg.sink.storage_options)
            if dt_ is not None:
                return dt_, None
            return new_table(self.cfg.sink, uri, sink, schema), None  # a wrong partition column stops the run here
        members = [schemas[n] for n in sources]
        dt_ = create_table(self.cfg.sink, uri, sink, sink_schema(members, sink=sink), self.retry)
        widened = widen_to(dt_, sink_schema(members, base=delta_schema(dt_), sink=sink))
        if widened:
            log.info("snapshot: %s %s", sink, widened)
        return dt_, delta_schema(dt_)

    def _commits_of(self, table: DeltaTable | NewTable | None) -> SnapshotCommits | None:
        """The snapshot commits of a sink table (None for no table, or one not created yet)."""
        if table is None or isinstance(table, NewTable):
            return None
        commits = self._commits[table.table_uri] = snapshot_commits(table, self._commits.get(table.table_uri))
        return commits

    def _changed_during_snapshot(self, names: list[str], tables: dict, plans: dict[str, list[Chunk]]
                                 ) -> tuple[set[str], dict[str, dict[int, ChunkRecord]]]:
        """Tables a statement changed between their baseline and their last chunk's high
        watermark: their chunks do not all hold the same columns (or rows a TRUNCATE removed);
        and the completed chunks of the tables of ``names`` not verified yet (what
        :meth:`_verified` needs when none changed: the same until the run ends)."""
        baselines = self._baselines_of(names)
        with self._connect() as c, c.cursor() as cur:
            end = master_position(cur, self.base)
        windows = {}
        commits_of = {n: self._commits_of(tables.get(self.router.sink(n))) for n in names}
        unverified = {n: c for n, c in commits_of.items() if c is None or not c.is_verified(n)}
        completed = self.store.completed_of({n: c for n, c in unverified.items() if c is not None})
        for name in unverified:
            done = completed.get(name, {})
            hws = [r.high_watermark for r in done.values()]
            plan_done = done and len(done) == len(plans.get(name, ()))
            if name in baselines:
                windows[name] = (baselines[name], max(hws) if plan_done else end)
        if not windows:
            return set(), completed
        dirty = set()
        server_id = self.cfg.source.server_id + 1 + self.slots  # the chunk readers use +1 … +slots
        for st in read_statements(self.conn, server_id, min(w[0] for w in windows.values()),
                                  max(w[1] for w in windows.values())):
            for name in _changed_tables(st):
                w = windows.get(name)
                if w is not None and w[0] < st.position <= w[1]:
                    log.warning("snapshot: %s changed at %s while it was being read (%s): reading it again",
                                name, st.position, st.sql)
                    dirty.add(name)
        return dirty, completed

    def _baselines_of(self, names: list[str]) -> dict[str, BinlogPosition]:
        """The baseline position of each table of ``names`` (its last: a reset records a new one)."""
        baselines = {}
        wanted = set(names)
        for e in self.store.schema_history():
            if e.status == Status.BASELINE and e.table in wanted:
                baselines[e.table] = e.position  # the last one: history is in binlog order
        return baselines

    def _verified(self, completed: dict[str, dict[int, ChunkRecord]], plans: dict[str, list[Chunk]]
                  ) -> dict[str, list[str]]:
        """The checked source tables of ``completed`` (completed chunks of the tables not verified
        yet) whose every planned chunk is done, by sink table: :meth:`_finish_in_lake` marks them
        verified (a no-op re-run need not read their binlog again)."""
        by_sink: dict[str, list[str]] = {}
        for name, done in completed.items():
            if len(done) == len(plans.get(name, ())):
                by_sink.setdefault(self.router.sink(name), []).append(name)
        return by_sink

    def _finish_in_lake(self, by_sink: dict[str, list[str]], tables: dict) -> None:
        """The run's last lake writes: the chunk records not mirrored yet (the DDL check read the
        data tables' commits, which carry them all), then one commit per sink table of ``by_sink``
        marking its source tables verified."""
        self._flush_mirror()
        each_sink(lambda sink: commit_files(tables[sink], [], delta_schema(tables[sink]),
                                            {SNAPSHOT_VERIFIED_KEY: by_sink[sink]}, self.retry), list(by_sink))

    def _reset(self, cur, name: str, tables: dict, summary: TableSummary) -> None:
        """Forget ``name``'s chunks and rows, record its new baseline and plan it again."""
        sink = self.router.sink(name)
        dt_ = tables[sink]
        at = master_position(cur, self.base)
        try:
            schema = captured_schema(describe_table(cur, *name.split(".", 1)), self.cfg.source)
        except LookupError:
            log.warning("snapshot: %s was dropped while it was being read; the stream records its drop", name)
            return
        props = snapshot_reset_properties([name])

        def empty() -> None:
            if self.router.routed(name):
                reset(dt_, props, source=name)
            else:
                reset(dt_, props, schema=output_schema(schema, self._columns(schema).fields()))

        # Emptying it twice (an attempt that landed although it failed) is emptying it once. A
        # table not created yet (no commit of it was made) has nothing to empty.
        if not isinstance(dt_, NewTable):
            retrying(f"emptying {sink} to read {name} again", empty, self.retry)
        plan_tables(self.cfg, self.store, cur, [schema], at)  # a new baseline and plan: the table is read again
        summary.rows_written = 0


def each_sink(fn: Callable[[str], T], sinks: list[str]) -> list[T]:
    """``fn`` of each sink table, in threads: each call writes its own Delta table and
    delta-rs releases the GIL while it writes, so many small tables' commits overlap
    (bench/many_tables.py). Results in ``sinks``' order; the first error is raised once
    every call has finished."""
    if len(sinks) <= 1:
        return [fn(s) for s in sinks]
    futures = [_sink_pool().submit(fn, s) for s in sinks]
    wait(futures)
    return [f.result() for f in futures]


def _partition_columns(table: DeltaTable | NewTable) -> tuple[str, ...]:
    """The partition columns of a sink table, also of one not created yet."""
    return table.partition_by if isinstance(table, NewTable) else tuple(table.metadata().partition_columns)


@functools.cache
def _verify_pool() -> ThreadPoolExecutor:
    """The thread a run's last lake writes are made in (:meth:`SnapshotJob._finish_in_lake`; its
    commits go through :func:`each_sink`)."""
    return ThreadPoolExecutor(1, thread_name_prefix="verify")


@functools.cache
def _sink_pool() -> ThreadPoolExecutor:
    """The threads of :func:`each_sink`, started once: a snapshot of many small tables calls it
    once per batch of finished groups, and starting 16 threads each time cost about 1 ms per table."""
    return ThreadPoolExecutor(SINK_THREADS, thread_name_prefix="sink")


def _changed_tables(st) -> set[str]:
    """Tables whose columns or rows a statement changes (an index does not)."""
    try:
        changes = parse_ddl(st.sql, st.database)
    except UnparsedDDL as e:
        return set(e.tables)
    return {c.table for c in changes} | {c.new_name for c in changes if c.new_name}
