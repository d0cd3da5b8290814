"""Maintenance carried out: by the stream between its batches (:class:`Maintainer`), or at once
by ``binlake maintain`` when no stream runs (:func:`maintain_now`, under the writer lock).
Both use the same steps: policy.py decides, compaction.py and vacuum.py do, layout.py sets the
tables' properties; each step done is recorded in ``_binlake/maintenance_runs`` (what
``binlake status`` and Dagster show).

The stream's part (the engine calls ``committed`` after each batch's commits and ``step``
between batches; it never commits inside a batch):

- at most one compaction is in flight: planned in the engine's thread from the table's open
  handle, rewritten in this part's worker thread (reading, sorting and writing files takes
  the engine's thread for no more than the planning), committed by ``step`` in the engine's
  thread once done, if none of its inputs was removed meanwhile (else discarded and planned
  again later), never while a table is held for a schema change;
- every ``CHECK_SECONDS`` the tables are looked at for a compaction due: a table's files are
  read from its handle again only when its version moved, those of at most ``CHECK_READS``
  tables per look (the next goes on from there), so a batch that committed many tables does
  not hold up the next one (tests/test_maintenance.py);
- the worker threads run at a lower CPU priority (``BACKGROUND_NICE``, Linux): with the stream
  on two busy cores the engine's thread goes first (bench/maintenance.py ``--only latency``);
- at most one vacuum is in flight: planned in the engine's thread (delta-rs's dry run: a
  listing), never while an online backfill reads Delta in the background or a compaction of
  the table is in flight; its deletes, checkpoint and log cleanup run in this part's vacuum
  thread while the stream goes on committing (vacuum.py says why that is safe); ``step``
  records it once done (a data table's in its log, vacuum.py ``record``); a stop lets the
  slice of deletes under way finish and leaves the rest to the next vacuum;
- after a table's vacuum (which writes a checkpoint) its handles are opened afresh: a handle
  kept for the stream's life grows with every commit it has seen, the stream's memory with it;
  between vacuums a handle is opened afresh once worn (pipelines/lake/tables.py: ``worn``);
- ``binlake maintain`` requests (requests.py) are polled every ``REQUEST_POLL_SECONDS`` and
  carried out the same way, the asked tables first, then answered with what was done.

Control tables (``_binlake/*``) are maintained with the data tables (they gain a file per
append), without a sort; the writer lock's lease table is left alone (its renewals commit at
exactly the version they read: a maintenance commit between would take the lock away).

Invariants (tests/test_maintenance_stream.py): maintenance under concurrent streaming and
SIGKILL anywhere leaves Delta equal to MySQL with every change counted once; the stream
commits batches while a vacuum's deletes are under way; a stream whose
tables do not need compaction makes no more requests per batch than one without maintenance
(tests/test_lake_requests.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from cdc_core.config import BinlakeConfig
from cdc_core.errors import BadInput, TerminalError
from cdc_core.routes import Router, sink_key
from pipelines.lake.control_store import ControlStore
from pipelines.lake.maintenance import compaction, layout, policy, requests, vacuum
from pipelines.lake.maintenance.requests import MaintenanceReport, RequestState, TableReport
from pipelines.lake.storage import require_safe_commits
from pipelines.lake.tables import DeltaTable, delta_schema, open_table, table_uri, worn
from pipelines.lake.writer_lock import WriterLockError, writer_lock

log = logging.getLogger(__name__)

REQUEST_POLL_SECONDS = 5.0  # how often the stream looks for `binlake maintain` requests (a LIST each)
CHECK_SECONDS = 1.0  # how often the stream looks at its tables' files (from the open handles: no I/O)
# Tables whose files one look reads from their handles (those committed since they were last
# read; the others' are known): each read costs 1-2 ms of the engine's thread between batches,
# so a batch touching 500 tables would otherwise hold up the next one for about a second. The
# next look goes on from the table after the last one read (bench/many_tables.py).
CHECK_READS = 64
RETRY_SECONDS = 60.0  # a table whose maintenance failed is left alone this long
BACKGROUND_NICE = 10  # the maintenance threads' niceness (Linux): on a busy host the engine's thread goes first
CONTROL_TABLES = ("snapshot_plan", "snapshot_chunks", "schema_history", "stream_checkpoint", "backfill_requests",
                  "reconcile_runs", "maintenance_runs", "maintenance_requests")


def _background_thread() -> None:
    """Start of a maintenance thread: on Linux (where niceness is per thread) it yields the CPU to
    the engine's thread when both want it, so a compaction's rewrite or a vacuum's deletes delay
    the stream's batches less on a host with few cores."""
    if sys.platform.startswith("linux"):  # elsewhere a thread id is no process id: left as it is
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        except OSError as e:
            log.debug("maintenance thread priority not lowered: %s", e)


