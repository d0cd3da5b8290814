"""What the snapshot reads: each table's baseline schema and chunk plan, stored before any
of its chunks is read, and the plan's pending chunks cut into groups, one task each.

Invariants:
- A table's baseline schema is recorded at a binlog position taken before the schema was
  read, so a DDL after it is found by the driver's check (tests/test_schema_at_position.py).
- A table's plan is stored before any of its chunks is read and reused on resume, so
  completed and redone chunks always tile the same key space (tests/test_snapshot_resume.py).
- A group is a run of consecutive pending chunks: read as one range, it never spans a
  chunk committed earlier (tests/test_snapshot_faults.py).
- A table the stream already owns (Delta holds its rows, no snapshot planned it) is not
  planned: a snapshot would append every row a second time (tests/test_stream.py).
"""

from __future__ import annotations

import math

from cdc_core.chunks.consistent_read import reports_snapshot_position
from cdc_core.chunks.planning import Chunk, choose_chunk_key, plan_chunks
from cdc_core.config import BinlakeConfig, SnapshotConfig
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.routes import Router
from cdc_core.schema.history import HistoryEntry, Status
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import connect, connection_settings, describe_captured
from pipelines.lake.control_store import ControlStore
from pipelines.lake.reads import count_rows
from pipelines.lake.tables import DeltaTable, open_table, table_uri

# Each group is one Spark job of one task, read between one pair of watermarks. Few groups
# per task slot keep the slots busy without paying a job's ~80 ms many times over; the
# row cap (source.snapshot.max_rows_per_task) bounds what a crash makes us read again
# (bench/snapshot.py --profile).
TARGET_GROUPS_PER_SLOT = 2


def plan_tables(cfg: BinlakeConfig, store: ControlStore, cur, schemas: list[TableSchema], at: BinlogPosition
                ) -> dict[str, list[Chunk]]:
    """Record the tables' baseline schemas at ``at`` (a binlog position taken before
    ``schemas`` were read: a DDL after it is found by the snapshot's check), then plan their
    chunks and store the plans (before any chunk of them is read); the plans by table. Two
    control-table commits whatever the number of tables: one commit per table made a
    snapshot of many small tables pay two Delta commits per table (bench/many_tables.py)."""
    if not schemas:
        return {}
    store.record_schema(*(HistoryEntry(s.qualified_name, at, 0, "baseline", Status.BASELINE, schema=s,
                                       description="schema at snapshot start") for s in schemas))
    plans = {s.qualified_name: plan_chunks(cur, s, choose_chunk_key(cur, s, cfg.source.snapshot.chunk_key_columns,
                                                                 lambda: reports_snapshot_position(cur)),
                                           cfg.source.snapshot.chunk_size) for s in schemas}
    store.save_plan([c for chunks in plans.values() for c in chunks])
    return plans


def streamed_already(router: Router, name: str, plans: dict[str, list[Chunk]], table: DeltaTable | None) -> bool:
    """Whether the stream owns ``name``: Delta holds rows of it and no snapshot planned it (it
    was streamed from the stream's first start, from its CREATE TABLE, or backfilled). A
    snapshot would append every row a second time; ``binlake backfill`` re-reads it online."""
    return name not in plans and table is not None and count_rows(table, name if router.routed(name) else None) > 0


def plan_snapshot(cfg: BinlakeConfig, names: list[str]) -> dict[str, list[Chunk]]:
    """The chunk plans of the captured tables ``names``: stored ones as they are, the
    others planned now against the source and stored (none for a table the stream already
    wrote: ``streamed_already``)."""
    store = ControlStore.of(cfg)
    plans = store.load_plans()
    router = Router(cfg.routes)
    missing = [n for n in names if n not in plans and not streamed_already(router, n, plans, open_table(
        table_uri(cfg.sink.path, router.sink(n)), cfg.sink.storage_options))]
    if missing:
        with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
            at = master_position(cur, store.position_base())
            plans.update(plan_tables(cfg, store, cur, list(describe_captured(cur, missing, cfg.source).values()), at))
    return {n: plans[n] for n in names if n in plans}


def chunk_groups(chunks: list[Chunk], size: int) -> list[list[Chunk]]:
    """Runs of at most ``size`` chunks with consecutive indexes: a group is read as one range
    (``Chunk.span``), so it must never bridge a chunk already committed by an earlier run
    (that chunk's rows would be written twice; tests/test_snapshot_faults.py)."""
    groups: list[list[Chunk]] = []
    for c in chunks:
        if groups and len(groups[-1]) < size and groups[-1][-1].index + 1 == c.index:
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def group_size(pending: int, slots: int, snap: SnapshotConfig) -> int:
    """Chunks per group for ``pending`` chunks on ``slots`` task slots: about
    ``TARGET_GROUPS_PER_SLOT`` groups per slot, at most ``max_rows_per_task`` rows each."""
    size = max(1, math.ceil(pending / (slots * TARGET_GROUPS_PER_SLOT)))
    return max(1, min(size, snap.max_rows_per_task // snap.chunk_size))
