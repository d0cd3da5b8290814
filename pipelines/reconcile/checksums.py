"""``binlake reconcile``: per-chunk row counts and checksums, computed on the server and on
the Delta table, compared chunk by chunk; no row is shipped.

Invariants (tests/test_reconcile_checksum.py):
- A chunk is reported equal only if its row count and its checksum agree on both sides:
  the checksum is the sum, modulo 2^64, of each row's 64-bit hash (cdc_core/types/checksum.py:
  the first 8 bytes of MD5 over a canonical text of the row that both sides produce alike).
  A sum is order-independent and, unlike XOR, does not cancel duplicate rows (tables
  without a key may hold them). A column that cannot be rendered alike is left out of the
  hash, still counted, and named in the result (``excluded``): never a silent "equal".
- Chunks are the snapshot's: planned on the server now (``plan_chunks`` with
  ``source.snapshot.chunk_size``, on the snapshot's chunk key), half-open key ranges that
  tile the key space. A Delta row belongs to the chunk whose range holds its key *as the
  server orders it*: integer keys by a plain range comparison, other keys without a
  collation in Python's order, string keys through cdc_core/types/key_order.py (the server's
  sort keys, or its comparisons). So a row in Delta whose key MySQL does not have lands in
  the chunk MySQL would hold it in, and makes that chunk differ.
- Routed tables (rows tagged ``_cdc_source`` in their sink) and tables without a chunk key
  are one chunk: the whole table (a routed table: its own rows in the sink).
- Read-only: the writer lock is not taken; the only write is one row per table appended to
  ``_binlake/reconcile_runs`` (``record=False`` writes nothing).

Consistent position, and its limits: the source and the stream may be changing while this
runs, and nothing here can stop either. The server's checksum of a chunk is one statement
(one InnoDB consistent read); Delta's is computed over one table version. The two are
taken at different moments, so a chunk the stream is catching up on may differ for a
while. A chunk that differs is checked again, up to ``rechecks`` times, ``recheck_wait``
seconds apart, each time on the server and on Delta's latest version; only a chunk that
still differs is reported, with the stream's committed position (``ControlStore.checkpoint``)
and the server's binlog position at the last check. Limits: (1) a chunk that changes
continuously (a hot range, or a stream lagging by more than the rechecks' total wait) may
be reported though the stream would make it equal: compare the two positions (a stream
behind the server's position may explain it) and run again; (2) a chunk that is equal at
one check is not checked again, so a difference arising after its check is seen only by a
later run; (3) a difference that cancels exactly in the 64-bit sum (two rows whose hashes
differ by opposite amounts, probability about 2^-64 per chunk) goes unseen.

Why DataFusion (delta-rs's ``QueryBuilder``) rather than Spark for Delta's side: the repo
has no delta-spark jars (pipelines/spark/session.py: tasks write Parquet through delta-rs
and the driver commits through pipelines/lake/), so Spark could only read Delta by listing the
table's files through delta-rs and would miss what only the log says (deletes by
deletion vectors, a file's removal); DataFusion reads the table at a version through the
log itself, computes MD5 natively and multi-threaded, and needs no JVM (a Spark session
alone takes seconds to start, which is the whole budget for a million rows). Arrow buffers
come back to numpy for the per-chunk sums.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.chunks.planning import INTEGER_TYPES, Chunk, ChunkKeyError, chunk_key, encode_value, plan_chunks
from cdc_core.config import BinlakeConfig
from cdc_core.errors import BadInput
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.routes import Router
from cdc_core.schema.output import CDC_SOURCE, delta_name
from cdc_core.schema.table import TableSchema, describe_table, quote_ident
from cdc_core.source.capture import NotCapturable, captured_schema, without_excluded
from cdc_core.source.connection import captured_tables, connect, connection_settings
from cdc_core.source.flavour import flavour_of
from cdc_core.types.checksum import Rendering, df_ident, df_string, rendering
from cdc_core.types.key_order import KeyOrders, ServerSql
from pipelines.lake.control_store import ControlStore
from pipelines.lake.reads import query
from pipelines.lake.tables import DeltaTable, delta_schema, open_table, refresh, table_uri

log = logging.getLogger(__name__)

MOD = 1 << 64
DEFAULT_RECHECKS = 3
DEFAULT_RECHECK_WAIT = 2.0  # seconds between checks of a differing chunk
MAX_SERVER_QUERIES = 4  # concurrent checksum queries on the server, at most

Progress = Callable[[str, int, int], None]  # (table, chunks checked on the server, chunks)


@dataclass(frozen=True)
class ChunkMismatch:
    """A chunk whose rows differ: rows of ``table`` with ``lo <= key < hi`` in the server's
    order (None: unbounded; ``key`` None: the whole table). What a backfill of exactly this
    range needs (:meth:`chunk`)."""

    table: str
    index: int
    key: str | None
    lo: Any
    hi: Any
    mysql_rows: int
    delta_rows: int

    def chunk(self) -> Chunk:
        """The range as a :class:`Chunk` (the whole table for a one-chunk table)."""
        return Chunk(self.table, self.index, self.key or "", self.lo, self.hi)

    def to_json(self) -> dict:
        return {"index": self.index, "key": self.key, "lo": _json_value(self.lo), "hi": _json_value(self.hi),
                "mysql_rows": self.mysql_rows, "delta_rows": self.delta_rows}


def _json_value(v: Any) -> Any:
    try:
        return encode_value(v)
    except TypeError:  # a TIME key's timedelta: shown as the server prints it
        return {"text": str(v)}


@dataclass
class TableReconcile:
    """The result for one captured table."""

    table: str
    sink: str
    chunks_checked: int = 0
    mismatches: list[ChunkMismatch] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)  # column → why it is not in the checksum
    mysql_rows: int = 0
    delta_rows: int = 0
    whole_table: bool = False  # compared as one chunk (routed, or no chunk key)
    server_position: BinlogPosition | None = None  # the server's binlog end at the last check
    stream_position: BinlogPosition | None = None  # the stream's committed (applied) position then
    rechecks: int = 0  # rounds of re-checking differing chunks
    delta_version: int | None = None
    seconds: float = 0.0
    server_seconds: float = 0.0  # wall time of the server's checksum queries
    delta_seconds: float = 0.0  # wall time of Delta's checksum passes
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    @property
    def equal(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict:
        return {"table": self.table, "sink": self.sink, "equal": self.equal, "chunks_checked": self.chunks_checked,
                "mismatched_chunks": len(self.mismatches), "mismatches": [m.to_json() for m in self.mismatches],
                "excluded_columns": self.excluded, "mysql_rows": self.mysql_rows, "delta_rows": self.delta_rows,
                "whole_table": self.whole_table,
                "server_position": str(self.server_position) if self.server_position else None,
                "stream_position": str(self.stream_position) if self.stream_position else None,
                "rechecks": self.rechecks, "delta_version": self.delta_version, "seconds": round(self.seconds, 3),
                "server_seconds": round(self.server_seconds, 3), "delta_seconds": round(self.delta_seconds, 3),
                "started_at": self.started_at.isoformat()}


@dataclass
class ReconcileReport:
    """The result of one reconcile run."""

    pipeline: str
    tables: list[TableReconcile]
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    @property
    def mismatches(self) -> list[ChunkMismatch]:
        """Every chunk still differing, over all tables (what a repair would backfill)."""
        return [m for t in self.tables for m in t.mismatches]

    def to_json(self) -> dict:
        return {"pipeline": self.pipeline, "equal": self.equal, "seconds": round(self.seconds, 3),
                "tables": [t.to_json() for t in self.tables]}


@dataclass
class _Sums:
    """Row counts and checksums (mod 2^64) per chunk index."""

    rows: np.ndarray
    sums: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> _Sums:
        return cls(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint64))


def reconcile_tables(cfg: BinlakeConfig, tables: Sequence[str] | None = None, *, rechecks: int = DEFAULT_RECHECKS,
                     recheck_wait: float = DEFAULT_RECHECK_WAIT, progress: Progress | None = None,
                     record: bool = True) -> ReconcileReport:
    """Compare every captured table (or ``tables``, "db.table" names) with its Delta table,
    chunk by chunk (see the module docstring); record each table's result in
    ``_binlake/reconcile_runs`` unless ``record`` is false. Raises :class:`BadInput` naming a
    table that is not captured."""
    started = time.monotonic()
    settings = connection_settings(cfg)
    store = ControlStore.of(cfg)
    results = []
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(connect(settings))
        with conn.cursor() as cur:
            captured = captured_tables(cfg, cur)
            names = _chosen(cfg, captured, tables)
            mariadb = flavour_of(cur).mariadb
        # The checksum queries run on their own connections, as many as the snapshot may read
        # with at once (pipeline.parallelism, at most MAX_SERVER_QUERIES): each keeps one
        # server core busy.
        sums_conns = [stack.enter_context(connect(settings))
                      for _ in range(max(1, min(cfg.pipeline.parallelism, MAX_SERVER_QUERIES)))]
        orders = KeyOrders(ServerSql.on(conn))
        checker = _TableCheck(cfg, conn, sums_conns, store, orders, mariadb, rechecks, recheck_wait, progress)
        for name in names:
            result = checker.run(name)
            log.info("reconcile %s: %d chunks, %d differ, %d columns left out, %.2f s", name,
                     result.chunks_checked, len(result.mismatches), len(result.excluded), result.seconds)
            results.append(result)
    report = ReconcileReport(cfg.pipeline.name, results, time.monotonic() - started)
    if record and results:
        store.record_reconcile([reconcile_record(cfg.pipeline.name, r) for r in results])
    return report


def _chosen(cfg: BinlakeConfig, captured: list[str], tables: Sequence[str] | None) -> list[str]:
    if tables is None:
        return captured
    unknown = [t for t in tables if t not in captured]
    if unknown:
        listed = ", ".join(captured[:10]) + (", ..." if len(captured) > 10 else "") if captured else "none"
        raise BadInput(f"unknown table {unknown[0]!r}: not a captured table of pipeline {cfg.pipeline.name} "
                       f"(captured: {listed})")
    return list(dict.fromkeys(tables))


def reconcile_record(pipeline: str, r: TableReconcile) -> dict:
    """The ``_binlake/reconcile_runs`` row of one table's result."""
    return {"pipeline": pipeline, "table": r.table, "sink": r.sink, "started_at": r.started_at,
            "seconds": r.seconds, "equal": r.equal, "chunks_checked": r.chunks_checked,
            "mismatched_chunks": len(r.mismatches), "mismatches": json.dumps([m.to_json() for m in r.mismatches]),
            "excluded_columns": json.dumps(r.excluded), "mysql_rows": r.mysql_rows, "delta_rows": r.delta_rows,
            "server_file": r.server_position.file if r.server_position else None,
            "server_pos": r.server_position.pos if r.server_position else None,
            "stream_file": r.stream_position.file if r.stream_position else None,
            "stream_pos": r.stream_position.pos if r.stream_position else None,
            "rechecks": r.rechecks, "delta_version": r.delta_version}