def control_table(name: str) -> str:
    """The name maintenance gives a control table (its folder under the lake)."""
    return f"_binlake/{name}"


def _uri(cfg: BinlakeConfig, name: str) -> str:
    if name.startswith("_binlake/"):
        return f"{cfg.sink.path.rstrip('/')}/{name}"
    return table_uri(cfg.sink.path, name)


def _run_row(name: str, kind: str, reason: str, **figures) -> dict:
    import datetime as dt

    return {"table": name, "kind": kind, "at": dt.datetime.now(dt.UTC), "reason": reason, **figures}


def compaction_row(r: compaction.CompactionResult) -> dict:
    """A compaction as a ``maintenance_runs`` row."""
    return _run_row(r.sink, "compaction", r.reason, files_before=r.files_before, files_after=r.files_after,
                    files_removed=r.files_removed, files_added=r.files_added, bytes_removed=r.bytes_removed,
                    bytes_added=r.bytes_added, seconds=r.seconds, delta_version=r.version)


def vacuum_row(r: vacuum.VacuumResult, reason: str) -> dict:
    """A vacuum as a ``maintenance_runs`` row."""
    return _run_row(r.sink, "vacuum", reason, files_deleted=r.files_deleted, bytes_deleted=r.bytes_deleted,
                    live_bytes=r.live_bytes, stored_bytes=r.stored_bytes, seconds=r.seconds)


class TableMaintenance:
    """The steps for one table (data or control), shared by the stream and ``maintain_now``."""

    def __init__(self, cfg: BinlakeConfig, name: str, row_key: tuple[str, ...] | None):
        self.cfg, self.name = cfg, name
        self.uri = _uri(cfg, name)
        self.row_key = row_key
        self.control = name.startswith("_binlake/")
        self._files: tuple[int, compaction.TableFiles] | None = None  # (handle id, its files) last read

    def files(self, dt: DeltaTable) -> compaction.TableFiles:
        """The live files of ``dt`` (compaction.table_files), read from the handle again only when
        its version moved: the files of a version never change, and the stream looks at every
        table each ``CHECK_SECONDS``, most of them not committed since."""
        if self._files is None or self._files[0] != id(dt) or self._files[1].version != dt.version():
            self._files = (id(dt), compaction.table_files(dt))
        return self._files[1]

    def fresh(self, dt: DeltaTable) -> bool:
        """Whether :meth:`files` of ``dt`` is known without reading the handle."""
        return self._files is not None and self._files[0] == id(dt) and self._files[1].version == dt.version()

    def prepare(self, dt: DeltaTable) -> None:
        """The table's properties (layout.py), set once per process where they differ."""
        if not self.control:
            done = layout.apply_properties(dt, layout.table_properties(self.cfg.sink), self.name)
            if done:
                log.info("%s: table properties set: %s", self.name, done)

    def job(self, dt: DeltaTable, *, idle_seconds: float, interval_due: bool, asked: bool,
            ) -> compaction.CompactionJob | None:
        """The compaction due now for ``dt`` (policy.py), planned; None when none is."""
        files = self.files(dt)
        m = self.cfg.sink.maintenance
        trigger = policy.compaction_due(files, m.target_file_mb, idle_seconds=idle_seconds,
                                        interval_due=interval_due, asked=asked)
        if trigger is None:
            return None
        target = policy.effective_target(m.target_file_mb, files.live_bytes)
        sort_by = () if self.control else layout.sort_columns(self.cfg.sink, self.name, delta_schema(dt), self.row_key)
        return compaction.plan(dt, self.name, self.uri, self.cfg.sink.storage_options, trigger, target, sort_by)

    def vacuum(self, dt: DeltaTable) -> vacuum.VacuumResult:
        """Vacuum the table now, in this thread."""
        swept = vacuum.sweep(self.vacuum_plan(dt))
        self.record_vacuum(dt, swept)
        return swept

    def record_vacuum(self, dt: DeltaTable, swept: vacuum.VacuumResult) -> None:
        """A data table's vacuum in its log (vacuum.py: ``record``); ``dt`` the writer's handle."""
        if not self.control:  # the control tables' readers keep handles: their vacuums only in maintenance_runs
            vacuum.record(dt, swept)

    def vacuum_plan(self, dt: DeltaTable) -> vacuum.VacuumPlan:
        """The vacuum of ``dt`` (the writer's handle, between its batches), planned."""
        return vacuum.plan(dt, self.name, self.uri, self.cfg.sink.storage_options,
                           self.cfg.sink.maintenance.retention_hours)


