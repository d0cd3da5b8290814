"""Stream offsets as asset metadata: each committed micro-batch becomes, per touched table,
an ``AssetMaterialization`` of the table's asset whose metadata is the Delta commit's own
offset (binlog file/pos, GTID, ``_cdc_seq``, Delta version), the rows it inserted,
updated and deleted, the lag in seconds and bytes, the Delta row count and column schema.
Tables the batch did not touch get a heartbeat at most every ``dagster.idle_offset_seconds``:
the stream's checkpoint, which covers them.

Invariants (tests/test_dagster_stream.py):
- A batch's metadata equals its Delta commit (``binlake/binlog_*`` and ``binlake/cdc_seq``
  are the commit's ``binlake.stream.offset`` and transaction version; ``binlake/delta_version``
  is the commit's version).
- An idle table's heartbeat is recorded at most once per ``idle_offset_seconds``.
- Lag in bytes is read from the source (``SHOW BINARY LOGS``) at most every
  ``LAG_REFRESH_SECONDS``; a source that cannot be reached leaves it out.
"""

from __future__ import annotations

import logging
import time

from dagster import AssetMaterialization, MetadataValue

from cdc_core.batch.table_commit import RowsApplied, TableCommit
from cdc_core.config import BinlakeConfig
from cdc_core.offset.startup import binlog_files, lag_bytes
from cdc_core.offset.stream_offset import StreamOffset
from cdc_core.routes import Router
from cdc_core.schema.modes import FEED_SUFFIX
from cdc_core.schema.table import TableSchema
from cdc_core.source.connection import connect, connection_settings
from pipelines.lake.reads import count_rows
from pipelines.lake.tables import open_table, table_uri
from pipelines.source_catalog import lake_columns, lake_tables
from resources.translator import asset_key, column_schema

log = logging.getLogger(__name__)

LAG_REFRESH_SECONDS = 5.0


def offset_metadata(offset: StreamOffset, now: float) -> dict:
    """The ``binlake/…`` metadata of a stream offset (without the source's binlog end)."""
    p = offset.applied
    return {
        "binlake/binlog_file": p.file,
        "binlake/binlog_pos": p.pos,
        "binlake/binlog_position": str(p),
        "binlake/gtid": offset.gtid or "",
        "binlake/cdc_seq": p.seq(),
        "binlake/lag_seconds": float(max(0.0, now - offset.event_time)) if offset.event_time else None,
    }


class OffsetRecorder:
    """Turns the stream engine's commit records and checkpoints into asset materializations."""

    def __init__(self, cfg: BinlakeConfig, tables: dict[str, TableSchema], *, clock=time.time,
                 monotonic=time.monotonic):
        self.cfg = cfg
        self.router = Router(cfg.routes)
        self.tables = tables  # captured tables by name (their source schemas, for column descriptions)
        self.clock, self.monotonic = clock, monotonic
        self.recorded: dict[str, float] = {}  # table → monotonic time of its last materialization
        self._files: list[tuple[str, int]] | None = None
        self._files_at = -LAG_REFRESH_SECONDS
        self._seen: dict[str, tuple[str, ...]] = {}  # Delta column names per table, as last recorded

    def _binlog_files(self) -> list[tuple[str, int]] | None:
        if self.monotonic() - self._files_at >= LAG_REFRESH_SECONDS:
            self._files_at = self.monotonic()
            try:
                with connect(connection_settings(self.cfg), connect_timeout=5) as conn, conn.cursor() as cur:
                    self._files = binlog_files(cur)
            except Exception as e:  # noqa: BLE001 - lag in bytes is informative; never stop the stream for it
                log.warning("binlake: binlog end not readable for lag in bytes: %s", e)
                self._files = None
        return self._files

    def _materialization(self, table: str, offset: StreamOffset, delta_version: int | None, rows: RowsApplied,
                         description: str) -> AssetMaterialization:
        sink = self.router.sink(table)
        dt = open_table(table_uri(self.cfg.sink.path, sink), self.cfg.sink.storage_options)
        files = self._binlog_files()
        metadata = {
            **offset_metadata(offset, self.clock()),
            "binlake/lag_bytes": lag_bytes(files, offset.applied) if files else None,
            "binlake/delta_version": delta_version if delta_version is not None else (dt.version() if dt else None),
            "binlake/rows_inserted": rows.inserted,
            "binlake/rows_updated": rows.updated,
            "binlake/rows_deleted": rows.deleted,
            "binlake/table_mode": self.cfg.sink.mode_of(sink) if not self.router.routed(table) else "current",
            "dagster/row_count": count_rows(dt, table if self.router.routed(table) else None) if dt else 0,
            # The table's files as the stream left them (compaction keeps them few: pipelines/lake/maintenance/).
            "binlake/live_files": len(dt.file_uris()) if dt else None,
        }
        if table in self.tables:
            metadata["dagster/column_schema"] = column_schema(self._columns(table))
        self.recorded[table] = self.monotonic()
        return AssetMaterialization(asset_key=asset_key(table), description=description,
                                    metadata={k: v for k, v in metadata.items() if v is not None}
                                    | {"binlake/event": MetadataValue.text(description)})

    def _columns(self, table: str) -> list:
        """The table's Delta columns; when they changed (a schema change was applied), the source
        schemas are read again from the schema history, so new columns carry their MySQL types."""
        columns = lake_columns(self.cfg, self.tables[table])
        names = tuple(c.name for c in columns)
        if self._seen.setdefault(table, names) != names:
            self._seen[table] = names
            self.tables.update({n: t for n, t in lake_tables(self.cfg).items() if n in self.tables})
            columns = lake_columns(self.cfg, self.tables[table])
        return columns

    def on_commits(self, commits: list[TableCommit]) -> list[AssetMaterialization]:
        """One materialization per source table of each commit of a batch, and one of the
        table's changelog when it has one (``sink.change_feed``)."""
        out = []
        for c in commits:
            for table in c.sources:
                out.append(self._materialization(table, c.offset, c.delta_version, c.rows, "stream batch committed"))
            if self.cfg.sink.feeds(c.table) and not self.router.is_sink(c.table):
                out.append(AssetMaterialization(
                    asset_key=asset_key(c.table + FEED_SUFFIX), description="changes appended",
                    metadata={k: v for k, v in offset_metadata(c.offset, self.clock()).items() if v is not None}))
        return out

    def on_checkpoint(self, offset: StreamOffset) -> list[AssetMaterialization]:
        """Heartbeats for captured tables not recorded for ``idle_offset_seconds``: the
        checkpoint covers them (nothing of theirs is pending before it)."""
        now = self.monotonic()
        idle = [t for t in self.tables
                if now - self.recorded.get(t, -float("inf")) >= self.cfg.dagster.idle_offset_seconds]
        return [self._materialization(t, offset, None, RowsApplied(), "idle: stream checkpoint heartbeat")
                for t in idle]

