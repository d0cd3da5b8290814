"""The stream's metrics, served to Prometheus at ``http://<metrics.host>:<metrics.port>/metrics``
while the engine runs (``binlake stream``/``run`` and the Dagster stream job alike; the names
and their meaning: docs/metrics.md).

The engine reports to a ``StreamObserver`` at the points where it already knows something:
a table's first row of a batch, a batch committed (its size, its duration, its changes per
table and op), a checkpoint written, a batch dropped for a reconnect. ``StreamObserver``
itself does nothing (no ``metrics.port``); ``StreamMetrics`` keeps counts. Everything else
(lag, held tables, the reader's queue, backfill progress, the engine's state, the writer
lock's holder) is read from the engine's own state when Prometheus scrapes, in the server's
thread.

Invariants (tests/test_metrics.py, tests/test_metrics_prometheus.py):
- The engine pays per batch, never per row: one dict update per table and op per commit,
  one histogram observation each for size and duration; nothing per row event.
- Every series has the label ``pipeline`` (the pipeline's name). The names
  ``binlake_lag_seconds{table}``, ``binlake_changes_total{table,op}`` and
  ``binlake_last_checkpoint_timestamp_seconds`` are contracts (docs/contracts.md).
- ``binlake_changes_total`` counts the binlog row changes each committed batch covers, per
  source table and op (``insert``/``update``/``delete``), as its Delta commit records them
  (``binlake.stream.changes``), from this process's start.
- Nothing of a row and nothing of the configuration but names (pipeline, tables, the writer
  lock's holder) is served; the endpoint listens on ``metrics.host``, 127.0.0.1 unless set.
- A scrape never changes the engine and never fails because the source or the lake does not
  answer: what cannot be read is left out of that scrape.
"""

from __future__ import annotations

import bisect
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from cdc_core.batch.micro_batch import MicroBatch
from cdc_core.lifecycle import State
from cdc_core.offset.startup import StartupError, binlog_files, lag_bytes
from cdc_core.source.connection import connect
from pipelines.lake.writer_lock import Holder, writer_lock

if TYPE_CHECKING:
    from pipelines.stream.engine import StreamEngine

log = logging.getLogger(__name__)

OP_NAMES = {"c": "insert", "u": "update", "d": "delete"}  # TableBatch.changes' keys → the op label
ROWS_BUCKETS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BINLOG_END_SECONDS = 5.0  # the source's binlog list (lag in bytes) is asked at most this often
HOLDER_SECONDS = 30.0  # the writer lock's holder is read at most this often
SOURCE_TIMEOUT = 3  # seconds to connect to and read from the source during a scrape


class StreamObserver:
    """What the stream engine reports as it goes; this one records nothing (metrics off)."""

    def serve(self) -> None:
        """Start serving (before the engine starts)."""

    def close(self) -> None:
        """Stop serving (the engine ended)."""

    def table_opened(self, table: str, event_time: int) -> None:
        """``table``'s first row change of a batch (or of a held table's rows) was read; its
        binlog time is ``event_time`` (seconds, the source's clock)."""

    def batch_committed(self, batch: MicroBatch, seconds: float) -> None:
        """``batch`` is committed to Delta and checkpointed, in ``seconds``."""

    def checkpointed(self) -> None:
        """A checkpoint was written."""

    def batch_dropped(self) -> None:
        """The open batch and the holds were dropped (a reconnect reads them again)."""


