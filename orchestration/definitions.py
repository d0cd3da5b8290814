"""Dagster code location: one asset per captured table, materialised by the chunked
snapshot on Spark, with row counts and chunk watermarks as asset metadata and an
asset check comparing Delta with MySQL row by row; and the schema-change sensor with
the job it launches (orchestration/schema_changes.py).

The table list is read from MySQL when the code location loads; if the source is
unreachable, the location still loads (with no table assets) and says why in the
logs, so the UI never breaks on a database outage.
"""


import logging

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    Definitions,
    MaterializeResult,
    define_asset_job,
    multi_asset,
)

from cdc_core.config import load_config
from orchestration.schema_changes import apply_schema_changes, schema_change_sensor
from pipelines.delta_sink import table_uri
from resources.binlake import BinlakeConfigResource, SparkResource, config_path

log = logging.getLogger(__name__)


def asset_key(table: str) -> AssetKey:
    db, name = table.split(".", 1)
    return AssetKey([db, name])


def discover_tables(path: str) -> list[str]:
    """Captured tables, or [] when the config or the source cannot be read."""
    from cdc_core.source import captured_tables, connect, connection_settings

    try:
        cfg = load_config(path)
        with connect(connection_settings(cfg), connect_timeout=5) as conn, conn.cursor() as cur:
            return captured_tables(cfg, cur)
    except Exception as e:  # noqa: BLE001 - a broken config or source must not break the UI
        log.warning("binlake: no table assets: %s", e)
        return []


def build_definitions(path: str) -> Definitions:
    """Definitions for the config at ``path``."""
    tables = discover_tables(path)
    specs = [AssetSpec(asset_key(t), group_name="binlake", kinds={"mysql", "delta"},
                       description=f"Delta copy of MySQL table {t}") for t in tables]
    checks = [AssetCheckSpec("delta_equals_mysql", asset=asset_key(t),
                             description="Delta equals MySQL row by row") for t in tables]
    by_key = {asset_key(t): t for t in tables}
    assets = []
    if specs:

        @multi_asset(specs=specs, check_specs=checks, can_subset=True, name="binlake_snapshot")
        def snapshot_tables(context: AssetExecutionContext, binlake: BinlakeConfigResource, spark: SparkResource):
            """Chunked, lock-free snapshot of the selected tables (resumable; no-op once done)."""
            from cdc_core.routes import Router
            from cdc_core.source import connect, connection_settings
            from pipelines.reconcile import compare_table
            from pipelines.snapshot_job import SnapshotJob

            cfg = binlake.load()
            selected = {by_key[k] for k in context.selected_asset_keys}

            def progress(done: int, total: int, rows: int) -> None:
                context.log.info(f"snapshot: {done}/{total} chunks, {rows:,} rows")

            summary = SnapshotJob(cfg, spark.session(cfg), progress, only=selected).run()
            router = Router(cfg.routes)
            with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
                for s in summary.tables:
                    # A routed table's rows live in its route's sink table (delta_rows: this source's rows).
                    uri = table_uri(cfg.sink.path, router.sink(s.table))
                    yield MaterializeResult(asset_key=asset_key(s.table), metadata={
                        "delta_rows": s.delta_rows, "mysql_rows": s.mysql_rows, "chunks": s.chunks,
                        "chunks_read_now": s.chunks_read, "path": uri, "sink": router.sink(s.table),
                        "phase": "snapshot complete",
                    })
                    diff = compare_table(cur, cfg, s.table)
                    yield AssetCheckResult(asset_key=asset_key(s.table), check_name="delta_equals_mysql",
                                           passed=diff.equal, metadata={"detail": diff.describe()})

        assets.append(snapshot_tables)
    return Definitions(
        assets=assets,
        jobs=[apply_schema_changes, *([define_asset_job("snapshot_job", selection=[s.key for s in specs])]
                                      if specs else [])],
        sensors=[schema_change_sensor],
        resources={"binlake": BinlakeConfigResource(path=path), "spark": SparkResource()},
    )


defs = build_definitions(config_path())
