"""From binlake's config and table catalog to Dagster asset specs, as dagster-sling's and
dagster-dlt's translators do: nothing here touches the source database.

Each captured table is one asset keyed ``[db, table]`` whose partitions are its snapshot
chunks (one dynamic partitions definition per table, keys ``chunk-0000``…); its spec
carries the Delta table's column schema (``dagster/column_schema``), its location, its
primary key and sink under ``binlake/…``, its mode (``binlake/table_mode``: current,
soft_delete or history) and metadata columns, the kinds mysql/delta/spark and the table's
freshness policy from ``dagster.freshness`` / ``dagster.table_freshness``. A table with a
change feed (``sink.change_feed``) has a second asset, its changelog table
``[db, table__changes]``, which depends on it.

Tests: tests/test_dagster_defs.py.
"""

from __future__ import annotations

from datetime import timedelta

from dagster import (
    AssetKey,
    AssetSpec,
    DynamicPartitionsDefinition,
    FreshnessPolicy,
    MetadataValue,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
)
from dagster._core.definitions.metadata import TableMetadataSet  # not exported at the top level in 1.13

from cdc_core.config import BinlakeConfig
from cdc_core.routes import Router
from cdc_core.schema.modes import FEED_SUFFIX, SinkColumns
from cdc_core.schema.output import is_reserved
from cdc_core.schema.table import TableSchema as SourceSchema
from pipelines.lake.tables import table_uri
from pipelines.source_catalog import LakeColumn, lake_columns

CHUNK_PREFIX = "chunk-"


def asset_key(table: str) -> AssetKey:
    """The asset key of captured table ``db.table``."""
    db, name = table.split(".", 1)
    return AssetKey([db, name])


def table_of(key: AssetKey) -> str:
    """The ``db.table`` of an asset key."""
    return ".".join(key.path)


def chunk_partition_key(index: int) -> str:
    return f"{CHUNK_PREFIX}{index:04d}"


def chunk_index(partition_key: str) -> int:
    return int(partition_key.removeprefix(CHUNK_PREFIX))


def chunk_partitions(table: str) -> DynamicPartitionsDefinition:
    """The dynamic partitions of a table's snapshot chunks (added when the chunks are planned)."""
    db, name = table.split(".", 1)
    return DynamicPartitionsDefinition(name=f"binlake_chunks__{db}__{name}")


def column_schema(columns: list[LakeColumn]) -> TableSchema:
    """A Delta table's columns as Dagster's column schema (the MySQL type as description)."""
    return TableSchema(columns=[
        TableColumn(c.name, c.delta_type,
                    description=f"MySQL {c.mysql_type}" if c.mysql_type else (
                        "binlake reserved column" if is_reserved(c.name) else "not in the source (kept)"),
                    constraints=TableColumnConstraints(nullable=c.nullable, unique=c.primary_key))
        for c in columns])


class BinlakeTranslator:
    """Builds the asset spec of a captured table; subclass to change keys, groups or metadata."""

    def __init__(self, cfg: BinlakeConfig):
        self.cfg = cfg
        self.router = Router(cfg.routes)

    def freshness_policy(self, table: str) -> FreshnessPolicy:
        f = self.cfg.dagster.freshness_for(table)
        warn = timedelta(seconds=f.warn_after_seconds) if f.warn_after_seconds else None
        return FreshnessPolicy.time_window(fail_window=timedelta(seconds=f.fail_after_seconds), warn_window=warn)

    def get_asset_spec(self, schema: SourceSchema) -> AssetSpec:
        table = schema.qualified_name
        sink = self.router.sink(table)
        uri = table_uri(self.cfg.sink.path, sink)
        routed = f" (routed into {sink}, its rows marked _cdc_source = '{table}')" if sink != table else ""
        return AssetSpec(
            key=asset_key(table),
            description=(f"Delta copy of MySQL table `{table}`{routed} at `{uri}`. Materialising chunk partitions "
                         "runs the lock-free snapshot on Spark; the binlog stream job then records each committed "
                         "micro-batch here: binlog position, `_cdc_seq`, Delta version, rows by op and lag."),
            group_name=schema.database,
            kinds={"mysql", "delta", "spark"},
            partitions_def=chunk_partitions(table),
            freshness_policy=self.freshness_policy(table),
            skippable=True,
            metadata={
                **TableMetadataSet(column_schema=column_schema(lake_columns(self.cfg, schema)), table_name=sink),
                "binlake/pipeline": self.cfg.pipeline.name,
                "binlake/source_table": table,
                "binlake/sink_table": sink,
                "binlake/delta_uri": MetadataValue.path(uri),
                "binlake/primary_key": ", ".join(schema.primary_key) or "(none)",
                **self.mode_metadata(schema),
            },
        )

    def columns(self, schema: SourceSchema) -> SinkColumns:
        """The mode and metadata columns of the table's Delta table (cdc_core/schema/modes.py)."""
        table = schema.qualified_name
        return SinkColumns.of(self.cfg.sink, self.router.sink(table)).applied(schema, self.router.routed(table))

    def mode_metadata(self, schema: SourceSchema) -> dict[str, str]:
        """``binlake/table_mode`` and ``binlake/metadata_columns`` of the table's Delta table."""
        c = self.columns(schema)
        return {"binlake/table_mode": str(c.mode),
                "binlake/metadata_columns": ", ".join(f.name for f in c.fields()) or "(none)"}

    def get_changelog_spec(self, schema: SourceSchema) -> AssetSpec | None:
        """The asset of the table's changelog table, or None when it has no change feed."""
        if not self.columns(schema).feed:
            return None
        table = schema.qualified_name
        uri = table_uri(self.cfg.sink.path, table + FEED_SUFFIX)
        return AssetSpec(
            key=asset_key(table + FEED_SUFFIX),
            description=(f"Change feed of `{table}` at `{uri}`: every change the stream applied, appended (op, "
                         "image, `_cdc_seq`, `_cdc_ts`, `_cdc_position`); read the changes since a `_cdc_seq` or "
                         "a time."),
            group_name=schema.database,
            kinds={"delta"},
            deps=[asset_key(table)],
            metadata={"binlake/pipeline": self.cfg.pipeline.name, "binlake/source_table": table,
                      "binlake/delta_uri": MetadataValue.path(uri), "binlake/table_mode": "changelog"},
        )