def _report(name: str, before: int, after: int, done: compaction.CompactionResult | None,
            swept: vacuum.VacuumResult | None, note: str | None = None) -> TableReport:
    return TableReport(name, before, after, done.describe() if done else None,
                       swept.bytes_deleted if swept else 0, swept.files_deleted if swept else 0,
                       swept.describe() if swept else None, note)


def pipeline_tables(cfg: BinlakeConfig, table: str | None = None) -> dict[str, tuple[str, ...] | None]:
    """The pipeline's Delta tables (sink name -> row key, None: none), as the schema history
    recorded its captured tables; with ``table`` (a captured table or a route's sink) only its
    Delta table, a table the pipeline does not write being bad input naming it."""
    router = Router(cfg.routes)
    found: dict[str, tuple[str, ...] | None] = {}
    for name, schema in sorted(ControlStore.of(cfg).recorded_schemas().items()):
        if not cfg.source.captures(name):
            continue
        key = (sink_key(schema) if router.routed(name) else schema.row_key) if schema.row_key else None
        found.setdefault(router.sink(name), key)
    if table is None:
        return found
    sink = router.sink(table) if cfg.source.captures(table) else table
    if sink not in found:
        raise BadInput(f"{table} is not a table this pipeline writes (captured and recorded in its schema history)")
    return {sink: found[sink]}


def maintain_now(cfg: BinlakeConfig, tables: Mapping[str, tuple[str, ...] | None], *, controls: bool = True,
                 by: str = "this process") -> MaintenanceReport:
    """Compact and vacuum ``tables`` (sink name -> row key, None: unknown) now, in this thread, and
    with ``controls`` the control tables: what ``binlake maintain`` does when no stream runs
    (the caller holds the writer lock)."""
    store = ControlStore.of(cfg)
    names = list(tables) + ([control_table(n) for n in CONTROL_TABLES] if controls else [])
    reports, rows = [], []
    for name in names:
        steps = TableMaintenance(cfg, name, tables.get(name))
        dt = open_table(steps.uri, cfg.sink.storage_options)
        if dt is None:
            if not steps.control:
                reports.append(TableReport(name, 0, 0, note="no Delta table yet"))
            continue
        steps.prepare(dt)
        before = len(compaction.table_files(dt).files)
        done = None
        job = steps.job(dt, idle_seconds=0.0, interval_due=False, asked=True)
        if job is not None:
            done = compaction.commit(dt, compaction.rewrite(job))
            if done is not None:
                rows.append(compaction_row(done))
        swept = steps.vacuum(dt)
        rows.append(vacuum_row(swept, "asked"))
        reports.append(_report(name, before, len(compaction.table_files(dt).files), done, swept))
    if rows:
        store.record_maintenance(rows)
    return MaintenanceReport(tuple(reports), by)


