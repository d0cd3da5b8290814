"""The stream's Delta tables, by sink name (a routed source's route sink, else the
source's own table): opened once, created when missing, their schemas noted, and
their own committed offsets read for the restart's skip filter.

Invariants (tests/test_routes.py, tests/test_stream_crash.py):
- A Delta table is created with the schema of the source at the position the stream
  first needs it (its baseline, its CREATE TABLE, or its first table map); a route's
  sink with the widest schema of its known sources (cdc_core/routes.py).
- ``skip_filter`` reads each table's own offset (its Delta transaction version), so a
  change a table committed before a crash is not applied again even when the pipeline
  checkpoint is older (cdc_core/offset/stream_offset.py).
- A table holds the columns of its mode (cdc_core/schema/modes.py): metadata columns a table
  lacks are added (its earlier rows NULL); a table whose mode columns differ from its
  configured mode's is refused, never converted (tests/test_history_stream.py).
- After a stream commit that wrote a checkpoint the table's handle is opened afresh from it and
  reads the same (:meth:`Sinks.committed`; tests/test_maintenance.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from cdc_core.config import BinlakeConfig
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import StartupError
from cdc_core.offset.stream_offset import SkipFilter
from cdc_core.routes import Router, sink_schema
from cdc_core.schema.modes import CDC_POSITION, CDC_TS, FEED_COLUMNS, FEED_SUFFIX, MODE_COLUMNS, SinkColumns
from cdc_core.schema.output import output_schema
from cdc_core.schema.table import TableSchema
from pipelines.lake.maintenance.layout import create_table
from pipelines.lake.offsets import applied_position_key
from pipelines.lake.tables import (
    BINLAKE_TABLE_PROPERTIES,
    DeltaTable,
    add_columns,
    checkpoint_interval,
    delta_schema,
    ensure_table,
    open_table,
    refresh,
    table_uri,
    worn,
)

# Delta tables opened or created at once (:meth:`Sinks.open_all`), as many as the stream commits
# at once (pipelines/stream/commit.py: COMMIT_THREADS).
OPEN_THREADS = 16


class Sinks:
    """Open Delta tables and their schemas, by sink name."""

    def __init__(self, cfg: BinlakeConfig, router: Router):
        self.cfg = cfg
        self.router = router
        self.tables: dict[str, DeltaTable] = {}
        self.schemas: dict[str, pa.Schema] = {}
        self.feeds: dict[str, DeltaTable] = {}  # changelog tables, by their table's sink name
        self._columns: dict[str, SinkColumns] = {}
        self._held: set[str] = set()  # tables whose columns were checked against their mode

    def __contains__(self, sink: str) -> bool:
        return sink in self.tables

    def open(self, name: str, schema: TableSchema, members: dict[str, TableSchema]) -> DeltaTable:
        """The Delta table of source ``name`` (created empty with ``schema`` if missing; a
        route's sink with the widest schema of ``members``, its known sources)."""
        sink = self.router.sink(name)
        routed = self.router.routed(name)
        self.expect(name, schema)
        dt = self.tables.get(sink)
        if dt is not None:
            if not routed and sink not in self._held:
                self._hold_mode(sink, dt)
            return dt
        if routed:
            known = [members[n] for n in self.router.sources(sink, members)] or [schema]
            target = sink_schema(known, sink=sink)
        else:
            target = output_schema(schema, self.columns(sink).fields())
        dt = create_table(self.cfg.sink, table_uri(self.cfg.sink.path, sink), sink, target)
        if not routed:
            self._hold_mode(sink, dt)
        self.tables[sink] = dt
        self.schemas[sink] = delta_schema(dt)
        return dt

    def expect(self, name: str, schema: TableSchema) -> None:
        """Note the mode and metadata columns of source ``name``'s Delta table (:meth:`columns`)
        before it is opened: its batch is built with them."""
        sink = self.router.sink(name)
        if not self.router.routed(name) and sink not in self._columns:
            self._columns[sink] = SinkColumns.of(self.cfg.sink, sink).applied(schema, routed=False)

    def open_all(self, sources: dict[str, TableSchema], members: dict[str, TableSchema]) -> None:
        """:meth:`open` each of ``sources`` (name -> schema), the Delta tables not open yet in
        parallel: a table's creation or first load is mostly waiting on the store, and a stream that
        meets many new tables at once would otherwise wait for each in turn (bench/many_tables.py)."""
        # (a route's sources share a sink: they are opened one after another, below)
        fresh = sorted(n for n in sources if not self.router.routed(n) and self.router.sink(n) not in self.tables)
        if len(fresh) > 1:
            with ThreadPoolExecutor(min(len(fresh), OPEN_THREADS), thread_name_prefix="open") as pool:
                for f in [pool.submit(self.open, n, sources[n], members) for n in fresh]:
                    f.result()
        for name, schema in sources.items():  # the rest, and those open already (their mode checked)
            self.open(name, schema, members)

    def columns(self, sink: str) -> SinkColumns:
        """The mode and metadata columns of Delta table ``sink`` as opened (cdc_core/schema/modes.py:
        ``SinkColumns.applied``; the default layout for a routed sink)."""
        return self._columns.get(sink) or SinkColumns()

    def _hold_mode(self, sink: str, dt: DeltaTable) -> None:
        """Give ``dt`` the metadata columns it lacks; refuse it when its mode's columns differ
        from the configured mode's (see the module invariants)."""
        names = set(delta_schema(dt).names)
        wanted = self.columns(sink).fields()
        mode = {f.name for f in wanted} - {CDC_TS, CDC_POSITION}
        have = (names & MODE_COLUMNS) - {CDC_TS, CDC_POSITION}
        if have != mode:
            raise StartupError(
                f"{sink}: its Delta table was made for another mode than {self.columns(sink).mode} "
                f"(sink.table_modes; it has {', '.join(sorted(have)) or 'no mode column'}): a table changes "
                "mode only when made again (remove its folder, then snapshot or backfill it)")
        missing = [f for f in wanted if f.name not in names]
        if missing:
            add_columns(dt, missing, None)
        self._held.add(sink)

    def feed(self, sink: str, schema: TableSchema) -> DeltaTable:
        """The changelog table of ``sink`` (created with ``schema``'s columns if missing)."""
        dt = self.feeds.get(sink)
        if dt is None:
            dt = self.feeds[sink] = ensure_table(table_uri(self.cfg.sink.path, sink + FEED_SUFFIX),
                                                 output_schema(schema, FEED_COLUMNS.fields()),
                                                 self.cfg.sink.storage_options,
                                                 configuration=BINLAKE_TABLE_PROPERTIES)
        return dt

    def existing(self, sink: str) -> DeltaTable | None:
        """The Delta table ``sink`` if it exists (opened and kept), without creating it."""
        if sink not in self.tables:
            dt = open_table(table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options)
            if dt is None:
                return None
            self.tables[sink], self.schemas[sink] = dt, delta_schema(dt)
            if not self.router.is_sink(sink):
                self._columns.setdefault(sink, SinkColumns.of(self.cfg.sink, sink))
        return self.tables[sink]

    def refresh(self, sink: str) -> None:
        """Read the table's latest version (after another process or a schema change committed)."""
        dt = self.tables[sink]
        refresh(dt)
        self.schemas[sink] = delta_schema(dt)

    def reopen(self, sink: str) -> None:
        """Open ``sink`` afresh, from its latest checkpoint: a handle kept for the stream's life
        grows with every commit it has seen (delta-rs keeps their state), so maintenance reopens
        it after each vacuum, which writes a checkpoint (tests/test_maintenance.py)."""
        dt = open_table(table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options)
        if dt is not None:
            self.tables[sink] = dt

    def committed(self, sink: str) -> None:
        """After the stream's commit to ``sink``: when that commit wrote a checkpoint, the handle is
        opened afresh from it. delta-rs's commit replays its handle's commits since the checkpoint
        it was loaded from, one-row commits costing about 4.6 ms just after a checkpoint and 15-25 ms
        100 commits later, and a kept handle never moves to a newer checkpoint; opened right after
        one, it replays at most an interval's commits (bench/commit_growth.py). The open reads that
        checkpoint and no commit after it."""
        dt = self.tables[sink]
        if (dt.version() + 1) % checkpoint_interval(dt) == 0:
            self.reopen(sink)

    def renew(self) -> None:
        """Open afresh, from their latest checkpoint, the tables and changelog tables whose handles
        are worn (pipelines/lake/tables.py: ``RENEW_VERSIONS`` says why); they read the same rows."""
        for sink in [s for s, dt in self.tables.items() if worn(dt)]:
            self.reopen(sink)
        for sink in [s for s, dt in self.feeds.items() if worn(dt)]:
            fresh = open_table(table_uri(self.cfg.sink.path, sink + FEED_SUFFIX), self.cfg.sink.storage_options)
            if fresh is not None:
                self.feeds[sink] = fresh

    def applied_key(self, sink: str) -> tuple[int, int] | None:
        """(file number, offset) of the last binlog event the stream committed to ``sink``."""
        return applied_position_key(self.tables[sink], self.cfg.pipeline.name)

    def skip_filter(self, checkpoint: BinlogPosition | None) -> SkipFilter:
        """What a (re)started reading must not apply again (cdc_core/offset/stream_offset.py)."""
        per_table = {}
        for sink, dt in self.tables.items():
            refresh(dt)
            key = applied_position_key(dt, self.cfg.pipeline.name)
            if key is not None:
                per_table[sink] = key
        return SkipFilter(checkpoint, per_table)