class _TableCheck:
    """Checks one table at a time: plan, server sums, Delta sums, rechecks."""

    def __init__(self, cfg: BinlakeConfig, conn, sums_conns: list, store: ControlStore, orders: KeyOrders,
                 mariadb: bool, rechecks: int, recheck_wait: float, progress: Progress | None):
        self.cfg, self.conn, self.sums_conns, self.store, self.orders = cfg, conn, sums_conns, store, orders
        self.mariadb, self.rechecks, self.recheck_wait, self.progress = mariadb, rechecks, recheck_wait, progress
        self.router = Router(cfg.routes)

    def run(self, name: str) -> TableReconcile:
        t0 = time.monotonic()
        sink = self.router.sink(name)
        result = TableReconcile(name, sink)
        with self.conn.cursor() as cur:
            schema = self._schema(cur, name)
            key = None if self.router.routed(name) else self._key(schema)
            chunks = plan_chunks(cur, schema, key, self.cfg.source.snapshot.chunk_size) if key else [Chunk(name, 0, "")]
        result.whole_table = key is None
        dt_ = open_table(table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options)
        render = rendering(schema, {f.name: f.type for f in delta_schema(dt_)} if dt_ is not None else {},
                           self.mariadb)
        result.excluded = dict(render.excluded)
        side = _DeltaSide(dt_, schema, render, key, chunks, self.orders, name if self.router.routed(name) else None)

        pending = list(range(len(chunks)))
        server, delta = self._both(result, schema, render, chunks, side, pending, first=True)
        result.mysql_rows, result.delta_rows = int(server.rows.sum()), int(delta.rows.sum())
        differing = _differing(server, delta, pending)
        while differing and result.rechecks < self.rechecks:
            result.rechecks += 1
            log.info("reconcile %s: %d chunks differ, checking them again in %.1f s (round %d of %d)", name,
                     len(differing), self.recheck_wait, result.rechecks, self.rechecks)
            time.sleep(self.recheck_wait)
            if side.table is not None:
                refresh(side.table)  # Delta's latest version
            elif (fresh := open_table(table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options)):
                side = dataclasses.replace(side, table=fresh)
            again_server, again_delta = self._both(result, schema, render, chunks, side, differing)
            for i in differing:  # the latest figures of re-checked chunks replace the earlier ones
                server.rows[i], server.sums[i] = again_server.rows[i], again_server.sums[i]
                delta.rows[i], delta.sums[i] = again_delta.rows[i], again_delta.sums[i]
            differing = _differing(server, delta, differing)
            result.mysql_rows, result.delta_rows = int(server.rows.sum()), int(delta.rows.sum())
        result.chunks_checked = len(chunks)
        result.delta_version = side.table.version() if side.table is not None else None
        result.mismatches = [ChunkMismatch(name, i, key, chunks[i].lo, chunks[i].hi, int(server.rows[i]),
                                           int(delta.rows[i])) for i in differing]
        result.seconds = time.monotonic() - t0
        return result

    def _schema(self, cur, name: str) -> TableSchema:
        schema = describe_table(cur, *name.split(".", 1))
        try:
            return captured_schema(schema, self.cfg.source)
        except NotCapturable:
            # Still compared: the columns binlake cannot map are left out of the checksum, named.
            return without_excluded(schema, self.cfg.source)

    def _key(self, schema: TableSchema) -> str | None:
        try:
            return chunk_key(schema, self.cfg.source.snapshot.chunk_key_columns)
        except ChunkKeyError:
            return None  # no key: the whole table is one chunk

    def _both(self, result: TableReconcile, schema: TableSchema, render: Rendering, chunks: list[Chunk],
              side: _DeltaSide, which: list[int], first: bool = False) -> tuple[_Sums, _Sums]:
        """Server and Delta sums of the chunks ``which``: the server's in threads, one per
        checksum connection (the server works while DataFusion does), Delta's here. Records
        both positions as of the end of this check."""
        t0 = time.monotonic()
        out = _Sums.zeros(len(chunks))
        done = [0]
        lock = threading.Lock()

        def report() -> None:
            with lock:
                done[0] += 1
                if first and self.progress is not None:
                    self.progress(result.table, done[0], len(which))

        n = len(self.sums_conns)
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            # Interleaved shares: neighbouring chunks (similar sizes) go to different connections.
            jobs = [pool.submit(self._server_sums, conn, schema, render, chunks, which[k::n], out, report)
                    for k, conn in enumerate(self.sums_conns)]
            t1 = time.monotonic()
            delta = side.sums(which)
            result.delta_seconds += time.monotonic() - t1
            finished = max(job.result() for job in jobs)
        result.server_seconds += finished - t0
        with self.conn.cursor() as cur:
            result.server_position = master_position(cur)
        cp = self.store.checkpoint()
        result.stream_position = cp.offset.applied if cp is not None else None
        return out, delta

    @staticmethod
    def _server_sums(conn, schema: TableSchema, render: Rendering, chunks: list[Chunk], which: list[int],
                     out: _Sums, report: Callable[[], None]) -> float:
        """Count and sum the chunks ``which`` on ``conn`` into ``out``; returns when it finished
        (``time.monotonic``)."""
        sql = (f"SELECT COUNT(*), SUM({render.mysql_hash(schema)}) FROM "
               f"{quote_ident(schema.database)}.{quote_ident(schema.table)} WHERE ").replace("%", "%%")  # pymysql's
        with conn.cursor() as cur:
            for i in which:
                where, params = chunks[i].where()
                cur.execute(sql + where, params)
                rows, total = cur.fetchone()
                out.rows[i] = rows  # each index is written by one thread only
                out.sums[i] = int(total or 0) % MOD
                report()
        return time.monotonic()


