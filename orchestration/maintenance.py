"""Lake maintenance from Dagster, for those who want it on a cron rather than (or besides) the
stream's own between batches (``sink.maintenance.auto``): the job ``binlake_maintenance``
compacts and vacuums the pipeline's tables now (pipelines/lake/maintenance/maintainer.py:
``maintain``): handed to the running stream job when one runs, else under the writer lock in
the run itself. Its schedule ``binlake_maintenance_schedule`` runs it at
``dagster.maintenance_cron``, stopped until turned on. Each table's asset gets an observation
with what was done and its upkeep after it (files, bytes, bytes awaiting vacuum, last
compaction and vacuum); the check ``small_files_under_bound`` (orchestration/checks.py)
fails while a table holds more small files than ``sink.maintenance.max_small_files``.

Tests: tests/test_dagster_stream.py, tests/test_dagster_defs.py.
"""

from dagster import (
    AssetObservation,
    Config,
    DefaultScheduleStatus,
    MetadataValue,
    OpExecutionContext,
    Output,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from resources.binlake import BinlakeResource
from resources.translator import asset_key

MAINTENANCE_JOB = "binlake_maintenance"


class MaintenanceRunConfig(Config):
    """What to maintain: captured tables ``db.table`` (empty: every table and the control tables)."""

    tables: list[str] = Field(default=[], description="Captured tables to compact and vacuum (empty: all)")
    timeout_seconds: float = Field(default=3600.0, description="Fail if the running stream has not done it by then")


def upkeep_metadata(upkeep) -> dict:
    """A table's upkeep (pipelines/lake/maintenance/upkeep.py) as asset metadata."""
    metadata = {"binlake/live_files": upkeep.live_files, "binlake/small_files": upkeep.small_files,
                "binlake/live_bytes": MetadataValue.int(upkeep.live_bytes),
                "binlake/bytes_awaiting_vacuum": MetadataValue.int(upkeep.bytes_awaiting_vacuum)}
    for kind, run in (("compaction", upkeep.last_compaction), ("vacuum", upkeep.last_vacuum)):
        if run is not None:
            metadata[f"binlake/last_{kind}_at"] = run.at
            metadata[f"binlake/last_{kind}"] = f"{run.did} ({run.reason})"
    return metadata


@op(description="Compact and vacuum the pipeline's Delta tables now (by the running stream job, else here)")
def maintain_tables(context: OpExecutionContext, config: MaintenanceRunConfig, binlake: BinlakeResource):
    from cdc_core.routes import Router
    from pipelines.lake.control_store import ControlStore
    from pipelines.lake.maintenance.maintainer import maintain
    from pipelines.lake.maintenance.upkeep import upkeep
    from pipelines.lake.tables import open_table, table_uri

    cfg = binlake.load()
    command = f"dagster run {context.run_id} ({context.job_name})"
    reports = [maintain(cfg, t, command, timeout=config.timeout_seconds) for t in (config.tables or [None])]
    router, runs = Router(cfg.routes), ControlStore.of(cfg).latest_maintenance()
    done = [r for report in reports for r in report.tables if not r.table.startswith("_binlake/")]
    for r in done:
        context.log.info("; ".join(x for x in (f"{r.table}: {r.files_before} → {r.files_after} files",
                                               r.compaction, r.vacuum, r.note) if x))
        dt = open_table(table_uri(cfg.sink.path, r.table), cfg.sink.storage_options)
        if dt is None:
            continue
        metadata = {"binlake/files_before": r.files_before, "binlake/files_after": r.files_after,
                    "binlake/bytes_deleted": MetadataValue.int(r.bytes_deleted),
                    **upkeep_metadata(upkeep(cfg, r.table, dt, runs))}
        sources = [n for n in binlake.tables(cfg) if router.sink(n) == r.table] or [r.table]
        for source in sources:
            context.log_event(AssetObservation(asset_key=asset_key(source), description="maintenance done",
                                               metadata=metadata))
    yield Output(None, metadata={
        "binlake/by": reports[0].by if reports else "-", "binlake/tables": ", ".join(r.table for r in done),
        "binlake/bytes_deleted": MetadataValue.int(sum(r.bytes_deleted for report in reports
                                                       for r in report.tables))})


@job(name=MAINTENANCE_JOB, executor_def=in_process_executor,
     description="Compact and vacuum the Delta tables now (handed to the running stream job if one runs)")
def maintenance_job():
    maintain_tables()


def maintenance_schedule(cron: str) -> ScheduleDefinition:
    """``binlake_maintenance`` at ``cron`` (``dagster.maintenance_cron``); stopped until turned on."""
    return ScheduleDefinition(name="binlake_maintenance_schedule", job=maintenance_job, cron_schedule=cron,
                              default_status=DefaultScheduleStatus.STOPPED)
