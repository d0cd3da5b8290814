"""Asset checks on every table: row-count parity (MySQL vs Delta), schema parity (every
source column in Delta with the type binlake maps it to), lag under ``dagster.max_lag_seconds``,
small files under ``sink.maintenance.max_small_files`` (with the table's upkeep as metadata:
files, bytes, bytes awaiting vacuum, last compaction and vacuum; orchestration/maintenance.py),
checksum parity (``binlake reconcile``'s per-chunk row counts and checksums, server vs
Delta, pipelines/reconcile/checksums.py), and Dagster's column-schema change check (latest
vs previous materialization). Freshness is each spec's ``FreshnessPolicy`` (see
resources/translator.py).

The cheap checks run hourly (job ``binlake_checks``, schedule ``binlake_checks_schedule``);
checksum parity reads every row on both sides, so it is the nightly reconciliation (job
``binlake_reconcile``, schedule ``binlake_reconcile_schedule`` at ``dagster.reconcile_cron``).
A failed checksum check lists the differing chunks; the job ``binlake_repair``
(orchestration/backfill.py) backfills exactly those and records the check again.

The cheap checks are defined ``CHECK_GROUP`` tables to an op (``binlake_table_checks``, then
``binlake_table_checks_2``…; Dagster's column-schema checks likewise): resolving a job costs
Dagster, per checked asset of an op, a pass over every check key of that op, so one op over
all tables is quadratic in the tables (2,000 tables: seconds per job). Checksum parity stays
one op, ``binlake_checksum_checks``, whose run config (``ReconcileConfig``) users set by name.

Tests: tests/test_dagster_snapshot.py (checks after a snapshot), tests/test_dagster_stream.py
(a damaged table's checksum check fails, the repair job repairs it).
"""


from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetSelection,
    Config,
    MetadataValue,
    ScheduleDefinition,
    TableColumn,
    TableRecord,
    TableSchema,
    build_column_schema_change_checks,
    define_asset_job,
    multi_asset_check,
)

from pipelines.reconcile.checksums import DEFAULT_RECHECK_WAIT, DEFAULT_RECHECKS
from resources.binlake import BinlakeResource
from resources.translator import table_of

ROW_COUNT, SCHEMA, LAG, CHECKSUM = "row_count_parity", "schema_parity", "lag_under_bound", "checksum_parity"
SMALL_FILES = "small_files_under_bound"
CHECKS_JOB, RECONCILE_JOB, REPAIR_JOB = "binlake_checks", "binlake_reconcile", "binlake_repair"


def _row_count(cur, cfg, router, table: str) -> AssetCheckResult:
    from cdc_core.schema.table import quote_ident
    from pipelines.lake.reads import count_rows
    from pipelines.lake.tables import open_table, table_uri

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
    from cdc_core.schema.output import output_schema
    from cdc_core.schema.table import describe_table
    from pipelines.lake.tables import delta_schema, open_table, table_uri

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


def _small_files(key: AssetKey, cfg, router, table: str, runs: dict) -> AssetCheckResult:
    """The table's small files under ``sink.maintenance.max_small_files``, its upkeep as metadata."""
    from orchestration.maintenance import upkeep_metadata
    from pipelines.lake.maintenance.upkeep import upkeep
    from pipelines.lake.tables import open_table, table_uri

    sink, bound = router.sink(table), cfg.sink.maintenance.max_small_files
    dt = open_table(table_uri(cfg.sink.path, sink), cfg.sink.storage_options)
    if dt is None:
        return AssetCheckResult(asset_key=key, check_name=SMALL_FILES, passed=True, description="no Delta table yet")
    u = upkeep(cfg, sink, dt, runs)
    return AssetCheckResult(
        asset_key=key, check_name=SMALL_FILES, passed=u.small_files <= bound, severity=AssetCheckSeverity.WARN,
        description=None if u.small_files <= bound else
        f"{u.small_files} small files (bound {bound}): compaction is off (sink.maintenance.auto) or behind; launch "
        "binlake_maintenance",
        metadata={**upkeep_metadata(u), "binlake/max_small_files": bound})