class _Histogram:
    """Cumulative bucket counts and a sum, observed in the engine's thread, read in the server's."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, value)] += 1
            self.sum += value

    def family(self, name: str, doc: str, pipeline: str) -> HistogramMetricFamily:
        with self._lock:
            counts, total = list(self.counts), self.sum
        buckets, running = [], 0
        for bound, n in zip([*map(str, self.bounds), "+Inf"], counts):
            running += n
            buckets.append((bound, running))
        h = HistogramMetricFamily(name, doc, labels=["pipeline"])
        h.add_metric([pipeline], buckets, total)
        return h


class StreamMetrics(StreamObserver):
    """The metrics of one engine: counts kept as the engine reports, the rest read from it at
    each scrape (see the module invariants); a Prometheus collector."""

    def __init__(self, engine: StreamEngine):
        self.engine = engine
        self.pipeline = engine.cfg.pipeline.name
        self.changes: dict[tuple[str, str], int] = {}  # (source table, op) -> changes committed
        self.batch_rows = _Histogram(ROWS_BUCKETS)
        self.commit_seconds = _Histogram(SECONDS_BUCKETS)
        self.pending: dict[str, int] = {}  # table -> binlog time of its oldest change read, not committed
        self.last_checkpoint: float | None = None  # epoch seconds
        self.last_rows = time.monotonic()  # when the last batch with rows was committed
        self.started = time.time()
        self._binlog: tuple[float, list[tuple[str, int]] | None] = (0.0, None)
        self._source = None  # the connection lag in bytes is asked on, kept between scrapes
        self._source_lock = threading.Lock()
        self._holder: tuple[float, Holder | None] = (0.0, None)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- what the engine reports (its thread) ------------------------------------------------------

    def table_opened(self, table: str, event_time: int) -> None:
        self.pending.setdefault(table, event_time)

    def batch_committed(self, batch: MicroBatch, seconds: float) -> None:
        if not batch.tables:  # a checkpoint alone (nothing captured changed): no batch
            return
        for name, tb in batch.tables.items():
            self.pending.pop(name, None)
            for op, n in tb.changes.items():
                if n:
                    key = (name, op)
                    self.changes[key] = self.changes.get(key, 0) + n
        self.batch_rows.observe(batch.rows)
        self.commit_seconds.observe(seconds)
        self.last_rows = time.monotonic()

    def checkpointed(self) -> None:
        self.last_checkpoint = time.time()

    def batch_dropped(self) -> None:
        self.pending.clear()

    # --- the endpoint -------------------------------------------------------------------------------

    def serve(self) -> None:
        """Listen on ``metrics.host:metrics.port`` (a StartupError when it cannot)."""
        m = self.engine.cfg.metrics
        cp = self.engine.store.checkpoint()  # a restart's last checkpoint, until it writes one
        if cp is not None:
            # Nothing was read since it either: a restart on an idle source is idle since then.
            self.last_checkpoint = cp.committed_at.timestamp()
            self.last_rows -= max(0.0, time.time() - self.last_checkpoint)
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "binlake serves /metrics only")
                    return
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # no line per scrape
                pass

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in m.host else socket.AF_INET  # "::" or an IPv6 address
            daemon_threads = True

        try:
            self._server = Server((m.host, m.port), Handler)
        except OSError as e:
            raise StartupError(f"metrics: cannot listen on {m.host}:{m.port}: {e.strerror or e}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="binlake-metrics", daemon=True)
        self._thread.start()
        log.info("metrics at http://%s:%d/metrics", m.host, m.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None
        with self._source_lock:
            self._close_source()

    # --- a scrape (the server's thread) --------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        p = self.pipeline
        e = self.engine
        s = e.state
        now_source = e.source_time()

        c = CounterMetricFamily("binlake_changes_total", "Binlog row changes committed to Delta, per source "
                                "table and op (insert, update, delete)", labels=["pipeline", "table", "op"])
        changes = dict(self.changes)
        # Every streamed table's ops from 0: rate() and increase() count a series' first changes too.
        streamed = [n for n, t in list(s.tables.items()) if t.streamed] if s is not None else []
        for table, op in sorted({*changes, *((t, op) for t in streamed for op in OP_NAMES)}):
            c.add_metric([p, table, OP_NAMES[op]], changes.get((table, op), 0))
        yield c
        yield self.batch_rows.family("binlake_batch_rows", "Row changes per committed micro-batch", p)
        yield self.commit_seconds.family("binlake_commit_duration_seconds", "Seconds to commit a micro-batch to "
                                         "every Delta table it touches and checkpoint it", p)
        yield _gauge("binlake_last_checkpoint_timestamp_seconds", "When the last checkpoint was written "
                     "(seconds since the epoch)", p, self.last_checkpoint)
        state = GaugeMetricFamily("binlake_state", "The stream engine's state: 1 for the current one",
                                  labels=["pipeline", "state"])
        for st in State:
            state.add_metric([p, str(st)], 1.0 if e.life.state == st else 0.0)
        yield state
        summary = e.summary
        yield _counter("binlake_reconnects_total", "Reconnects to the source after a fault that passed", p,
                       summary.reconnects)
        yield _counter("binlake_commit_retries_total", "Table commits retried after a fault that passed", p,
                       e.committer.retries)
        yield _gauge("binlake_reader_queue_depth", "Record lists the binlog reader process has decoded and the "
                     "engine not yet taken", p, e.reader.queued() if e.reader is not None else 0)
        if s is None:  # not started yet: nothing known of tables
            return
        pending = dict(self.pending)
        idle = 0.0 if pending or s.batch.rows else time.monotonic() - self.last_rows
        yield _gauge("binlake_source_idle_seconds", "Seconds since the stream last read a row change of a "
                     "captured table (0 while changes read wait for their commit)", p, idle)
        holds = dict(s.holds)
        tables = sorted(streamed)
        lag = GaugeMetricFamily("binlake_lag_seconds", "Seconds the table's Delta table is behind the changes "
                                "read of it: the age of its oldest change not yet committed (0 when none)",
                                labels=["pipeline", "table"])
        held = GaugeMetricFamily("binlake_table_held", "1 while the table waits for its pending schema change",
                                 labels=["pipeline", "table"])
        files = self._binlog_files()
        nbytes = GaugeMetricFamily("binlake_lag_bytes", "Bytes of binlog on the source after the table's "
                                   "committed position", labels=["pipeline", "table"])
        for name in tables:
            hold = holds.get(e.router.sink(name))
            since = [t for t in (hold.checkpoint.event_time if hold else 0, pending.get(name, 0)) if t]
            lag.add_metric([p, name], max(0.0, now_source - min(since)) if since else 0.0)
            held.add_metric([p, name], 1.0 if hold else 0.0)
            if files is not None:
                nbytes.add_metric([p, name], lag_bytes(files, (hold.checkpoint if hold else s.offset).applied))
        yield lag
        yield nbytes
        yield held
        yield _gauge("binlake_tables_held", "Tables waiting for their pending schema change", p, len(holds))
        yield _gauge("binlake_held_rows", "Row changes of held tables kept in memory", p,
                     sum(h.batch.rows for h in holds.values()))
        yield from self._backfills()
        holder = self._lock_holder()
        if holder is not None:
            info = InfoMetricFamily("binlake_writer_lock", "The process holding the pipeline's writer lock",
                                    labels=["pipeline"])
            info.add_metric([p], {"host": holder.host, "pid": str(holder.pid), "command": holder.command})
            yield info

    def _backfills(self) -> Iterator[Metric]:
        """Progress of the backfill requests open, or ended since this process started."""
        p = self.pipeline
        per_request = {"labels": ["pipeline", "request", "table"]}
        chunks = GaugeMetricFamily("binlake_backfill_chunks", "Chunks a backfill request reads (its plan)",
                                   **per_request)
        done = GaugeMetricFamily("binlake_backfill_chunks_done", "Chunks of a backfill request merged", **per_request)
        rows = GaugeMetricFamily("binlake_backfill_rows_done", "Rows the merges of a backfill request wrote",
                                 **per_request)
        backfills = self.engine.backfills
        for r in list(backfills.requests) if backfills is not None else []:
            if r.state.terminal and (r.updated_at is None or r.updated_at.timestamp() < self.started):
                continue
            chunks.add_metric([p, r.id, r.table], len(r.chunks))
            done.add_metric([p, r.id, r.table], r.chunks_done)
            rows.add_metric([p, r.id, r.table], r.rows)
        yield from (chunks, done, rows)

    def _binlog_files(self) -> list[tuple[str, int]] | None:
        """The source's binlogs and their sizes, asked at most every ``BINLOG_END_SECONDS`` on a
        connection kept between scrapes (a new one costs more than the question); None when the
        source does not answer."""
        with self._source_lock:  # scrapes may overlap
            at, files = self._binlog
            if time.monotonic() - at < BINLOG_END_SECONDS:
                return files
            files = None
            for _ in range(2):  # a kept connection the server closed (wait_timeout) is made again once
                kept = self._source is not None
                try:
                    if self._source is None:
                        self._source = connect(self.engine.conn, connect_timeout=SOURCE_TIMEOUT,
                                               read_timeout=SOURCE_TIMEOUT)
                    with self._source.cursor() as cur:
                        files = binlog_files(cur)
                    break
                except Exception as e:  # noqa: BLE001 - a scrape leaves lag in bytes out, it never fails
                    log.debug("metrics: binlog list not read: %s", e)
                    self._close_source()
                    if not kept:
                        break
            self._binlog = (time.monotonic(), files)
            return files

    def _close_source(self) -> None:
        if self._source is not None:
            try:
                self._source.close()
            except Exception:  # noqa: BLE001 - a connection already broken
                pass
            self._source = None

    def _lock_holder(self) -> Holder | None:
        """The writer lock's holder, read at most every ``HOLDER_SECONDS``."""
        at, holder = self._holder
        if time.monotonic() - at < HOLDER_SECONDS:
            return holder
        cfg = self.engine.cfg
        try:
            holder = writer_lock(cfg.sink.path, cfg.pipeline.name, "", cfg.sink.storage_options).holder()
        except Exception as e:  # noqa: BLE001 - a scrape leaves the holder out, it never fails
            log.debug("metrics: writer lock holder not read: %s", e)
            holder = None
        self._holder = (time.monotonic(), holder)
        return holder


def _gauge(name: str, doc: str, pipeline: str, value: float | None) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["pipeline"])
    if value is not None:
        g.add_metric([pipeline], value)
    return g


def _counter(name: str, doc: str, pipeline: str, value: float) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=["pipeline"])
    c.add_metric([pipeline], value)
    return c


def stream_observer(engine: StreamEngine) -> StreamObserver:
    """The engine's observer: ``StreamMetrics`` when ``metrics.port`` is set, else one that records nothing."""
    return StreamMetrics(engine) if engine.cfg.metrics.port is not None else StreamObserver()
