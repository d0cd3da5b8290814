"""A snapshot's check and summary: each table's rows in MySQL and in Delta when a run ends,
and whether there is work left at all (``finished_snapshot``: a re-run of a finished
snapshot costs the checks and the row counts only, and starts no Spark).

Invariants:
- A table is verified (``SNAPSHOT_VERIFIED_KEY``) only once every chunk of its plan is
  committed and no DDL changed it while it was read (the mark in the commit of its last
  chunks, or a later one); a later chunk or reset undoes it, so a
  finished snapshot is one whose every planned table is verified (tests/test_snapshot_resume.py).
- MySQL's rows of a table are counted over its plan's spans, which cover the whole key space
  (tests/test_chunking.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pymysql

from cdc_core.chunks.planning import WHOLE_TABLE, Chunk, pyformat
from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router
from cdc_core.schema.table import quote_ident
from cdc_core.source.connection import captured_tables, connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.files import SnapshotCommits, snapshot_commits
from pipelines.lake.reads import count_rows
from pipelines.lake.tables import DeltaTable, open_table, table_uri
from pipelines.snapshot.plan import chunk_groups, streamed_already
from pipelines.snapshot.task import peak_rss_mb


@dataclass
class TableSummary:
    table: str
    chunks: int
    chunks_read: int = 0
    rows_written: int = 0
    delta_rows: int = 0
    mysql_rows: int = 0
    seconds: float = 0.0
    streamed: bool = False  # the stream owns it (see ``streamed_already``): not read by the snapshot

    @property
    def matches(self) -> bool:
        return self.delta_rows == self.mysql_rows


@dataclass
class SnapshotSummary:
    tables: list[TableSummary] = field(default_factory=list)
    seconds: float = 0.0
    rows_read: int = 0
    task_peak_rss_mb: float = 0.0
    driver_peak_rss_mb: float = 0.0
    retries: int = 0  # chunk-group attempts repeated after a transient source fault

    def to_json(self, pipeline: str) -> dict:
        """The summary as ``binlake snapshot --json`` prints it (docs/contracts.md)."""
        return {"pipeline": pipeline, "seconds": round(self.seconds, 3), "rows_read": self.rows_read,
                "retries": self.retries,
                "tables": [{"table": s.table, "chunks": s.chunks, "streamed": s.streamed,
                            "chunks_read": s.chunks_read, "rows_written": s.rows_written,
                            "delta_rows": s.delta_rows, "mysql_rows": s.mysql_rows, "matches": s.matches}
                           for s in self.tables]}


def finished_snapshot(cfg: BinlakeConfig, only: set[str] | None = None) -> SnapshotSummary | None:
    """The summary a snapshot run would print when it has nothing left to do — every captured
    table (of ``only``) planned and verified — or None when there is work and
    :class:`pipelines.snapshot.driver.SnapshotJob` must run. Needs no Spark."""
    start = time.monotonic()
    router = Router(cfg.routes)
    with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
        names = [n for n in captured_tables(cfg, cur) if only is None or n in only]
    plans = ControlStore.of(cfg).load_plans()
    tables: dict[str, DeltaTable | None] = {}
    commits: dict[str, SnapshotCommits] = {}
    for name in names:
        sink = router.sink(name)
        if sink not in tables:
            tables[sink] = open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
            if tables[sink] is not None:
                commits[sink] = snapshot_commits(tables[sink])
        if streamed_already(router, name, plans, tables[sink]):
            continue
        if name not in plans or sink not in commits or not commits[sink].is_verified(name):
            return None
    summary = SnapshotSummary([TableSummary(n, len(plans.get(n, ())), streamed=n not in plans) for n in names])
    return counted(cfg, summary, tables, start, plans)


def counted(cfg: BinlakeConfig, summary: SnapshotSummary, tables: dict[str, DeltaTable | None], start: float,
            plans: dict[str, list[Chunk]], opened: Callable[[], pymysql.connections.Connection] | None = None,
            source_counted: Callable[[], object] | None = None) -> SnapshotSummary:
    """``summary`` with each table's rows in MySQL (:func:`mysql_rows` over its ``plans``) and
    in Delta (``tables``: open sink tables by name, others opened here), its time since
    ``start`` and the driver's peak RSS. ``opened``: how to get a connection (default: one
    plain connect). ``source_counted``: called once MySQL is counted, before Delta is (the
    driver waits there for work on the same table handles)."""
    router = Router(cfg.routes)
    opened = opened or (lambda: connect(connection_settings(cfg)))
    # New connections: a run's planning one may have been dropped during the reads.
    with opened() as control, control.cursor() as cur:
        existing = set(captured_tables(cfg, cur))
        present = [s for s in summary.tables if s.table in existing]  # not dropped meanwhile
        spans = {s.table: count_spans(s.table, plans.get(s.table, []), cfg.pipeline.parallelism) for s in present}
        single = [s.table for s in present if len(spans[s.table]) == 1]
        counts = count_single_spans(cur, {t: spans[t][0] for t in single})
        for s in present:
            s.mysql_rows = counts[s.table] if s.table in counts else \
                mysql_rows(opened, s.table, plans.get(s.table, []), cfg.pipeline.parallelism)
    if source_counted is not None:
        source_counted()
    for s in summary.tables:
        sink = router.sink(s.table)
        dt_ = tables.get(sink) or open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
        s.delta_rows = count_rows(dt_, s.table if router.routed(s.table) else None)
    summary.seconds = time.monotonic() - start
    summary.driver_peak_rss_mb = peak_rss_mb()
    return summary


def mysql_rows(opened: Callable[[], pymysql.connections.Connection], table: str, chunks: list[Chunk],
               parallelism: int) -> int:
    """Rows of MySQL ``table`` now: a COUNT(*) per span of consecutive ``chunks`` (its plan, which
    covers the whole key space), ``parallelism`` spans at once on connections of their own. A
    single COUNT(*) is one server thread scanning the whole index (5 s for 20M rows of
    bench/snapshot.py's table); a table without a plan is counted whole. A table of one span
    (a plan of one chunk) is better counted with others (:func:`count_single_spans`)."""
    sql = _count_sql(table)
    spans = count_spans(table, chunks, parallelism)

    def count_on(c, span: Chunk) -> int:
        where, params = span.where()
        c.execute(sql + where, params)
        return c.fetchone()[0]

    def count(span: Chunk) -> int:
        with opened() as conn, conn.cursor() as c:
            return count_on(c, span)

    with ThreadPoolExecutor(len(spans), thread_name_prefix="count") as pool:
        return sum(pool.map(count, spans))


def _count_sql(table: str) -> str:
    """``SELECT COUNT(*) FROM`` the table ``WHERE`` (a span's condition follows), in pymysql's form."""
    db, t = table.split(".", 1)
    return pyformat(f"SELECT COUNT(*) FROM {quote_ident(db)}.{quote_ident(t)} WHERE ")


def count_spans(table: str, chunks: list[Chunk], parallelism: int) -> list[Chunk]:
    """The spans :func:`mysql_rows` counts ``table`` by: ``parallelism`` spans of consecutive
    ``chunks`` (its plan), or the whole table without a plan."""
    ordered = sorted(chunks, key=lambda c: c.index)
    return [Chunk.span(g) for g in chunk_groups(ordered, math.ceil(len(ordered) / parallelism))] if ordered \
        else [Chunk(table, 0, WHOLE_TABLE)]


COUNT_BATCH = 100  # tables of one span counted by one statement (count_single_spans)


def count_single_spans(cur, spans: dict[str, Chunk]) -> dict[str, int]:
    """Rows of each table of ``spans`` (table -> its one span), ``COUNT_BATCH`` tables to a
    statement (their COUNTs joined by UNION ALL) on ``cur``: a statement per small table was a
    round trip each, most of the check of many small tables (bench/many_tables.py)."""
    out: dict[str, int] = {}
    tables = list(spans)
    for i in range(0, len(tables), COUNT_BATCH):
        batch, parts, params = tables[i:i + COUNT_BATCH], [], []
        for n, table in enumerate(batch):
            where, p = spans[table].where()
            parts.append(f"SELECT {n}, ({_count_sql(table)}{where})")
            params.extend(p)
        cur.execute(" UNION ALL ".join(parts), params)
        for n, rows in cur.fetchall():
            out[batch[n]] = rows
    return out