CHECK_GROUP = 50  # tables per op of the cheap checks (see the module docstring)


def table_checks(keys: list[AssetKey], name: str = "binlake_table_checks"):
    """Row-count parity, schema parity, lag and small files for the tables ``keys``, as the op ``name``."""
    specs = [AssetCheckSpec(name, asset=k, description=d) for k in keys for name, d in (
        (ROW_COUNT, "MySQL and Delta hold the same number of rows"),
        (SCHEMA, "every MySQL column is in Delta with the type binlake maps it to"),
        (LAG, "the stream's lag is under dagster.max_lag_seconds"),
        (SMALL_FILES, "the Delta table's small files are under sink.maintenance.max_small_files"))]

    @multi_asset_check(specs=specs, can_subset=True, name=name)
    def _checks(context: AssetCheckExecutionContext, binlake: BinlakeResource):
        from cdc_core.routes import Router
        from cdc_core.source.connection import connect, connection_settings
        from pipelines.status import pipeline_status

        cfg = binlake.load()
        router = Router(cfg.routes)
        from pipelines.lake.control_store import ControlStore

        selected = context.selected_asset_check_keys
        lag = {t["table"]: t for t in pipeline_status(cfg)["tables"]} if any(k.name == LAG for k in selected) else {}
        runs = ControlStore.of(cfg).latest_maintenance() if any(k.name == SMALL_FILES for k in selected) else {}
        with connect(connection_settings(cfg)) as conn, conn.cursor() as cur:
            for key in sorted(selected, key=lambda k: (k.asset_key.to_string(), k.name)):
                table = table_of(key.asset_key)
                if key.name == ROW_COUNT:
                    yield _row_count(cur, cfg, router, table)
                elif key.name == SCHEMA:
                    yield _schema(cur, cfg, router, table)
                elif key.name == SMALL_FILES:
                    yield _small_files(key.asset_key, cfg, router, table, runs)
                else:
                    yield _lag(key.asset_key, lag.get(table, {}), cfg.dagster.max_lag_seconds)

    return _checks


DIFFERING = TableSchema(columns=[
    TableColumn("chunk", "int"), TableColumn("key", "string"), TableColumn("from", "string"),
    TableColumn("to", "string", description="exclusive"), TableColumn("mysql_rows", "int"),
    TableColumn("delta_rows", "int")])


def checksum_result(r) -> AssetCheckResult:
    """A table's reconcile result (``pipelines.reconcile.checksums.TableReconcile``) as its
    ``checksum_parity`` check: fails (ERROR) while chunks differ, listing them."""
    metadata = {
        "binlake/chunks_checked": r.chunks_checked,
        "binlake/differing_chunks": len(r.mismatches),
        "binlake/mysql_rows": r.mysql_rows,
        "binlake/delta_rows": r.delta_rows,
        "binlake/delta_version": r.delta_version,
        "binlake/excluded_columns": "; ".join(f"{c} ({why})" for c, why in r.excluded.items()) or "none",
        "binlake/whole_table": r.whole_table,
        "binlake/seconds": round(r.seconds, 2),
    }
    if r.mismatches:
        metadata.update({
            "binlake/differing": MetadataValue.table(schema=DIFFERING, records=[TableRecord({
                "chunk": m.index, "key": m.key or "(whole table)", "from": "-" if m.lo is None else str(m.lo),
                "to": "-" if m.hi is None else str(m.hi), "mysql_rows": m.mysql_rows, "delta_rows": m.delta_rows})
                for m in r.mismatches]),
            "binlake/rechecks": r.rechecks,
            "binlake/server_position": str(r.server_position) if r.server_position else None,
            "binlake/stream_position": str(r.stream_position) if r.stream_position else None})
    description = (f"{len(r.mismatches)} of {r.chunks_checked} chunks differ after {r.rechecks} re-checks: launch "
                   f"{REPAIR_JOB} (tables: [{r.table}]) to backfill them" if r.mismatches else
                   f"{r.chunks_checked} chunks: counts and checksums equal")
    if r.excluded:
        description += f"; counted but not in the checksum: {', '.join(r.excluded)}"
    return AssetCheckResult(asset_key=AssetKey(r.table.split(".", 1)), check_name=CHECKSUM, passed=r.equal,
                            severity=AssetCheckSeverity.ERROR, description=description,
                            metadata={k: v for k, v in metadata.items() if v is not None})


