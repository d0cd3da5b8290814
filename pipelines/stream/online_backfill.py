"""The stream engine's online backfill part: requests taken from ``_binlake/``, chunks read
between watermarks between micro-batches, merged when the stream reaches their high
watermark (the algorithm and its invariants: cdc_core/chunks/incremental.py).

Read groups (one chunk, or several read in the background, several chunks at once in
threads of this process or on Spark: pipelines/backfill/reads.py) are
in flight for the oldest active request: one, or for a large request up to ``GROUPS_IN_FLIGHT``
(the next group is read while the one before waits for its high watermark and merges). The
engine asks, this part answers; it never commits itself. The engine calls:
- ``poll()`` and ``step()`` between batches: new, paused and cancelled requests are
  seen, tables needing a backfill get a request, a group read in the background is
  collected, and ``step`` answers with the next group to read (``NextGroup``; none while
  the stream lags, ``LAG_YIELD_SECONDS``). The engine commits its open batch first when the
  group says ``flush`` (Delta's rows of its range are read exactly as of the stream's
  position, cdc_core/chunks/incremental.py), then calls ``start()``: one chunk read at once
  in this process, or several in the background while the stream goes on (each chunk
  between its own watermarks, whichever ends first; the stream's one binlog reader reconciles
  each chunk's window);
- ``on_rows()`` for every row event it applies: keys of the groups' table changed since
  each group's start are touched;
- ``due(record)`` before handling a record, and ``ready()`` between records: once the
  oldest group's rows are known and the stream has applied every change up to their
  highest high watermark and nothing after, the engine commits its batch and calls
  ``merge()``, which makes the group's next merge commits for up to ``MERGE_SLICE_SECONDS``,
  the rest next, so the stream's own commits go on between a group's merge commits (each
  exact where the stream then is, cdc_core/chunks/incremental.py).

Invariants of the merge commits:
- One Delta commit holds a run of the oldest group's next chunks, in the plan's order, of
  at most ``source.snapshot.backfill_group_rows`` rows, ``MERGE_COMMIT_ROWS`` and ``MERGE_COMMIT_BYTES``
  (cdc_core/chunks/incremental.py: ``merge_group_size``; at least one chunk), so the stream
  never waits for more than one bounded commit before its next batch; a soft_delete or
  history table merges one chunk per commit. The writes are each chunk's own: its rows
  against the group's touched keys and its own candidates (``merge_writes``, as when each
  chunk had a commit of its own; decided for the run's rows and candidates at once, which
  is the same as the chunks' ranges are disjoint: tests/test_backfill_parts.py), committed
  together (tests/test_backfill.py::test_a_read_group_merges_several_chunks_per_commit).
- The commit's metadata ``binlake.backfill`` names every chunk it holds (``chunks``; ``chunk``
  is the first, docs/contracts.md).
- A merge commit whose call failed is made again only if none of its attempts' commits (each
  with a token of its own in its commit metadata, one per attempt of the whole run of chunks)
  landed: an answer lost by the object store never appends a chunk's rows twice, nor drops
  one, nor writes a ``history`` table's version or a ``soft_delete`` table's tombstone twice
  (tests/test_lake_faults.py -k backfill). The run is the same on every attempt (the
  group's rows and the bounds do not change between them).
- The request's progress is saved after the group's last merge commit: ``chunks_done`` is
  that commit's last chunk + 1, so a restart resumes after the last chunk recorded as
  landed, and a chunk merged but not recorded is read and merged again, never skipped
  (tests/test_backfill.py, the SIGKILL tests).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.batch.table_commit import RowsApplied
from cdc_core.binlog.events import RowsEvent
from cdc_core.chunks.incremental import (
    MERGE_COMMIT_ROWS,
    BackfillRequest,
    BackfillState,
    ChunkMerge,
    chunk_positions,
    clip,
    large,
    merge_group_size,
    merge_writes,
    read_group_size,
)
from cdc_core.chunks.planning import INTEGER_TYPES, Chunk, ChunkKeyError, chunk_key, plan_chunks
from cdc_core.chunks.reader import ChunkReader, ChunkResult
from cdc_core.config import BinlakeConfig
from cdc_core.errors import is_transient
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import StartupError
from cdc_core.retry import Retry, RetryPolicy, fault_line
from cdc_core.schema.history import Status, TableState
from cdc_core.schema.modes import CDC_DELETED, MODE_COLUMNS, TableMode
from cdc_core.schema.output import CDC_OP, CDC_SEQ, delta_name, is_reserved
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import ConnectionSettings, connect
from cdc_core.types.key_order import KeyOrders
from cdc_core.types.mapping import binlog_value
from pipelines.backfill.reads import ChunkTask, GroupReads
from pipelines.backfill.requests import refusal
from pipelines.lake.apply import apply_changes, deduplicate, deletions
from pipelines.lake.conform import conform
from pipelines.lake.control_store import ControlStore
from pipelines.lake.offsets import stream_commit_properties
from pipelines.lake.reads import dataset
from pipelines.lake.tables import delta_schema, refresh, table_uri
from pipelines.lake.versions import apply_history, kept_rows, key_table, tombstones
from pipelines.stream.sinks import Sinks
from pipelines.stream.start import stable_describe
from pipelines.stream.state import EngineState, HistoryRecorder

log = logging.getLogger(__name__)

BACKFILL_KEY = "binlake.backfill"  # commit metadata of a merge: request id, chunks, group, high watermark
POLL_SECONDS = 2.0  # how often the stream looks for new, paused and cancelled requests
READ_ATTEMPTS = 30  # chunk reads failed in a row (not on a fault that passes) before a request fails
# A group's merges go on, one after another, for this long; then the stream reads and commits
# before the next (at its next record): its lag stays bounded, and an idle stream does not wait
# for a heartbeat per chunk.
MERGE_SLICE_SECONDS = 0.5
# Read groups of a large request in flight at once: the next one is read (in the background)
# while the one before waits for its high watermark and merges, so reads and merges overlap.
GROUPS_IN_FLIGHT = 2
# The stream first: while changes arrive and the last one applied was committed on the source
# this much longer ago than the least such delay seen (the clocks of the source and of this host
# may differ), no read group starts (a group's reads take CPU and the GIL from the stream, so a
# backfill could push the stream's lag up without bound on a busy host); past the second limit
# without a group started, one starts anyway, so a backfill goes on behind a stream that never
# catches up. Meanwhile the local runner reads one chunk at a time (pipelines/backfill/reads.py).
LAG_YIELD_SECONDS = 2.0
YIELD_AT_MOST_SECONDS = 10.0


@dataclass
class InFlight:
    """A read group: consecutive chunks of a request read (or being read on Spark) and not
    yet merged. Keys changed after ``since`` are touched, for every chunk of the group."""

    request: BackfillRequest
    schema: TableSchema  # the columns it was read with
    chunks: tuple[Chunk, ...]
    since: BinlogPosition  # the stream's position when the group's read started (cdc_core/chunks/incremental.py's S)
    started: float  # time.monotonic() then
    merge: ChunkMerge = field(default_factory=ChunkMerge)
    results: list[ChunkResult] | None = None  # the rows and watermarks of each chunk not merged yet, once read
    reading: Future | None = None  # the read of the group (on Spark, or in a thread here), until collected
    scanning: Future | None = None  # Delta's rows of its range as of ``since`` (a thread here), until collected
    on_spark: bool = False
    read_seconds: float = 0.0  # its candidates and its SELECTs, until the rows were here
    high_watermark: BinlogPosition | None = None  # the highest of its chunks': where it may merge
    applied: int = 0  # rows its merges so far wrote (recorded with the request's progress after the last)
    merge_seconds: float = 0.0

    @property
    def table(self) -> str:
        return self.request.table

    def describe(self) -> str:
        return _describe(self.chunks)


@dataclass
class Candidates:
    """Delta's rows in a chunk's range (cdc_core/chunks/incremental.py), in Delta's column names: with
    ``columns``, exactly as of the read (an integer chunk key); else the row key's columns of
    the keys found when the request started or resumed."""

    rows: pa.Table | None = None  # None: none known (Delta lacks a key column)
    columns: tuple[str, ...] | None = None  # exact: the columns compared with the chunk's


@dataclass(frozen=True)
class NextGroup:
    """The read group to start now: ``request``'s chunks from index ``first`` on. ``flush``:
    Delta's rows of its range are scanned at its start, exactly as of the stream's position,
    so the engine commits its open batch before :meth:`Backfills.start` (an integer chunk key;
    cdc_core/chunks/incremental.py). ``ahead``: read while the group before waits for its merges."""

    request: BackfillRequest
    first: int
    flush: bool
    ahead: bool = False


class Backfills:
    """Backfill requests worked on by the stream engine (see the module docstring)."""

    def __init__(self, cfg: BinlakeConfig, state: EngineState, sinks: Sinks, store: ControlStore,
                 recorder: HistoryRecorder, router, key_orders: KeyOrders, conn: ConnectionSettings,
                 policy: RetryPolicy | None = None):
        self.cfg = cfg
        self.state = state
        self.sinks = sinks
        self.store = store
        self.recorder = recorder
        self.router = router
        self.key_orders = key_orders
        self.conn = conn
        self.requests: list[BackfillRequest] = []
        self.inflight: list[InFlight] = []  # read groups of one request, in the plan's order
        self._candidates: dict[str, dict[int, Candidates]] = {}  # request id -> chunk index -> Delta's keys
        self._control = None  # pymysql connection for watermarks, made on first use
        self._reads = GroupReads(cfg)  # Spark (its runner only) started by the first large request
        # Delta's rows of a group's range, read from a snapshot of the table taken at the group's
        # start, while its chunks are read: the stream thread only lists the files.
        self._scans = ThreadPoolExecutor(1, thread_name_prefix="backfill-scan")
        self._polled = 0.0
        # Merge commits that failed (request id, index of their first chunk): the table's version
        # before the first attempt, and each attempt's token, to find one that landed although its
        # call failed.
        self._attempts: dict[tuple[str, int], tuple[int, list[str]]] = {}
        self._cascaded: dict[str, str] = {}  # child table -> why it needs a backfill (cdc_core/source/foreign_keys.py)
        self._failures = 0  # reads failed in a row on errors that do not pass
        self._retry = Retry(policy or RetryPolicy())  # reads failing on faults that pass
        self._retry_at = 0.0
        self._group_started = 0.0  # time.monotonic() when the last read group started
        self._least_delay = float("inf")  # of the changes applied: host clock minus their commit time

    def close(self) -> None:
        self._drop_control()
        self._reads.close()
        self._scans.shutdown(wait=True, cancel_futures=True)

    def _drop_control(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    @property
    def busy(self) -> bool:
        """Whether a request is waiting or running (``stream --until now`` finishes them first)."""
        return any(r.active for r in self.requests)

    # --- requests ----------------------------------------------------------------------------------

    def poll(self, force: bool = False) -> None:
        """Read the requests again (at most every ``POLL_SECONDS``); request a backfill of every
        table that needs one; drop the chunk in flight if its request was paused or cancelled."""
        now = time.monotonic()
        if not force and now - self._polled < POLL_SECONDS:
            return
        self._polled = now
        self.requests = self.store.backfills()
        self.save_cascades()
        open_tables = {r.table for r in self.requests if not r.state.terminal}
        for name, t in sorted(self.state.tables.items()):
            if t.needs_backfill and name not in open_tables and self.cfg.source.captures(name) \
                    and not self._declined(name):
                req = BackfillRequest.new(name, reason="needed").next()
                self.store.save_backfill(req)
                self.requests.append(req)
                log.warning("%s needs a backfill: requested (%s)", name, req.id)
        if self.inflight and not any(r.id == self.inflight[0].request.id and r.active for r in self.requests):
            for f in self.inflight:
                log.info("backfill %s of %s: paused or cancelled, %s dropped", f.request.id, f.table, f.describe())
                if f.reading is not None:
                    self._reads.cancel()
            self.inflight = []

    def cascaded(self, child: str, why: str) -> None:
        """A parent row change may have changed rows of ``child`` the binlog does not show
        (cdc_core/source/foreign_keys.py): a backfill is requested by :meth:`save_cascades`."""
        self._cascaded.setdefault(child, why)

    def save_cascades(self) -> None:
        """Request a backfill of each child a cascade touched, unless one is waiting (it reads
        the table after the cascade); called before the checkpoint passes the cascade."""
        for child, why in sorted(self._cascaded.items()):
            if any(r.table == child and r.state == BackfillState.PENDING for r in self.requests):
                continue
            req = BackfillRequest.new(child, reason="cascade").next()
            self.store.save_backfill(req)
            self.requests.append(req)
            log.warning("%s: %s, which MySQL does not write to the binlog; backfill %s requested", child, why, req.id)
        self._cascaded.clear()

    def _declined(self, name: str) -> bool:
        """The table's latest request was cancelled (the user chose not to backfill it) or failed
        (its error says why): not requested again until the user does."""
        mine = [r for r in self.requests if r.table == name]
        return bool(mine) and mine[-1].state in (BackfillState.CANCELLED, BackfillState.FAILED)

    def _save(self, req: BackfillRequest) -> BackfillRequest:
        self.store.save_backfill(req)
        self.requests = [req if r.id == req.id else r for r in self.requests]
        return req

    def _fail(self, req: BackfillRequest, why: str) -> None:
        log.error("backfill %s of %s failed: %s", req.id, req.table, why)
        self._save(req.next(state=BackfillState.FAILED, detail=why))
        self._candidates.pop(req.id, None)
        self._failures = 0
        self._retry.succeeded()

    # --- reading ---------------------------------------------------------------------------------

    def step(self, streaming: bool = False) -> NextGroup | None:
        """Between batches: collect the group read in the background; the next group to read
        when none is in flight, or, for a large request, when the groups in flight are read and
        fewer than ``GROUPS_IN_FLIGHT``; none while the stream is behind (``streaming``: changes
        arrived last time, see ``LAG_YIELD_SECONDS``)."""
        s = self.state
        if s.holds or time.monotonic() < self._retry_at:
            return None
        behind = lagging = False
        if streaming and s.event_time:
            delay = time.time() - s.event_time
            self._least_delay = min(self._least_delay, delay)
            lagging = delay - self._least_delay > LAG_YIELD_SECONDS
            behind = lagging and time.monotonic() - self._group_started < YIELD_AT_MOST_SECONDS
        self._reads.behind = lagging  # the local runner then reads one chunk at a time
        req = self.inflight[0].request if self.inflight else next((r for r in self.requests if r.active), None)
        if req is None:
            return None
        try:
            reading = next((f for f in self.inflight if f.results is None), None)
            if reading is not None:
                self._collect(reading)
                if reading.results is None:
                    return None
            if behind:
                return None
            if self.inflight:  # read ahead: the next group is read while this one waits and merges
                after = self.inflight[-1].chunks[-1].index + 1
                if len(self.inflight) < GROUPS_IN_FLIGHT and after < len(req.chunks) \
                        and large(len(req.chunks), self.cfg.source.snapshot.backfill_spark_min_chunks):
                    return self._next(req, after, ahead=True)
                return None
            if req.state == BackfillState.PENDING:
                req = self._begin(req)
                if req is None or req.state == BackfillState.DONE:
                    return None
            if req.chunks_done >= len(req.chunks):  # planned empty, stopped before it was marked done
                self._save(req.next(state=BackfillState.DONE))
                return None
            return self._next(req, req.chunks_done)
        except Exception as e:  # noqa: BLE001 - classified in _read_failed
            self._read_failed(req, e)
        return None

    def start(self, group: NextGroup) -> None:
        """Start reading ``group`` (the engine committed its open batch first if ``group.flush``)."""
        try:
            self._read_next(group)
        except Exception as e:  # noqa: BLE001 - classified in _read_failed
            self._read_failed(group.request, e)

    def _next(self, req: BackfillRequest, first: int, ahead: bool = False) -> NextGroup:
        schema = self.state.tables[req.table].schema
        return NextGroup(req, first, schema.column(req.chunks[first].key).data_type in INTEGER_TYPES, ahead)

    def _read_failed(self, req: BackfillRequest, e: Exception) -> None:
        """A request whose table cannot be backfilled fails; a read that fails on a fault that
        passes is tried again with the stream's backoff until its retry budget is spent, one that
        fails otherwise up to ``READ_ATTEMPTS`` times in a row."""
        if isinstance(e, (StartupError, ChunkKeyError)):
            self._fail(req, str(e))
            return
        # Its group (the last: one is read at a time), read again; the groups before it are read.
        self.inflight = [f for f in self.inflight if f.results is not None]
        if is_transient(e):
            self._drop_control()
            cause, delay = fault_line(e), self._retry.next_delay()
            if delay is None:
                self._fail(req, f"the source kept failing for over {self._retry.policy.budget_seconds:.0f} s: {cause}")
                return
        else:
            self._failures += 1
            cause, delay = f"{type(e).__name__}: {e}", min(0.2 * self._failures, 5.0)
            if self._failures >= READ_ATTEMPTS:
                self._fail(req, cause)
                return
        log.warning("backfill %s of %s: reading failed (%s); again in %.1f s", req.id, req.table, cause, delay)
        self._retry_at = time.monotonic() + delay

    def _begin(self, req: BackfillRequest) -> BackfillRequest | None:
        """Take a pending request: the table starts streaming if it did not (its baseline),
        its range is planned in chunks, and the plan is recorded."""
        s, name = self.state, req.table
        problem = refusal(self.cfg, name)
        if problem:
            self._fail(req, problem)
            return None
        t = s.tables.get(name)
        with connect(self.conn) as c, c.cursor() as cur:
            if t is None or not t.streamed or t.needs_backfill or t.schema is None:
                # Described at a binlog position E with no DDL around it; its changes up to E are
                # not applied (every chunk is read after E): see cdc_core/chunks/incremental.py.
                at, schemas = stable_describe(self.conn, self.cfg.source.server_id + 1, cur, [name], self.cfg.source)
                schema = schemas.get(name)
                problem = refusal(self.cfg, name, schema, described=True)
                if problem:
                    self._fail(req, problem)
                    return None
                self.recorder.entry(name, at, 0, "baseline", Status.BASELINE, schema=schema,
                                    description="schema at backfill start", detail=f"backfill {req.id}")
                s.tables[name] = TableState(name, schema, at, streamed=True)
                s.set_schema(name, schema)
                self.sinks.open(name, schema, s.streamed())
            schema = s.tables[name].schema
            key = chunk_key(schema, self.cfg.source.snapshot.chunk_key_columns)
            plan = plan_chunks(cur, schema, key, self.cfg.source.snapshot.chunk_size)
        chunks = self._restrict(schema, plan, req)
        req = self._save(req.next(state=BackfillState.RUNNING, chunks=tuple(chunks),
                                  detail=f"{len(chunks)} chunks on {key}"))
        log.info("backfill %s of %s (%s): %d chunks", req.id, name, req.describe_range(), len(chunks))
        if not chunks:
            req = self._save(req.next(state=BackfillState.DONE))
        return req

    def _restrict(self, schema: TableSchema, plan, req: BackfillRequest):
        """The plan's chunks holding ``[req.lo, req.hi)``, clipped to it."""
        if req.whole_table:
            return plan
        part = self._order(schema, plan[0].key).partition([c.lo for c in plan[1:]])
        first = part.locate([req.lo])[0] if req.lo is not None else 0
        last = part.locate([req.hi])[0] if req.hi is not None else len(plan) - 1
        return clip(plan, first, last, req.lo, req.hi)

    def _order(self, schema: TableSchema, key: str):
        return self.key_orders.for_column(schema.column(key))

    def _read_next(self, group: NextGroup) -> None:
        """Start ``group``'s read (cdc_core/chunks/incremental.py): for a large request several
        chunks, read while the stream goes on (several at once in threads here with the local
        runner; else on Spark once it is up, in a thread here until then); else one chunk, read
        here and now."""
        s, req, first = self.state, group.request, group.first
        schema = s.tables[req.table].schema
        pending = req.chunks[first:]
        min_chunks = self.cfg.source.snapshot.backfill_spark_min_chunks
        big = large(len(req.chunks), min_chunks)
        slots = self._reads.slots() if big else None  # Spark is started for large requests only
        snap = self.cfg.source.snapshot
        chunks = tuple(pending[:read_group_size(len(req.chunks), len(pending), slots, min_chunks, snap.chunk_size,
                                                snap.backfill_group_rows)])
        started = self._group_started = time.monotonic()
        scan = None
        if group.flush:
            # Delta's rows of the group's range, in one scan (Python's order is the server's),
            # exactly as of now: the engine committed the open batch first (cdc_core/chunks/incremental.py).
            scan = self._rows_in(req, schema, chunks)
        elif req.id not in self._candidates:
            self._candidates[req.id] = self._find_candidates(req, schema)
        f = InFlight(req, schema, chunks, s.position, started, on_spark=slots is not None and not self._reads.local)
        if big:
            if scan is not None:
                f.scanning = self._scans.submit(scan)
            f.reading = self._reads.submit([ChunkTask(self.conn, self.cfg.source.server_id + 1, schema, c,
                                                      s.position.base) for c in chunks], f.on_spark)
            self.inflight.append(f)  # keys are touched from now on, while the group is read
            log.info("backfill %s of %s: %s of %d being read %s", req.id, req.table, f.describe(), len(req.chunks),
                     "on Spark" if f.on_spark else f"{slots} at a time" if slots else "in the background")
            return
        if self._control is None:
            self._control = connect(self.conn)
        reader = ChunkReader.bulk(self.conn, self._control, schema, self.cfg.source.server_id + 1,
                                  base=s.position.base)
        if scan is not None:
            self._candidates.setdefault(req.id, {}).update(scan())
        self._read(f, [reader.select(schema, chunks[0])])
        self.inflight.append(f)

    def _collect(self, f: InFlight) -> None:
        """The rows of a group read in the background, and Delta's rows of its range, once they
        are here (a failure raised)."""
        if f.reading.done() and (f.scanning is None or f.scanning.done()):
            if f.scanning is not None:
                self._candidates.setdefault(f.request.id, {}).update(f.scanning.result())
                f.scanning = None
            self._read(f, f.reading.result())

    def _read(self, f: InFlight, results: list[ChunkResult]) -> None:
        f.results, f.reading, f.read_seconds = results, None, time.monotonic() - f.started
        f.high_watermark = max(r.high_watermark for r in results)
        self._failures = 0
        self._retry.succeeded()
        log.info("backfill %s of %s: %s/%d read (%d rows) between %s and %s", f.request.id, f.table,
                 f.describe(), len(f.request.chunks), sum(r.table.num_rows for r in results),
                 min(r.low_watermark for r in results), f.high_watermark)

    def _delta_columns(self, req: BackfillRequest, schema: TableSchema):
        """The Delta table of ``req`` (refreshed) and Delta's names of the row key and chunk key."""
        dt = self.sinks.tables.get(self.router.sink(req.table)) or self.sinks.open(req.table, schema,
                                                                                    self.state.streamed())
        refresh(dt)
        names = delta_schema(dt).names
        wanted = list(dict.fromkeys([*schema.row_key, req.chunks[0].key]))
        return dt, wanted, [delta_name(names, k) for k in wanted]

    def _rows_in(self, req: BackfillRequest, schema: TableSchema,
                 chunks: tuple[Chunk, ...]) -> Callable[[], dict[int, Candidates]]:
        """Delta's rows in the range of ``chunks`` (consecutive, of an integer chunk key) as of
        now, by chunk index and row key: one scan of the whole range, split per chunk. Returns
        the scan, to run here or in another thread: it reads the table's files as of now (the
        dataset lists them here), whatever the stream commits meanwhile."""
        dt, wanted, cols = self._delta_columns(req, schema)
        if any(c is None for c in cols):
            return lambda: {}  # no candidates known
        span = Chunk.span(list(chunks))
        ckey = cols[wanted.index(span.key)]
        column = pc.field(ckey)
        cond = None
        for bound in (span.lo is not None and column >= span.lo, span.hi is not None and column < span.hi):
            if bound is not False:
                cond = bound if cond is None else cond & bound
        rows = dataset(dt)

        def scan() -> dict[int, Candidates]:
            data = rows.to_table(filter=cond)
            # Compared with the chunk's rows: the source's columns (and a route's _cdc_source).
            columns = tuple(n for n in data.column_names if n not in (CDC_OP, CDC_SEQ) and n not in MODE_COLUMNS)
            places = chunk_positions(data.column(ckey).to_numpy(), chunks)
            return {c.index: Candidates(data.select(columns).filter(pa.array(places == i)), columns)
                    for i, c in enumerate(chunks)}
        return scan

    def _find_candidates(self, req: BackfillRequest, schema: TableSchema) -> dict[int, Candidates]:
        """Row keys Delta holds in each chunk of ``req`` not merged yet (cdc_core/chunks/incremental.py)."""
        dt, wanted, cols = self._delta_columns(req, schema)
        ckey = req.chunks[0].key
        if any(c is None for c in cols):
            return {}
        data = dataset(dt).to_table(columns=cols)
        keys = data.select([cols[wanted.index(k)] for k in schema.row_key])
        pending = req.chunks[req.chunks_done:]
        bounds = ([pending[0].lo] if pending[0].lo is not None else []) + [c.lo for c in pending[1:]] + \
            ([pending[-1].hi] if pending[-1].hi is not None else [])
        offset = 1 if pending[0].lo is not None else 0
        ranks = self.key_orders.locator(schema.column(ckey), bounds)(data.column(cols[wanted.index(ckey)]).to_pylist())
        places = np.asarray(ranks, dtype=np.int64) - offset
        return {c.index: Candidates(keys.filter(pa.array(places == i))) for i, c in enumerate(pending)}

    # --- the stream's side ---------------------------------------------------------------------------

    def on_rows(self, name: str, schema: TableSchema, ev: RowsEvent) -> None:
        """A row event the stream applies: keys of the groups' table changed after a group's start
        are touched for it (every event the stream applies before the merge: none past the
        merge's position, cdc_core/chunks/incremental.py)."""
        groups = [f for f in self.inflight if name == f.table and ev.position > f.since]
        if not groups:
            return
        names = [c.name.lower() for c in schema.columns]  # the event's columns, in its layout's order
        idx = [names.index(k.lower()) for k in groups[0].schema.row_key]
        cols = [schema.columns[i] for i in idx]
        images = [img for r in ev.rows for img in (r if ev.op == "u" else (r,))]
        keys = {tuple(binlog_value(c, img[i]) for c, i in zip(cols, idx)) for img in images}
        for f in groups:
            f.merge.touched.update(keys)

    def due(self, rec) -> bool:
        """Whether the oldest group's rows are here and ``rec`` shows the stream has read
        everything up to their highest high watermark."""
        f = self.inflight[0] if self.inflight else None
        return f is not None and f.results is not None and self.state.passed(rec, f.high_watermark)

    def ready(self) -> bool:
        """Between records: whether the oldest group's rows are here and the stream, between
        transactions, has applied every change up to their highest high watermark (an idle
        stream merges at once instead of at its next heartbeat)."""
        f, s = self.inflight[0] if self.inflight else None, self.state
        return (f is not None and f.results is not None and s.resume == s.position
                and s.position >= f.high_watermark)

    def merge(self) -> None:
        """The oldest group's next chunks (in the plan's order, for up to ``MERGE_SLICE_SECONDS``)
        merged where the stream is (the engine committed every change up to it, at or past the
        group's high watermark): a bounded run of chunks per Delta commit (see the module
        docstring), then, after the last, the request's progress. The group stays in flight
        until its last chunk."""
        f = self.inflight[0]
        s = self.state
        t = s.tables.get(f.table)
        if t is None or not t.streamed or t.schema != f.schema or s.holds:
            log.info("backfill %s of %s: the table changed under %s; reading it again", f.request.id, f.table,
                     f.describe())
            if any(g.reading is not None for g in self.inflight):
                self._reads.cancel()
            self.inflight = []  # the groups after it too: read with the same columns, merged after it
            self._attempts.clear()  # read again: their merges are computed from the table as it is
            return
        until = time.monotonic() + MERGE_SLICE_SECONDS
        while f.results and time.monotonic() < until:  # at least one: until is ahead
            run = f.results[:self._run_size(f)]
            # Dropped once merged: a merge that fails is made again (a merge may be repeated), never
            # skipped by the progress of a later one.
            self._merge_run(f, run, last=len(run) == len(f.results))
            del f.results[:len(run)]
            for r in run:
                self._candidates.get(f.request.id, {}).pop(r.chunk.index, None)
            if not f.results:
                self.inflight.pop(0)

    def _run_size(self, f: InFlight) -> int:
        """How many of ``f``'s next chunks merge in one commit (the module docstring): the same
        on every attempt, as the group's rows are."""
        if self.sinks.columns(self.router.sink(f.table)).mode is not TableMode.CURRENT:
            return 1
        return merge_group_size([r.table.num_rows for r in f.results], [r.table.nbytes for r in f.results],
                                min(self.cfg.source.snapshot.backfill_group_rows, MERGE_COMMIT_ROWS))

    def _merge_run(self, f: InFlight, run: list[ChunkResult], last: bool) -> None:
        """Merge a run of ``f``'s chunks in one commit; after the group's ``last``, save the
        request's progress."""
        merging = time.monotonic()
        req = next(r for r in self.requests if r.id == f.request.id)
        applied = self._write_merge(f, req, run)
        f.applied += applied.inserted + applied.updated
        f.merge_seconds += time.monotonic() - merging
        if not last:  # the group's progress is recorded after its last merge (a merge may be repeated)
            return
        done = run[-1].chunk.index + 1  # the plan's chunks merged in order: its index counts those before it
        finished = done == len(req.chunks)
        self._save(req.next(chunks_done=done, rows=req.rows + f.applied,
                            state=BackfillState.DONE if finished else BackfillState.RUNNING,
                            detail=f"{f.describe()}: read {f.read_seconds:.2f} s, merged {f.merge_seconds:.2f} s"))
        if finished:
            self._candidates.pop(req.id, None)
            log.warning("backfill %s of %s (%s) is done", req.id, f.table, req.describe_range())

    def _landed(self, sink: str, before: int, tokens: list[str]) -> set[int]:
        """The chunks of a merge commit made with one of ``tokens`` that is in ``sink`` after
        version ``before`` (none when no such commit landed)."""
        self.sinks.refresh(sink)
        table = self.sinks.tables[sink]
        since = table.version() - before
        for c in table.history(limit=since) if since > 0 else []:
            done = json.loads(c[BACKFILL_KEY]) if BACKFILL_KEY in c else {}
            if done.get("attempt") in tokens:
                return set(done.get("chunks", [done["chunk"]]))
        return set()

    def _write_merge(self, f: InFlight, req: BackfillRequest, run: list[ChunkResult]) -> RowsApplied:
        """The merge of ``run`` (consecutive chunks of ``f``) committed to Delta in one commit
        where the stream is (nothing when their ranges already equal MySQL); what it wrote."""
        sink = self.router.sink(f.table)
        attempt = (req.id, run[0].chunk.index)
        landed = self._landed(sink, *self._attempts[attempt]) if attempt in self._attempts else set()
        if landed:
            del self._attempts[attempt]
            # Its commit landed although the call failed (its answer lost): never appended twice. Only
            # its own chunks are left out (a run read again after it may hold others).
            log.info("backfill %s of %s: chunks %s had been merged", req.id, f.table, sorted(landed))
            run = [r for r in run if r.chunk.index not in landed]
            if not run:
                return RowsApplied()
            attempt = (req.id, run[0].chunk.index)
        target = self.sinks.schemas[sink]
        columns = self.sinks.columns(sink)
        shaped = [self._shaped(f, r, target, columns) for r in run]
        key = tuple(delta_name(target.names, k) or k for k in f.schema.row_key)
        keys = shaped[0].select(list(key)).schema
        # The stream's touched keys are the source's values: typed as the chunks', then as Delta's.
        touched = f.merge.keys(run[0].table.select(list(f.schema.row_key)).schema) \
            .rename_columns(list(key)).cast(keys)
        found = [self._candidates.get(req.id, {}).get(r.chunk.index) or Candidates() for r in run]
        held = [c.rows if c.rows is not None else keys.empty_table() for c in found]
        before, tokens = self._attempts.get(attempt, (self.sinks.tables[sink].version(), []))
        token = uuid.uuid4().hex
        self._attempts[attempt] = (before, [*tokens, token])
        if columns.mode is not TableMode.CURRENT:  # one chunk per commit (see _run_size)
            applied = self._write_kept(f, req, run[0], shaped[0], key, touched, held[0].select(list(key)), columns,
                                       token)
            del self._attempts[attempt]
            return applied
        if all(len(set(v)) == 1 for v in ([c.columns for c in found], [t.schema for t in shaped],
                                           [t.schema for t in held])):
            # The chunks' ranges are disjoint (a key of one chunk's rows or candidates is in no other
            # chunk's), so one decision over the run's rows and candidates is each chunk's decision,
            # together (tests/test_backfill_parts.py): one set of joins per commit, not per chunk.
            shaped, held = [pa.concat_tables(shaped)], [pa.concat_tables(held)]
        # Each chunk decided as alone (its rows, its candidates), the writes of all committed together.
        writes = [merge_writes(rows, key, touched, h, c.columns) for rows, h, c in zip(shaped, held, found)]
        append = pa.concat_tables([rows.take(w.append) for rows, w in zip(shaped, writes)])
        upsert = pa.concat_tables([rows.take(w.upsert) for rows, w in zip(shaped, writes)])
        deletes, twice = (_key_tuples([w.delete for w in writes], key), _key_tuples([w.twice for w in writes], key))
        delete = deletions(target, key, deletes)
        props = self._merge_properties(f, req, [r.chunk for r in run], append.num_rows, upsert.num_rows,
                                       len(deletes), token)
        if twice:  # first one copy of each: a MERGE would update every copy alike (no token: it is no merge)
            deduplicate(self.sinks.tables[sink], key, twice,
                        self._merge_properties(f, req, [r.chunk for r in run], 0, 0, 0))
        if append.num_rows or upsert.num_rows or delete.num_rows:
            applied = apply_changes(self.sinks.tables[sink], key, append, upsert, delete, props,
                                    table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options)
        else:  # the ranges already equal MySQL: nothing to commit
            applied = RowsApplied()
        del self._attempts[attempt]
        log.info("backfill %s of %s: %s merged (%d appended, %d upserted, %d deleted, %d keys left to the "
                 "stream)", req.id, f.table, _describe([r.chunk for r in run]), append.num_rows, upsert.num_rows,
                 len(deletes), len(f.merge.touched))
        return applied

    def _shaped(self, f: InFlight, result: ChunkResult, target: pa.Schema, columns) -> pa.Table:
        """A chunk's rows in Delta's shape (with the read columns where the table's mode has them)."""
        rows = result.table
        if not columns.plain:  # rows read at the chunk's high watermark (cdc_core/schema/modes.py)
            rows = columns.with_read_columns(rows, result.high_watermark, int(result.read_at * 1_000_000))
        return conform(rows, target, f.table, f.schema.row_key)

    def _merge_properties(self, f: InFlight, req: BackfillRequest, chunks: list[Chunk], appended: int,
                          upserted: int, deleted: int, attempt: str | None = None):
        """A merge commit's properties: the stream's offset and what the merge of ``chunks`` did
        (``binlake.backfill``), with the token of this ``attempt`` where its commit is checked for
        before it is made again."""
        done = {"id": req.id, "table": f.table, "chunk": chunks[0].index, "chunks": [c.index for c in chunks],
                "high_watermark": f.high_watermark.to_dict(),
                "group": f.chunks[0].index, "group_chunks": len(f.chunks), "on_spark": f.on_spark,
                "appended": appended, "upserted": upserted, "deleted": deleted,
                "left_to_stream": len(f.merge.touched), "read_seconds": round(f.read_seconds, 3), "attempt": attempt}
        marker = {BACKFILL_KEY: json.dumps(done)}
        return stream_commit_properties(self.cfg.pipeline.name, self.state.offset, marker)

    def _write_kept(self, f: InFlight, req: BackfillRequest, result: ChunkResult, shaped: pa.Table,
                    key: tuple[str, ...], touched: pa.Table, candidates: pa.Table, columns,
                    token: str) -> RowsApplied:
        """The merge of a soft_delete or history table (docs/history.md, "Backfills"): Delta's live
        rows (current versions) of the chunk's keys and candidates, read now (every change up to
        here committed, so exact for every untouched key), compared with the chunk's. A key MySQL
        lacks becomes a tombstone (its version is closed); a key it holds that differs, or that
        Delta lacks or holds as a tombstone, is written (a new version, ``_cdc_op`` 'r'); an
        untouched tombstone of a key MySQL lacks is left as it is. Committed with the attempt's
        ``token``, as a ``current`` table's merge."""
        sink = self.router.sink(f.table)
        dt, target = self.sinks.tables[sink], self.sinks.schemas[sink]
        held = kept_rows(dt, key, pa.concat_tables([shaped.select(list(key)), candidates.cast(shaped.select(list(key))
                                                                                              .schema)]), columns)
        compare = tuple(n for n in target.names if not is_reserved(n))
        tombs = held.filter(pc.fill_null(held.column(CDC_DELETED), False)) if columns.soft else held.slice(0, 0)
        live = held.filter(pc.invert(pc.fill_null(held.column(CDC_DELETED), False))) if columns.soft else held
        w = merge_writes(shaped, key, touched, live, compare)
        gone = live.join(w.delete, list(key), join_type="left semi") if w.delete.num_rows else live.slice(0, 0)
        hw, read_at = result.high_watermark, int(result.read_at * 1_000_000)
        props = self._merge_properties(f, req, [result.chunk], len(w.append), len(w.upsert), gone.num_rows, token)
        uri, options = table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options
        log.info("backfill %s of %s: chunk %d merging (%d written, %d ended, %d keys left to the stream)", req.id,
                 f.table, result.chunk.index, len(w.append) + len(w.upsert), gone.num_rows, len(f.merge.touched))
        if not (len(w.append) or len(w.upsert) or gone.num_rows):  # the range already equals MySQL
            return RowsApplied()
        if columns.history:
            versions = shaped.take(pa.concat_arrays([w.append, w.upsert]))
            # Every key written or ended, and whether its current version ends (a new key's has none).
            parts = ((shaped.take(w.append), False), (shaped.take(w.upsert), True), (gone, True))
            keys = [(*k, read_at, hw.seq(), ends) for t, ends in parts
                    for k in zip(*(t.column(c).to_pylist() for c in key))]
            return apply_history(dt, key, key_table(key, shaped.schema, keys), versions, props, uri, options)
        new = shaped.take(w.append)
        brought_back = new.join(tombs.select(list(key)), list(key), join_type="left semi")
        append = new.join(tombs.select(list(key)), list(key), join_type="left anti")
        upsert = pa.concat_tables([shaped.take(w.upsert), brought_back.select(target.names),
                                   tombstones(gone, target, hw, read_at)])
        return apply_changes(dt, key, append.select(target.names), upsert, target.empty_table(), props, uri, options)


def _describe(chunks: Sequence[Chunk]) -> str:
    """Consecutive chunks, for the log: "chunk 3" or "chunks 3-12"."""
    first, last = chunks[0].index, chunks[-1].index
    return f"chunk {first}" if first == last else f"chunks {first}-{last}"


def _key_tuples(tables: list[pa.Table], key: tuple[str, ...]) -> list[tuple]:
    """The row keys of ``tables`` (each of the ``key`` columns), as tuples."""
    return [k for t in tables for k in zip(*(t.column(c).to_pylist() for c in key))]