def _differing(server: _Sums, delta: _Sums, which: list[int]) -> list[int]:
    return [i for i in which if server.rows[i] != delta.rows[i] or server.sums[i] != delta.sums[i]]


@dataclass
class _DeltaSide:
    """Per-chunk row counts and checksums of the Delta table (None: no table yet: no rows)."""

    table: DeltaTable | None
    schema: TableSchema
    render: Rendering
    key: str | None
    chunks: list[Chunk]
    orders: KeyOrders
    source: str | None  # a routed table: only its rows in the sink

    def sums(self, which: list[int]) -> _Sums:
        out = _Sums.zeros(len(self.chunks))
        if self.table is None:
            return out
        names = delta_schema(self.table).names
        conds = [] if self.source is None else [f"CAST({df_ident(CDC_SOURCE)} AS VARCHAR) = {df_string(self.source)}"]
        key_sql = None
        if self.key is not None:
            key_sql = df_ident(delta_name(names, self.key) or self.key)
            ranges = self._range_filter(key_sql, which)
            if ranges:
                conds.append(ranges)
        select = ", ".join(([f"{key_sql} AS k"] if key_sql else []) + [f"{self.render.delta_digest(self.schema)} AS h"])
        sql = f"SELECT {select} FROM t" + (" WHERE " + " AND ".join(conds) if conds else "")
        locate = self._locator()
        wanted = np.zeros(len(self.chunks), dtype=bool)
        wanted[which] = True
        for batch in query(self.table, sql):
            if batch.num_rows == 0:
                continue
            hashes = _first_u64(batch.column("h"))
            idx = np.zeros(batch.num_rows, dtype=np.int64) if self.key is None else locate(batch.column("k"))
            keep = wanted[idx]  # a recheck reads more than its chunks where the key cannot be filtered
            idx, hashes = idx[keep], hashes[keep]
            out.rows += np.bincount(idx, minlength=len(self.chunks))
            np.add.at(out.sums, idx, hashes)  # uint64: wraps modulo 2^64, as the server's sum is taken
        return out

    def _integer_key(self) -> bool:
        col = self.schema.column(self.key)
        return col.data_type in INTEGER_TYPES and not (col.data_type == "bigint" and col.unsigned)

    def _range_filter(self, key_sql: str, which: list[int]) -> str | None:
        """A pushed-down filter selecting only the chunks ``which`` (integer keys; None when
        every chunk is read or the key's order is not SQL's)."""
        if len(which) == len(self.chunks) or not self._integer_key():
            return None
        parts = []
        for i in which:
            c = self.chunks[i]
            bounds = ([f"{key_sql} >= {int(c.lo)}"] if c.lo is not None else []) + (
                [f"{key_sql} < {int(c.hi)}"] if c.hi is not None else [])
            parts.append("(" + (" AND ".join(bounds) or "TRUE") + ")")
        return "(" + " OR ".join(parts) + ")"

    def _locator(self) -> Callable[[pa.Array], np.ndarray]:
        """Chunk index of each key value, in the server's order."""
        if self.key is None:
            return lambda arr: np.zeros(len(arr), dtype=np.int64)
        lows = [c.lo for c in self.chunks[1:]]  # chunk i starts at bound i-1
        if self._integer_key():
            bounds = np.array(lows, dtype=np.int64)
            return lambda arr: np.searchsorted(bounds, _numpy(arr), side="right").astype(np.int64)
        locate = self.orders.locator(self.schema.column(self.key), lows)
        return lambda arr: np.array(locate(pa.array(arr).to_pylist()), dtype=np.int64)


def _numpy(arr) -> np.ndarray:
    a = pa.array(arr)
    return a.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _first_u64(arr) -> np.ndarray:
    """The first 8 bytes of each 16-byte digest, as big-endian unsigned integers."""
    a = pa.array(arr)
    if not pa.types.is_binary(a.type):
        a = pc.cast(a, pa.binary())  # DataFusion gives a binary view
    offsets = np.frombuffer(a.buffers()[1], dtype=np.int32, count=len(a) + 1, offset=a.offset * 4)
    data = np.frombuffer(a.buffers()[2], dtype=np.uint8)
    head = data[offsets[:-1, None] + np.arange(8)]  # (rows, 8)
    return np.ascontiguousarray(head).view(">u8").ravel().astype(np.uint64)