class ReconcileConfig(Config):
    """How reconciliation re-checks a differing chunk before reporting it (``binlake reconcile
    --rechecks/--recheck-wait``): the stream may be catching up on it."""

    rechecks: int = DEFAULT_RECHECKS
    recheck_wait_seconds: float = DEFAULT_RECHECK_WAIT

    def reconcile(self, cfg, tables: list[str] | None, context=None):
        """``reconcile_tables`` of ``tables`` (None: every captured table), recorded in
        ``_binlake/reconcile_runs``; each table's end is logged to ``context``."""
        from pipelines.reconcile.checksums import reconcile_tables

        def progress(table: str, done: int, total: int) -> None:
            if context is not None and done == total:
                context.log.info(f"reconcile {table}: {total} chunks summed on the server")

        return reconcile_tables(cfg, tables, rechecks=self.rechecks, recheck_wait=self.recheck_wait_seconds,
                                progress=progress)


def checksum_checks(keys: list[AssetKey]):
    """Checksum parity (``binlake reconcile`` without repair) for the tables ``keys``."""
    specs = [AssetCheckSpec(CHECKSUM, asset=k, description="per snapshot chunk, MySQL and Delta hold the same "
                                                           "rows: counts and checksums (binlake reconcile)")
             for k in keys]

    @multi_asset_check(specs=specs, can_subset=True, name="binlake_checksum_checks")
    def _checks(context: AssetCheckExecutionContext, config: ReconcileConfig, binlake: BinlakeResource):
        tables = sorted(table_of(k.asset_key) for k in context.selected_asset_check_keys)
        for r in config.reconcile(binlake.load(), tables, context).tables:
            yield checksum_result(r)

    return _checks


def groups(keys: list[AssetKey]) -> list[list[AssetKey]]:
    """``keys`` in consecutive groups of ``CHECK_GROUP``."""
    return [keys[i:i + CHECK_GROUP] for i in range(0, len(keys), CHECK_GROUP)]


def all_checks(keys: list[AssetKey]) -> list:
    """binlake's checks and Dagster's column-schema change checks for ``keys``."""
    if not keys:
        return []
    cheap = [table_checks(group, "binlake_table_checks" + (f"_{i}" if i > 1 else ""))
             for i, group in enumerate(groups(keys), 1)]
    schema_changes = [c for group in groups(keys) for c in build_column_schema_change_checks(assets=group)]
    return [*cheap, checksum_checks(keys), *schema_changes]


def check_jobs(keys: list[AssetKey], reconcile_cron: str) -> tuple[list, list]:
    """The jobs and schedules of the checks on ``keys``: the cheap ones hourly
    (``binlake_checks``), checksum parity nightly (``binlake_reconcile``)."""
    checksum = AssetSelection.checks(*[AssetCheckKey(k, CHECKSUM) for k in keys])
    checks = define_asset_job(CHECKS_JOB, selection=AssetSelection.all_asset_checks() - checksum,
                              description="Row counts, schemas, lag and column changes of every table (hourly)")
    reconcile = define_asset_job(RECONCILE_JOB, selection=checksum,
                                 description="Checksum parity of every table, chunk by chunk (binlake reconcile); "
                                             f"repair what differs with {REPAIR_JOB}")
    return [checks, reconcile], [
        ScheduleDefinition(name="binlake_checks_schedule", job=checks, cron_schedule="0 * * * *"),
        ScheduleDefinition(name="binlake_reconcile_schedule", job=reconcile, cron_schedule=reconcile_cron)]
