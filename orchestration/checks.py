"""Asset checks on every table: row-count parity (MySQL vs Delta), schema parity (every
source column in Delta with the type binlake maps it to), lag under ``dagster.max_lag_seconds``,
and Dagster's column-schema change check (latest vs previous materialization). Freshness
is each spec's ``FreshnessPolicy`` (see orchestration/translator.py). The checks run on the
schedule ``binlake_checks_schedule`` (hourly) and from the UI.

Tests: tests/test_dagster_snapshot.py (checks after a snapshot).
"""


from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetSelection,
    ScheduleDefinition,
    build_column_schema_change_checks,
    define_asset_job,
    multi_asset_check,
)

from orchestration.translator import table_of
from resources.binlake import BinlakeResource

ROW_COUNT, SCHEMA, LAG = "row_count_parity", "schema_parity", "lag_under_bound"


def _row_count(cur, cfg, router, table: str) -> AssetCheckResult:
    from cdc_core.table_schema import quote_ident
    from pipelines.delta_sink import count_rows, open_table, table_uri

    db, name = table.split(".", 1)
    cur.execute(f"SELECT COUNT(*) FROM {quote_ident(db)}.{quote_ident(name)}")
    mysql_rows = cur.fetchone()[0]
    dt = open_table(table_uri(cfg.sink.path, router.sink(table)), cfg.sink.storage_options)
    delta_rows = count_rows(dt, table if router.routed(table) else None) if dt is not None else 0
    return AssetCheckResult(asset_key=AssetKey(table.split(".", 1)), check_name=ROW_COUNT,
                            passed=mysql_rows == delta_rows, severity=AssetCheckSeverity.WARN,
                            description=None if mysql_rows == delta_rows else
                            "counts differ (the stream may not have applied the latest changes yet)",
                            metadata={"binlake/mysql_rows": mysql_rows, "binlake/delta_rows": delta_rows,
                                      "binlake/difference": delta_rows - mysql_rows})


def _schema(cur, cfg, router, table: str) -> AssetCheckResult:
    from cdc_core.chunk_reader import output_schema
    from cdc_core.table_schema import describe_table
    from pipelines.delta_sink import open_table, table_uri
    from pipelines.schema_applier import delta_schema

    expected = output_schema(describe_table(cur, *table.split(".", 1)))
    dt = open_table(table_uri(cfg.sink.path, router.sink(table)), cfg.sink.storage_options)
    actual = {f.name: f.type for f in delta_schema(dt)} if dt is not None else {}
    missing = [f.name for f in expected if f.name not in actual]
    differ = [f"{f.name}: MySQL maps to {f.type}, Delta has {actual[f.name]}" for f in expected
              if f.name in actual and actual[f.name] != f.type]
    extra = sorted(set(actual) - set(expected.names))
    return AssetCheckResult(asset_key=AssetKey(table.split(".", 1)), check_name=SCHEMA,
                            passed=not missing and not differ,
                            metadata={"binlake/missing_in_delta": ", ".join(missing) or "none",
                                      "binlake/type_differences": "; ".join(differ) or "none",
                                      "binlake/only_in_delta": ", ".join(extra) or "none"})


def _lag(key: AssetKey, status: dict, bound: float) -> AssetCheckResult:
    """From ``binlake status``: lag in seconds under the bound (a warning while the table is not streamed)."""
    seconds = status.get("lag_seconds")
    metadata = {"binlake/lag_seconds": seconds, "binlake/lag_bytes": status.get("lag_bytes"),
                "binlake/max_lag_seconds": bound, "binlake/phase": status.get("phase", "not captured")}
    return AssetCheckResult(
        asset_key=key, check_name=LAG, passed=seconds is not None and seconds <= bound,
        severity=AssetCheckSeverity.ERROR if seconds is not None else AssetCheckSeverity.WARN,
        description=None if seconds is not None else f"no lag known yet: {metadata['binlake/phase']}",
        metadata={k: v for k, v in metadata.items() if v is not None})


def table_checks(keys: list[AssetKey]):
    """Row-count parity, schema parity and lag for the tables ``keys``."""
    specs = [AssetCheckSpec(name, asset=k, description=d) for k in keys for name, d in (
        (ROW_COUNT, "MySQL and Delta hold the same number of rows"),
        (SCHEMA, "every MySQL column is in Delta with the type binlake maps it to"),
        (LAG, "the stream's lag is under dagster.max_lag_seconds"))]

    @multi_asset_check(specs=specs, can_subset=True, name="binlake_table_checks")
    def _checks(context: AssetCheckExecutionContext, binlake: BinlakeResource):
        from cdc_core.routes import Router
        from cdc_core.source import connect, connection_settings
        from pipelines.status import pipeline_status

        cfg = binlake.load()
        router = Router(cfg.routes)
        selected = context.selected_asset_check_keys
        lag = {t["table"]: t for t in pipeline_status(cfg)["tables"]} if any(k.name == LAG for k in selected) else {}
        with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
            for key in sorted(selected, key=lambda k: (k.asset_key.to_string(), k.name)):
                table = table_of(key.asset_key)
                if key.name == ROW_COUNT:
                    yield _row_count(cur, cfg, router, table)
                elif key.name == SCHEMA:
                    yield _schema(cur, cfg, router, table)
                else:
                    yield _lag(key.asset_key, lag.get(table, {}), cfg.dagster.max_lag_seconds)

    return _checks


def all_checks(keys: list[AssetKey]) -> list:
    """binlake's checks and Dagster's column-schema change checks for ``keys``."""
    if not keys:
        return []
    return [table_checks(keys), *build_column_schema_change_checks(assets=keys)]


checks_job = define_asset_job("binlake_checks", selection=AssetSelection.all_asset_checks(),
                              description="Run every binlake asset check (row counts, schemas, lag, column changes)")
checks_schedule = ScheduleDefinition(name="binlake_checks_schedule", job=checks_job, cron_schedule="0 * * * *")
