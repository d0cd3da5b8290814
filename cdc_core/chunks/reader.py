"""Reading one chunk consistently without locks (watermarks, as in DBLog / Flink CDC).

Algorithm for a chunk C of table T on key column k:
  1. LW := the binlog end, once every transaction at or before it is visible
           (cdc_core/offset/visibility.py: the binlog holds a transaction before
           InnoDB commits it; MariaDB and MySQL prove visibility each their own way)
  2. S  := SELECT the rows of C (one autocommit statement, so its read view
           holds every transaction up to LW and none past HW)
  3. HW := the binlog end (SHOW BINARY LOG STATUS / SHOW MASTER STATUS)
  4. replay the binlog changes of T in (LW, HW] whose key falls in C onto S.

Invariants (tested in tests/test_chunk_reader.py):
- With a row key (TableSchema.row_key: the primary key, else a NOT NULL unique key or the
  configured key columns), the result equals C's rows as of HW: for every key touched
  in (LW, HW] the last image in the window (or its absence, after a delete)
  replaces whatever S saw; untouched keys are the same at the SELECT and at HW.
- Without a row key (chunk key only) rows have no identity, so a window
  with in-range changes is not folded: the chunk is read instead in one consistent
  snapshot (cdc_core/chunks/consistent_read.py: its low and high watermark are the
  position the snapshot matches). A table without any chunk key (``WHOLE_TABLE``) is
  read that way at once. On a server that reports no snapshot position (or with
  ``consistent=False``) the chunk is read again until a window is quiet for it, and
  fails after ``max_attempts`` with a clear message (tests/test_keyless_tables.py).
- XA transactions (cdc_core/binlog/xa.py): rows prepared in the window and not committed by HW
  are not changes as of HW; a window holding the XA COMMIT of a transaction prepared
  before LW (the SELECT may or may not see its rows) is read again, as is one holding a
  row event whose images leave columns out (a session's binlog_row_image not FULL).
- With ``raw_dates`` (connectorx), DATE and DATETIME are selected as stored; a chunk holding
  a value the reader refuses or reads as year 0 is selected again, with the server's check,
  in the same window: rows equal those of the checked SELECT alone.
- Result rows carry ``_cdc_op`` = 'r' and ``_cdc_seq`` = HW's sequence number,
  or, for rows the window wrote, the replayed change's own sequence number
  (inside (LW, HW]).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.binlog.range_reads import PartialRowImage, RowChange, read_changes
from cdc_core.binlog.xa import XaOutsideWindow
from cdc_core.chunks.bulk_read import Fetch, chunk_fetch, refuses_impossible_dates, text_rows
from cdc_core.chunks.consistent_read import consistent_snapshot
from cdc_core.chunks.planning import WHOLE_TABLE, Chunk
from cdc_core.errors import TerminalError
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.offset.visibility import visible_position
from cdc_core.schema.output import CDC_OP, CDC_SEQ, output_schema
from cdc_core.schema.table import TableSchema, quote_ident
from cdc_core.source.connection import ConnectionSettings
from cdc_core.types.key_order import KeyOrders, ServerSql
from cdc_core.types.mapping import binlog_value, raw_floor, rows_to_arrow, select_expr, snapshot_array

log = logging.getLogger(__name__)

# Tables whose chunks held a date the bulk reader refused or read as year 0, in this process.
_IMPOSSIBLE_DATES: set[str] = set()


def _year_zero(schema: TableSchema, raw: pa.Table) -> bool:
    """Whether a DATE or DATETIME column of ``raw`` holds a date before 0001-01-01 (year 0,
    which the server's check makes NULL and the bulk reader passes through)."""
    for c in schema.columns:
        if (first := raw_floor(c)) is not None:
            col = raw.column(c.name)
            if col.null_count < len(col) and pc.less(pc.min(col), pa.scalar(first, col.type)).as_py():
                return True
    return False


class ChunkNotQuiet(TerminalError):
    """A key-less chunk kept changing under every read attempt (or could not be read in one
    consistent snapshot)."""


@dataclass
class ChunkResult:
    chunk: Chunk
    table: pa.Table
    low_watermark: BinlogPosition
    high_watermark: BinlogPosition
    window_changes: int
    attempts: int
    read_at: float = 0.0  # the host's clock (time.time()) when the high watermark was taken


def chunk_select_sql(schema: TableSchema, chunk: Chunk, literal: Callable[[object], str],
                     raw_dates: bool = False) -> str:
    """The chunk's SELECT with its bounds inlined (the bulk reader takes no parameters);
    ``raw_dates``: see ``types.select_expr``. The bounds are rendered in one pass, as pymysql
    renders parameters, so a bound's text (``'a%s'``) is never read as a placeholder
    (tests/test_sql_literals.py)."""
    cols = ", ".join(select_expr(c, raw_dates) for c in schema.columns)
    cond, params = chunk.where()
    cond = cond % tuple(literal(p) for p in params)  # `%s` → a literal, `%%` → `%`, once each
    return f"SELECT {cols} FROM {quote_ident(schema.database)}.{quote_ident(schema.table)} WHERE {cond}"


class ChunkReader:
    """Reads chunks of one source; holds a control connection for watermarks."""

    def __init__(self, conn: ConnectionSettings, control, fetch: Fetch, server_id: int, max_attempts: int = 20,
                 base: int = 0, raw_dates: bool = False, consistent: bool = True):
        self.conn = conn
        self.consistent = consistent  # read a changing key-less chunk in one consistent snapshot, if the server can
        # ``fetch`` refuses impossible dates itself (bulk_read.refuses_impossible_dates): DATE and
        # DATETIME columns are selected raw, and checked by the server only where they must be.
        self.raw_dates = raw_dates
        self.base = base  # of the pipeline's positions on this server (cdc_core/offset/position.py)
        self.control = control  # a pymysql connection (autocommit)
        self.fetch = fetch
        self.server_id = server_id
        self.max_attempts = max_attempts

    @classmethod
    def bulk(cls, conn: ConnectionSettings, control, schema: TableSchema, server_id: int, base: int = 0
             ) -> ChunkReader:
        """The reader of ``schema``'s chunks through the bulk reader (``bulk_read.chunk_fetch``),
        DATE and DATETIME selected as stored where that reader refuses impossible ones."""
        return cls(conn, control, chunk_fetch(conn, schema), server_id, base=base,
                   raw_dates=refuses_impossible_dates(conn))

    def select(self, schema: TableSchema, chunk: Chunk) -> ChunkResult:
        """Steps 1-3 alone: the chunk's SELECT between its two watermarks, the window not
        folded (the online backfill lets the stream fold it, cdc_core/chunks/incremental.py)."""
        with self.control.cursor() as cur:
            lw = visible_position(cur, self.base)
            raw = self._fetch(schema, chunk)
            hw = master_position(cur, self.base)
        read_at = time.time()
        return ChunkResult(chunk, self._canonical(schema, raw, output_schema(schema), hw), lw, hw, 0, 1, read_at)

    def read(self, schema: TableSchema, chunk: Chunk) -> ChunkResult:
        """Read ``chunk`` as of its high watermark (see the module invariants)."""
        target = output_schema(schema)
        keyed = bool(schema.row_key)
        if chunk.key == WHOLE_TABLE:
            exact = self.read_consistent(schema, chunk, 1)
            if exact is None:
                raise ChunkNotQuiet(f"{schema.qualified_name} has no key to read it by and the server reports no "
                                    "binlog position for a consistent snapshot (binlog_snapshot_position)")
            return exact
        for attempt in range(1, self.max_attempts + 1):
            selected = self.select(schema, chunk)
            table, lw, hw = selected.table, selected.low_watermark, selected.high_watermark
            try:
                window = [] if hw <= lw else list(
                    read_changes(self.conn, self.server_id, lw, hw, {(schema.database, schema.table)})
                )
            except (XaOutsideWindow, PartialRowImage) as e:  # the window's changes cannot be known
                log.info("%s chunk %d: %s; reading it again", schema.qualified_name, chunk.index, e)
                time.sleep(min(0.05 * attempt, 0.5))
                continue
            inside = self._keys_in_range(schema, chunk, window)
            changes = [ch for ch in window if any(img is not None and img[chunk.key] in inside
                                                  for img in (ch.before, ch.after))]
            if not changes:
                return ChunkResult(chunk, table, lw, hw, 0, attempt, selected.read_at)
            if keyed:
                folded = fold(schema, table, changes, target, lambda img, inside=inside: img[chunk.key] in inside)
                return ChunkResult(chunk, folded, lw, hw, len(changes), attempt, selected.read_at)
            exact = self.read_consistent(schema, chunk, attempt + 1) if self.consistent else None
            if exact is not None:
                return exact
            time.sleep(min(0.05 * attempt, 0.5))
        raise ChunkNotQuiet(
            f"{schema.qualified_name} chunk {chunk.index}: rows changed during each of {self.max_attempts} reads; "
            "a table without a row key needs a quiet moment per chunk (add a primary key, a NOT NULL unique key or "
            "source.key_columns for lock-free reads)"
        )

    def read_consistent(self, schema: TableSchema, chunk: Chunk, attempt: int) -> ChunkResult | None:
        """The chunk read in one consistent snapshot on the control connection, its watermarks
        both the position the snapshot matches; None on a server that reports none. The rows
        come over the text protocol (the bulk reader cannot join the transaction), with the
        server's date check (``bulk_read.text_fetch``)."""
        with self.control.cursor() as cur:
            at = consistent_snapshot(cur, self.base)
            if at is None:
                return None
            read_at = time.time()
            try:
                raw = text_rows(self.control, schema, chunk_select_sql(schema, chunk, self.control.escape))
            finally:
                cur.execute("ROLLBACK")
        log.info("%s chunk %d read in one consistent snapshot at %s", schema.qualified_name, chunk.index, at)
        return ChunkResult(chunk, self._canonical(schema, raw, output_schema(schema), at), at, at, 0, attempt, read_at)

    def _fetch(self, schema: TableSchema, chunk: Chunk) -> pa.Table:
        """The chunk's rows as the bulk reader returns them. With ``raw_dates``, DATE and DATETIME
        columns are read as stored; if the reader refuses a value (connectorx panics on a zero
        month or day and on a day past the month's end) or returns a year-0 date, the chunk is
        read again with the server's validity check (:func:`types.select_expr`), which gives
        those values as NULL — inside the same watermark window, and for every later chunk of
        the table in this process. The check costs the server about a third of a chunk read
        (bench/snapshot.py's table); few tables hold impossible dates."""
        if self.raw_dates and schema.qualified_name not in _IMPOSSIBLE_DATES \
                and any(raw_floor(c) is not None for c in schema.columns):
            try:
                raw = self.fetch(chunk_select_sql(schema, chunk, self.control.escape, raw_dates=True))
                if not _year_zero(schema, raw):
                    return raw
                why = "a year-0 date"
            except BaseException as e:
                if type(e).__name__ != "PanicException":  # pyo3's, for a panic in the reader
                    raise
                why = "a date the bulk reader refused (its panic message above is expected)"
            log.info("%s holds impossible dates (NULL in Delta), chunk %d %s: its chunks are read again with the "
                     "server's date check", schema.qualified_name, chunk.index, why)
            _IMPOSSIBLE_DATES.add(schema.qualified_name)
        return self.fetch(chunk_select_sql(schema, chunk, self.control.escape))

    def _canonical(self, schema: TableSchema, raw: pa.Table, target: pa.Schema, hw: BinlogPosition) -> pa.Table:
        arrays = [snapshot_array(c, raw.column(c.name)) for c in schema.columns]
        n = raw.num_rows
        arrays += [pa.repeat(pa.scalar("r", pa.string()), n), pa.repeat(pa.scalar(hw.seq(), pa.int64()), n)]
        return pa.Table.from_arrays(arrays, schema=target)

    def _keys_in_range(self, schema: TableSchema, chunk: Chunk, changes: list[RowChange]) -> set:
        """Chunk-key values of ``changes`` that lie in the chunk, in the server's order of the
        key (cdc_core/types/key_order.py: string keys by their collation, as the SELECT compared)."""
        col = schema.column(chunk.key)
        values = {img[chunk.key] for ch in changes for img in (ch.before, ch.after) if img is not None}
        if not values:
            return set()
        canonical = {v: binlog_value(col, v) for v in values}
        bounds = [b for b in (chunk.lo, chunk.hi) if b is not None]
        ranks = self._key_orders.for_column(col).partition(bounds).locate(list(canonical.values()))
        inside = int(chunk.lo is not None)  # at or above lo (when bounded), below hi
        return {v for v, r in zip(canonical, ranks, strict=True) if r == inside}

    @cached_property
    def _key_orders(self) -> KeyOrders:
        """Key orders on the control connection: each collation looked up once per reader."""
        return KeyOrders(ServerSql.on(self.control))


def fold(schema: TableSchema, table: pa.Table, changes: list[RowChange], target: pa.Schema,
         in_chunk: Callable[[dict], bool]) -> pa.Table:
    """Replace the rows of every in-chunk key touched by ``changes`` with its last image
    in them; images outside the chunk (a key moved in or out) are not this chunk's."""
    pk = schema.row_key
    cols = {c.name: c for c in schema.columns}

    def key_of(img: dict) -> tuple:
        return tuple(binlog_value(cols[k], img[k]) for k in pk)

    final: dict[tuple, dict | None] = {}
    for ch in changes:
        if ch.before is not None and in_chunk(ch.before):
            final[key_of(ch.before)] = None
        if ch.after is not None and in_chunk(ch.after):
            row = {name: binlog_value(cols[name], ch.after.get(name)) for name in cols}
            row[CDC_OP], row[CDC_SEQ] = ch.op, ch.seq
            final[key_of(ch.after)] = row
    keys = list(zip(*(table.column(k).to_pylist() for k in pk))) if table.num_rows else []
    keep = pa.array([k not in final for k in keys], pa.bool_())
    kept = table.filter(keep) if table.num_rows else table
    written = rows_to_arrow(schema, [r for r in final.values() if r is not None], target)
    return pa.concat_tables([kept, written.select(target.names)]).cast(target)