def maintain(cfg: BinlakeConfig, table: str | None, command: str, *, timeout: float | None = None) -> MaintenanceReport:
    """Maintenance now (``binlake maintain``, the Dagster maintenance job): compaction and vacuum of
    ``table`` (a captured table or a route's sink; None: every table and the control tables) under
    the writer lock, named ``command``, when no stream runs; else handed to the running stream
    (requests.py) and waited for, at most ``timeout`` seconds. A stream that stops before it
    answers (a bounded run) leaves the lock free: the next round does it here."""
    require_safe_commits(cfg.sink.path, cfg.sink.storage_options)
    tables = pipeline_tables(cfg, table)  # BadInput for a table the pipeline does not write
    deadline = None if timeout is None else time.monotonic() + timeout
    req = None
    while True:
        lock = writer_lock(cfg.sink.path, cfg.pipeline.name, command, cfg.sink.storage_options)
        try:
            lock.acquire()
        except WriterLockError:
            lock = None
        if lock is not None:  # no stream runs: here, under the lock
            try:
                report = maintain_now(cfg, tables, controls=table is None)
            finally:
                lock.release()
            if req is not None:  # asked of a stream that stopped before doing it: done here
                requests.answer(ControlStore.of(cfg), req, RequestState.DONE, report.to_json())
            return report
        if req is None:
            req = requests.request_maintenance(cfg, next(iter(tables)) if table else None)
        req = requests.wait_for(cfg, req.id, seconds=10)
        if req.state == RequestState.DONE:
            return req.report
        if req.state == RequestState.FAILED:
            raise TerminalError(f"maintenance failed in the running stream: {req.detail}")
        if deadline is not None and time.monotonic() >= deadline:
            raise TerminalError(f"the running stream did not carry out maintenance request {req.id} within "
                                f"{timeout:.0f} s (it stays requested)")


@dataclass
class _State:
    """The stream's maintenance of one table."""

    steps: TableMaintenance
    last_commit: float
    last_vacuum: float
    last_interval: float
    prepared: bool = False
    retry_at: float = 0.0


@dataclass
class _Asked:
    """A ``binlake maintain`` request the stream is carrying out: each table compacted, then vacuumed."""

    request: requests.MaintenanceRequest
    compact: list[str]  # tables still to compact (in order)
    sweep: list[str]  # tables compacted, to vacuum
    before: dict[str, int] = field(default_factory=dict)
    done: dict[str, compaction.CompactionResult] = field(default_factory=dict)
    reports: list[TableReport] = field(default_factory=list)


@dataclass
class _Sweep:
    """A vacuum planned, its deletes under way in the vacuum thread."""

    plan: vacuum.VacuumPlan
    reason: str
    future: Future


class Maintainer:
    """The stream's lake maintenance (see the module). ``tables()``: the stream's open Delta
    tables by sink name, held ones left out; ``row_key(sink)``: a table's row key (None: none)."""

    def __init__(self, cfg: BinlakeConfig, tables: Callable[[], Mapping[str, DeltaTable]],
                 row_key: Callable[[str], tuple[str, ...] | None], store: ControlStore, *,
                 reopen: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.reopen = reopen
        self.m = cfg.sink.maintenance
        self.tables = tables
        self.row_key = row_key
        self.store = store
        self.clock = clock
        self._states: dict[str, _State] = {}
        self._controls: dict[str, DeltaTable] = {}  # control tables' handles (this part's own)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="compact", initializer=_background_thread)
        self._inflight: tuple[compaction.CompactionJob, Future] | None = None
        self._sweeper = ThreadPoolExecutor(1, thread_name_prefix="vacuum", initializer=_background_thread)
        self._sweep: _Sweep | None = None
        self._stop = threading.Event()  # set at close: a sweep stops after the slice of deletes under way
        self._asked: _Asked | None = None
        started = clock()
        self._polled = started - REQUEST_POLL_SECONDS
        self._checked = started
        self._controls_checked = started
        self._next_check = 0  # the position in the tables where the next look at their files starts
        warning = self.m.retention_warning()
        if warning:
            log.warning(warning)

    def close(self) -> None:
        """Stop: a compaction in flight is finished and discarded (its files never committed); a
        vacuum in flight stops after its slice of deletes under way (the next one does the rest)."""
        self._stop.set()
        if self._sweep is not None:
            sweep, self._sweep = self._sweep, None
            try:
                sweep.future.result()
            except Exception:  # noqa: BLE001 - what it left goes with the next vacuum
                log.debug("vacuum in flight at stop failed", exc_info=True)
        self._sweeper.shutdown(wait=True, cancel_futures=True)
        if self._inflight is not None:
            _, future = self._inflight
            self._inflight = None
            try:
                compaction.discard(future.result())
            except Exception:  # noqa: BLE001 - its files, if any, are left for a vacuum
                log.debug("compaction in flight at stop failed", exc_info=True)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def committed(self, sinks) -> None:
        """The stream committed a batch to ``sinks``: they are not idle."""
        now = self.clock()
        for sink in sinks:
            if sink in self._states:
                self._states[sink].last_commit = now

    # --- between batches ------------------------------------------------------------------------

    def step(self, *, may_commit: bool = True, may_vacuum: bool = True) -> None:
        """Maintenance between batches (see the module): ``may_commit`` false while a table is held,
        ``may_vacuum`` false while an online backfill reads Delta in the background. At most one
        commit or vacuum plan per call, so the stream's next batch waits for one at most."""
        now = self.clock()
        if now - self._polled >= REQUEST_POLL_SECONDS:
            self._polled = now
            self._poll()
        if not may_commit:
            return
        acted = self._collect()
        acted = self._collect_vacuum() or acted
        if self._inflight is None and (self._asked is not None or now - self._checked >= CHECK_SECONDS):
            self._checked = now
            self._start_next(now)
        if may_vacuum and not acted and self._sweep is None:
            self._vacuum_next(now)
        if (self._asked is not None and not self._asked.compact and not self._asked.sweep and self._inflight is None
                and self._sweep is None):
            self._answer()

    def _handles(self, open_controls: bool = False) -> dict[str, DeltaTable]:
        """Open handles of every table maintained: the stream's, then the control tables' (opened
        with ``open_controls`` only: a listing each)."""
        handles = dict(self.tables())
        now = self.clock()
        for sink in handles:
            if sink not in self._states:
                self._states[sink] = _State(TableMaintenance(self.cfg, sink, self.row_key(sink)), now, now, now)
        for name in CONTROL_TABLES:
            key = control_table(name)
            if key not in self._controls and open_controls:
                dt = open_table(_uri(self.cfg, key), self.cfg.sink.storage_options)
                if dt is None:
                    continue
                self._controls[key] = dt
                self._states[key] = _State(TableMaintenance(self.cfg, key, None), now, now, now)
            if key in self._controls:
                if worn(self._controls[key]):  # moved by update_incremental (its compactions and vacuums)
                    self._reopen(key)
                handles[key] = self._controls[key]
        return handles

    def _collect(self) -> bool:
        """Commit the compaction in flight once its files are written (see the module); whether
        anything was tried."""
        if self._inflight is None or not self._inflight[1].done():
            return False
        job, future = self._inflight
        self._inflight = None
        state = self._states.get(job.sink)
        try:
            done = future.result()
        except Exception as e:  # noqa: BLE001 - the table is compacted again later
            log.warning("%s: compaction failed (%s: %s); tried again in %.0f s", job.sink, type(e).__name__, e,
                        RETRY_SECONDS)
            self._failed(job.sink, f"compaction failed: {type(e).__name__}: {e}")
            return True
        dt = self._handles().get(job.sink)
        if dt is None:  # held, or no longer streamed: not committed
            compaction.discard(done)
            return True
        try:
            if state is not None and state.steps.control:
                dt.update_incremental()  # the control store appends to it through its own handle
            result = compaction.commit(dt, done)
        except Exception as e:  # noqa: BLE001 - a conflict with another writer's commit: compacted again later
            compaction.discard(done)
            log.warning("%s: compaction not committed (%s: %s)", job.sink, type(e).__name__, e)
            self._failed(job.sink, f"compaction not committed: {type(e).__name__}: {e}")
            return True
        if result is not None:
            log.info("compacted %s", result.describe())
            self.store.record_maintenance([compaction_row(result)])
            if self._asked is not None and job.sink in self._asked.compact:
                self._asked.done[job.sink] = result  # then vacuumed (_start_next moves it on)
        elif state is not None:
            state.retry_at = self.clock() + CHECK_SECONDS  # planned again from the new version
        return True

    def _failed(self, sink: str, why: str) -> None:
        if sink in self._states:
            self._states[sink].retry_at = self.clock() + RETRY_SECONDS
        asked = self._asked
        if asked is not None and sink in asked.compact:
            asked.compact.remove(sink)
            asked.sweep.append(sink)
            asked.reports.append(TableReport(sink, asked.before.get(sink, 0), asked.before.get(sink, 0), note=why))

    def _start_next(self, now: float) -> None:
        """Plan the next compaction due and start its rewrite (the asked tables first)."""
        handles = self._handles()
        asked = self._asked
        if asked is not None:
            for sink in list(asked.compact):
                dt = handles.get(sink)
                if dt is None:
                    asked.compact.remove(sink)
                    asked.reports.append(TableReport(sink, 0, 0, note="not written by this stream now "
                                                                        "(held for a schema change, or not captured)"))
                    continue
                self._prepare(sink, dt)
                asked.before.setdefault(sink, len(compaction.table_files(dt).files))
                job = self._states[sink].steps.job(dt, idle_seconds=0.0, interval_due=False, asked=True)
                if job is not None and sink not in asked.done:
                    self._inflight = (job, self._pool.submit(compaction.rewrite, job))
                    return
                asked.compact.remove(sink)
                asked.sweep.append(sink)
        if not self.m.auto:
            return
        interval = self.m.interval_minutes * 60
        open_controls = now - self._controls_checked >= interval
        if open_controls:
            self._controls_checked = now
        handles = list(self._handles(open_controls).items())
        start = self._next_check % len(handles) if handles else 0
        reads = 0
        for i in range(len(handles)):
            sink, dt = handles[(start + i) % len(handles)]
            state = self._states[sink]
            if now < state.retry_at:
                continue
            interval_due = now - state.last_interval >= interval
            if state.steps.control:
                if not interval_due:
                    continue  # looked at once per interval, read anew then: the control store writes them
                dt.update_incremental()
            if not state.steps.fresh(dt):
                if reads == CHECK_READS:
                    self._next_check = start + i  # this one first at the next look
                    return
                reads += 1
            self._prepare(sink, dt)
            if interval_due:
                state.last_interval = now
            job = state.steps.job(dt, idle_seconds=now - state.last_commit, interval_due=interval_due, asked=False)
            if job is not None:
                self._inflight = (job, self._pool.submit(compaction.rewrite, job))
                self._next_check = start + i + 1
                return
        self._next_check = start

    def _prepare(self, sink: str, dt: DeltaTable) -> None:
        state = self._states[sink]
        if not state.prepared:
            state.prepared = True
            try:
                state.steps.prepare(dt)
            except Exception as e:  # noqa: BLE001 - the table works without them; named in the log
                log.warning("%s: table properties not set: %s: %s", sink, type(e).__name__, e)

    def _vacuum_next(self, now: float) -> None:
        """Plan the vacuum of one table that is due and start its deletes: an asked one once
        compacted, else one whose interval passed."""
        busy = self._inflight[0].sink if self._inflight is not None else None
        handles = self._handles()
        asked = self._asked
        if asked is not None and asked.sweep:
            sink = asked.sweep.pop(0)
            dt = handles.get(sink)
            if dt is not None:
                self._start_vacuum(sink, dt, "asked")
            return
        if not self.m.auto:
            return
        interval = self.m.interval_minutes * 60
        for sink, dt in handles.items():
            state = self._states[sink]
            if sink != busy and now - state.last_vacuum >= interval and now >= state.retry_at:
                self._start_vacuum(sink, dt, "maintenance interval")
                return

    def _start_vacuum(self, sink: str, dt: DeltaTable, reason: str) -> None:
        state = self._states[sink]
        state.last_vacuum = self.clock()
        try:
            if state.steps.control:
                dt.update_incremental()
            planned = state.steps.vacuum_plan(dt)
        except Exception as e:  # noqa: BLE001 - vacuumed again at the next interval
            self._vacuum_failed(sink, reason, e)
            return
        self._sweep = _Sweep(planned, reason, self._sweeper.submit(vacuum.sweep, planned, self._stop))

    def _collect_vacuum(self) -> bool:
        """Record the vacuum in flight once its deletes are done and reopen its table's handles;
        whether there was one to record."""
        if self._sweep is None or not self._sweep.future.done():
            return False
        sweep, self._sweep = self._sweep, None
        sink = sweep.plan.sink
        try:
            swept = sweep.future.result()
        except Exception as e:  # noqa: BLE001 - vacuumed again at the next interval
            self._vacuum_failed(sink, sweep.reason, e)
            return True
        if swept.files_deleted:
            log.info("vacuumed %s", swept.describe())
        dt = self._handles().get(sink)
        if dt is not None:
            try:
                self._states[sink].steps.record_vacuum(dt, swept)
            except Exception as e:  # noqa: BLE001 - the files are gone; the run is recorded below
                log.warning("%s: vacuum not recorded in its log (%s: %s)", sink, type(e).__name__, e)
        self.store.record_maintenance([vacuum_row(swept, sweep.reason)])
        self._reopen(sink)
        self._vacuumed(sink, sweep.reason, swept)
        return True

    def _vacuum_failed(self, sink: str, reason: str, e: Exception) -> None:
        log.warning("%s: vacuum failed (%s: %s)", sink, type(e).__name__, e)
        self._states[sink].retry_at = self.clock() + RETRY_SECONDS
        self._vacuumed(sink, reason, None)

    def _vacuumed(self, sink: str, reason: str, swept: vacuum.VacuumResult | None) -> None:
        """An asked table's vacuum is over (``swept``: what it did, None: it failed): its report."""
        asked = self._asked
        dt = self._handles().get(sink) if asked is not None and reason == "asked" else None
        if dt is not None:
            asked.reports.append(_report(sink, asked.before.get(sink, 0), len(compaction.table_files(dt).files),
                                         asked.done.get(sink), swept))

    def _reopen(self, sink: str) -> None:
        """Reopen a vacuumed table's handles from the checkpoint the vacuum wrote: a handle kept
        for the stream's life grows with every commit it has seen (the stream's RSS grew ~13 KiB
        per commit of each table before this, bench/maintenance.py --only rss)."""
        if sink in self._controls:
            fresh = open_table(_uri(self.cfg, sink), self.cfg.sink.storage_options)
            if fresh is not None:
                self._controls[sink] = fresh
            self.store.reopen(sink.removeprefix("_binlake/"))
        elif self.reopen is not None:
            self.reopen(sink)

    # --- requests -------------------------------------------------------------------------------

    def _poll(self) -> None:
        """Take the oldest `binlake maintain` request, if none is being carried out."""
        if self._asked is not None:
            return
        try:
            waiting = requests.pending(self.store)
        except Exception as e:  # noqa: BLE001 - read again at the next poll
            log.warning("maintenance requests not readable: %s", e)
            return
        if not waiting:
            return
        req = waiting[0]
        tables = list(self._handles(open_controls=True)) if req.table is None else [req.table]
        self._asked = _Asked(req, tables, [])
        log.info("maintenance requested (%s): %s", req.id, req.table or "every table")

    def _answer(self) -> None:
        asked, self._asked = self._asked, None
        report = MaintenanceReport(tuple(asked.reports), "the running stream")
        requests.answer(self.store, asked.request, RequestState.DONE, report.to_json())
        log.info("maintenance request %s done: %s", asked.request.id,
                 json.dumps([r.table for r in report.tables]))
